package main

import (
	"cmp"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/walbus/walbus/admin"
	"github.com/walbus/walbus/broker"
	"github.com/walbus/walbus/broker/replica"
)

// walbus cluster status: every node named is asked for its GET /cluster,
// and the answers are merged into one view of the cluster's members and
// of each entity's group (docs/cluster.md).

// clusterAskTimeout bounds each node's answer: a node that is down or
// paused must not hold the others' report.
const clusterAskTimeout = 2 * time.Second

func clusterUsage(w io.Writer) {
	fmt.Fprint(w, `Usage:
  walbus cluster status --http HOST:PORT[,HOST:PORT...] [--json]
      ask each node (its --http address) how it sees the cluster, and print
      the members and, for each entity's group, its leader, term, commit
      index, and each node's applied index and lag behind the commit

  walbus cluster add --node-id N --peer HOST:PORT --http HOST:PORT,... [--timeout 5m]
      add node N (started with --join) to every entity's group: each node
      named learns its peer address, then each group's leader adds it as a
      learner and promotes it to voter once it has caught up
  walbus cluster remove --node-id N --http HOST:PORT,... [--timeout 5m]
      remove node N from every entity's group (its leader's, wherever that is)

status exits 1 when no node answered; add and remove exit 1 when the
change is not done within the timeout; all exit 2 for a usage error.

Flags:
`)
}

// addrList is a repeatable, comma-separated flag of addresses.
type addrList []string

func (a *addrList) String() string { return strings.Join(*a, ",") }

func (a *addrList) Set(v string) error {
	for part := range strings.SplitSeq(v, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			return errors.New("an empty address")
		}
		*a = append(*a, part)
	}
	return nil
}

// clusterCmd runs `walbus cluster VERB ...`.
func clusterCmd(args []string) int {
	if len(args) > 0 && (args[0] == "help" || args[0] == "-h" || args[0] == "--help") {
		clusterUsage(os.Stdout)
		return 0
	}
	if len(args) > 0 && (args[0] == "add" || args[0] == "remove") {
		return clusterChangeCmd(args[0], args[1:])
	}
	if len(args) == 0 || args[0] != "status" {
		if len(args) > 0 {
			fmt.Fprintf(os.Stderr, "walbus cluster: unknown command %q\n", args[0])
		}
		clusterUsage(os.Stderr)
		return 2
	}
	fs := flag.NewFlagSet("walbus cluster status", flag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors are reported once, below
	var nodes addrList
	fs.Var(&nodes, "http", "a node's HTTP address, host:port or http(s)://host:port (repeatable, or comma-separated)")
	asJSON := fs.Bool("json", false, "print the merged report as JSON")
	err := fs.Parse(args[1:])
	switch {
	case errors.Is(err, flag.ErrHelp):
		clusterUsage(os.Stdout)
		fs.SetOutput(os.Stdout)
		fs.PrintDefaults()
		return 0
	case err != nil:
		fmt.Fprintf(os.Stderr, "walbus cluster status: %v\nRun 'walbus cluster status --help'.\n", err)
		return 2
	case fs.NArg() > 0:
		fmt.Fprintf(os.Stderr, "walbus cluster status: unexpected argument %q\n", fs.Arg(0))
		return 2
	case len(nodes) == 0:
		fmt.Fprintln(os.Stderr, "walbus cluster status: name at least one node: --http host:port")
		return 2
	}
	report := mergeClusterAnswers(askNodes(nodes))
	if *asJSON {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		enc.Encode(report)
	} else {
		printClusterReport(os.Stdout, report)
		for _, w := range report.Warnings {
			fmt.Fprintln(os.Stderr, "walbus cluster status:", w)
		}
	}
	if report.Answered == 0 {
		return 1
	}
	return 0
}

// nodeAnswer is one node's GET /cluster, or why there is none.
type nodeAnswer struct {
	http   string
	status *admin.ClusterStatus
	err    error
}

// askNodes asks every address at once, each for at most
// clusterAskTimeout, and returns the answers in the order asked.
func askNodes(addrs []string) []nodeAnswer {
	client := &http.Client{Timeout: clusterAskTimeout}
	answers := make([]nodeAnswer, len(addrs))
	var wg sync.WaitGroup
	for i, addr := range addrs {
		wg.Go(func() {
			st, err := askNode(client, addr)
			answers[i] = nodeAnswer{http: addr, status: st, err: err}
		})
	}
	wg.Wait()
	return answers
}

func askNode(client *http.Client, addr string) (*admin.ClusterStatus, error) {
	resp, err := client.Get(nodeBase(addr) + "/cluster")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		if resp.StatusCode == http.StatusNotFound {
			return nil, errors.New("404: not a node of a cluster")
		}
		return nil, fmt.Errorf("%s: %s", resp.Status, strings.TrimSpace(string(body)))
	}
	var st admin.ClusterStatus
	if err := json.Unmarshal(body, &st); err != nil {
		return nil, fmt.Errorf("its answer: %w", err)
	}
	return &st, nil
}

// nodeBase is the URL of the node at addr, host:port (plain HTTP) or a
// URL, without a trailing slash.
func nodeBase(addr string) string {
	if !strings.Contains(addr, "://") {
		addr = "http://" + addr
	}
	return strings.TrimRight(addr, "/")
}

// clusterReport is the nodes' answers merged: what `walbus cluster
// status --json` prints.
type clusterReport struct {
	Cluster      string         `json:"cluster"`
	Answered     int            `json:"answered"` // nodes that answered
	Members      []memberReport `json:"members"`
	NotAnswering []notAnswering `json:"notAnswering"`
	Groups       []groupReport  `json:"groups"`
	Warnings     []string       `json:"warnings,omitempty"`
}

// memberReport is one node of the cluster, as the answers name them.
type memberReport struct {
	Node     uint64 `json:"node"`
	Peer     string `json:"peer"`           // its peer address
	HTTP     string `json:"http,omitempty"` // where it answered
	Answered bool   `json:"answered"`
}

// notAnswering is an address asked that gave no status.
type notAnswering struct {
	HTTP  string `json:"http"`
	Error string `json:"error"`
}

// groupReport is one entity's group across the nodes that answered.
type groupReport struct {
	Entity string `json:"entity"`
	Group  uint64 `json:"group"`
	Leader uint64 `json:"leader"` // 0 when no answer names one
	Term   uint64 `json:"term"`   // the highest any node knows
	// Commit is the leader's commit index when the leader answered, else
	// the highest any node knows.
	Commit   uint64          `json:"commit"`
	Replicas []replicaReport `json:"replicas"`
}

// replicaReport is one node's member of a group: its own view when it
// answered, and the leader's view of it when the leader answered.
type replicaReport struct {
	Node     uint64  `json:"node"`
	Answered bool    `json:"answered"`
	Role     string  `json:"role,omitempty"`
	Term     uint64  `json:"term,omitempty"`
	Applied  *uint64 `json:"applied,omitempty"`
	// Lag is the group's commit minus this node's applied index, 0 where
	// the node's report is the newer (the nodes answer at different
	// moments).
	Lag      *uint64           `json:"lag,omitempty"`
	Progress *replica.Progress `json:"progress,omitempty"`
}

// mergeClusterAnswers makes one report of the nodes' answers. It decides
// nothing the answers do not say: a group's leader is the node that says
// it leads in the highest term any node knows, or the leader that a node
// in that term names.
func mergeClusterAnswers(answers []nodeAnswer) clusterReport {
	r := clusterReport{Members: []memberReport{}, NotAnswering: []notAnswering{}, Groups: []groupReport{}}
	members := map[uint64]*memberReport{}
	member := func(id uint64) *memberReport {
		if members[id] == nil {
			members[id] = &memberReport{Node: id}
		}
		return members[id]
	}
	byEntity := map[string][]broker.GroupStatus{}
	for _, a := range answers {
		if a.status == nil {
			r.NotAnswering = append(r.NotAnswering, notAnswering{HTTP: a.http, Error: a.err.Error()})
			continue
		}
		st := a.status
		r.Answered++
		if r.Cluster == "" {
			r.Cluster = st.Cluster
		} else if st.Cluster != r.Cluster {
			r.Warnings = append(r.Warnings, fmt.Sprintf("%s (node %d) is of cluster %q, not %q", a.http, st.Node, st.Cluster, r.Cluster))
		}
		for id, peer := range st.Peers {
			if m := member(id); m.Peer == "" {
				m.Peer = peer
			} else if m.Peer != peer {
				r.Warnings = append(r.Warnings, fmt.Sprintf("%s puts node %d at %s, another node at %s", a.http, id, peer, m.Peer))
			}
		}
		m := member(st.Node)
		if m.Answered {
			r.Warnings = append(r.Warnings, fmt.Sprintf("node %d answered at %s and at %s", st.Node, m.HTTP, a.http))
			continue
		}
		m.Answered, m.HTTP = true, a.http
		for _, g := range st.Groups {
			byEntity[g.Entity] = append(byEntity[g.Entity], g)
		}
	}
	for _, id := range sortedKeys(members) {
		r.Members = append(r.Members, *members[id])
	}
	for _, entity := range sortedKeys(byEntity) {
		r.Groups = append(r.Groups, mergeGroup(entity, byEntity[entity]))
	}
	return r
}

// mergeGroup is one entity's group from its members' statuses.
func mergeGroup(entity string, views []broker.GroupStatus) groupReport {
	g := groupReport{Entity: entity, Group: views[0].Group, Replicas: []replicaReport{}}
	for _, v := range views {
		g.Term = max(g.Term, v.Term)
	}
	var leader *broker.GroupStatus
	for i, v := range views {
		if v.Term != g.Term {
			continue
		}
		if v.Role == "leader" {
			leader = &views[i]
			g.Leader = v.ID
			break
		}
		if g.Leader == 0 {
			g.Leader = v.Leader
		}
	}
	if leader != nil {
		g.Commit = leader.Commit
	} else {
		for _, v := range views {
			g.Commit = max(g.Commit, v.Commit)
		}
	}
	replicas := map[uint64]*replicaReport{}
	for _, v := range views {
		applied, lag := v.Applied, uint64(0)
		if applied < g.Commit {
			lag = g.Commit - applied
		}
		replicas[v.ID] = &replicaReport{Node: v.ID, Answered: true, Role: v.Role, Term: v.Term, Applied: &applied, Lag: &lag}
	}
	if leader != nil {
		for id, pr := range leader.Progress {
			if replicas[id] == nil {
				replicas[id] = &replicaReport{Node: id}
			}
			replicas[id].Progress = &pr
		}
	}
	for _, id := range sortedKeys(replicas) {
		g.Replicas = append(g.Replicas, *replicas[id])
	}
	return g
}

func sortedKeys[K cmp.Ordered, V any](m map[K]V) []K {
	keys := make([]K, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// printClusterReport prints the report as plain tables: the members,
// the addresses that did not answer, then a row per entity's group with
// a column per node.
func printClusterReport(w io.Writer, r clusterReport) {
	asked := r.Answered + len(r.NotAnswering)
	name := r.Cluster
	if name == "" {
		name = "?"
	}
	fmt.Fprintf(w, "cluster %s: %d of %d nodes asked answered\n", name, r.Answered, asked)
	if len(r.Members) > 0 {
		fmt.Fprintln(w)
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "node\tpeer\thttp\tanswered")
		for _, m := range r.Members {
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\n", m.Node, orDash(m.Peer), orDash(m.HTTP), yesNo(m.Answered))
		}
		tw.Flush()
	}
	if len(r.NotAnswering) > 0 {
		fmt.Fprintln(w)
		for _, n := range r.NotAnswering {
			fmt.Fprintf(w, "not answering: %s (%s)\n", n.HTTP, n.Error)
		}
	}
	if len(r.Groups) == 0 {
		return
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "each node: its applied index (lag behind the commit), and how the leader sends to it")
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	head := []string{"entity", "group", "leader", "term", "commit"}
	for _, m := range r.Members {
		head = append(head, fmt.Sprint("node ", m.Node))
	}
	fmt.Fprintln(tw, strings.Join(head, "\t"))
	for _, g := range r.Groups {
		row := []string{g.Entity, fmt.Sprint(g.Group), "-", fmt.Sprint(g.Term), fmt.Sprint(g.Commit)}
		if g.Leader != 0 {
			row[2] = fmt.Sprint(g.Leader)
		}
		for _, m := range r.Members {
			i := slices.IndexFunc(g.Replicas, func(rep replicaReport) bool { return rep.Node == m.Node })
			if i < 0 {
				row = append(row, "-")
				continue
			}
			row = append(row, replicaCell(g.Replicas[i], g))
		}
		fmt.Fprintln(tw, strings.Join(row, "\t"))
	}
	tw.Flush()
}

// replicaCell is a node's cell of group g's row: "12 (lag 0) replicate",
// "12 (lag 0) leader", "? probe, inactive" for a node that did not answer.
func replicaCell(rep replicaReport, g groupReport) string {
	var parts []string
	if rep.Answered {
		parts = append(parts, fmt.Sprintf("%d (lag %d)", *rep.Applied, *rep.Lag))
	} else {
		parts = append(parts, "?")
	}
	switch {
	case rep.Node == g.Leader:
		parts = append(parts, "leader")
	case rep.Progress != nil:
		state := rep.Progress.State
		if rep.Progress.Learner {
			state += ", learner"
		}
		if !rep.Progress.Active {
			state += ", inactive"
		}
		parts = append(parts, state)
	case rep.Answered && rep.Role != "follower":
		parts = append(parts, rep.Role) // a candidate, or a leader deposed
	}
	if rep.Answered && rep.Term != g.Term {
		parts = append(parts, fmt.Sprintf("in term %d", rep.Term))
	}
	return strings.Join(parts, " ")
}

func orDash(s string) string { return cmp.Or(s, "-") }

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}
