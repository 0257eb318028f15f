package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/walbus/walbus/admin"
	"github.com/walbus/walbus/amqpserver/sas"
	"github.com/walbus/walbus/broker"
	"github.com/walbus/walbus/broker/replica"
)

// walbus cluster add and remove change the cluster's membership
// (docs/cluster.md, "Membership"). Every entity has a group of its own,
// so a node joins or leaves each: the command asks every node named for
// its view (GET /cluster), and has each group's leader take the next
// step until every group is done: add a learner, promote it once it has
// caught up; or remove the node. Steps go to the leaders through the
// administration API (a key with Manage rights); a leader that changes
// meanwhile is found on the next round.

// clusterChange is walbus cluster add or remove.
type clusterChange struct {
	add      bool
	node     uint64
	peer     string
	nodes    addrList
	keyName  string
	key      string
	timeout  time.Duration
	out, log io.Writer
}

func clusterChangeCmd(verb string, args []string) int {
	c := clusterChange{add: verb == "add", out: os.Stdout, log: os.Stderr}
	fs := flag.NewFlagSet("walbus cluster "+verb, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Uint64Var(&c.node, "node-id", 0, "the node to "+verb)
	if c.add {
		fs.StringVar(&c.peer, "peer", "", "the new node's peer address, host:port (its --peer-listen or --peers entry)")
	}
	fs.Var(&c.nodes, "http", "the nodes' HTTP addresses, host:port or http(s)://host:port (repeatable, or comma-separated)")
	fs.StringVar(&c.keyName, "key-name", defaultKeyName, "SAS key name (with Manage rights)")
	fs.StringVar(&c.key, "key", defaultKey, "SAS key")
	fs.DurationVar(&c.timeout, "timeout", 5*time.Minute, "how long to wait for every group to take the change")
	err := fs.Parse(args)
	usage := func(msg string) int {
		fmt.Fprintf(os.Stderr, "walbus cluster %s: %s\nRun 'walbus cluster %s --help'.\n", verb, msg, verb)
		return 2
	}
	switch {
	case errors.Is(err, flag.ErrHelp):
		clusterUsage(os.Stdout)
		fs.SetOutput(os.Stdout)
		fs.PrintDefaults()
		return 0
	case err != nil:
		return usage(err.Error())
	case fs.NArg() > 0:
		return usage(fmt.Sprintf("unexpected argument %q", fs.Arg(0)))
	case c.node == 0:
		return usage("name the node: --node-id N")
	case c.add && c.peer == "":
		return usage("name the new node's peer address: --peer host:port")
	case len(c.nodes) == 0:
		return usage("name the nodes: --http host:port,...")
	}
	if err := c.run(); err != nil {
		fmt.Fprintf(os.Stderr, "walbus cluster %s: %v\n", verb, err)
		return 1
	}
	return 0
}

// run tells every node of the new peer (add), then takes each group's
// steps until all are done or the timeout passes.
func (c *clusterChange) run() error {
	deadline := time.Now().Add(c.timeout)
	if c.add {
		if err := c.tell(deadline); err != nil {
			return err
		}
	}
	for {
		left, err := c.round()
		if err != nil {
			return err
		}
		if len(left) == 0 {
			what := "a voter of"
			if !c.add {
				what = "out of"
				c.gone()
			}
			fmt.Fprintf(c.out, "node %d is %s every group\n", c.node, what)
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("after %v, not done: %s", c.timeout, strings.Join(left, "; "))
		}
		time.Sleep(300 * time.Millisecond)
	}
}

// tell tells every node of the new peer, and has the metadata group
// record it, so that a node down now learns it when it is back. It asks
// again, round after round until deadline, while no node has taken it:
// the metadata group may be electing a leader (its leader is the node
// that died, say).
func (c *clusterChange) tell(deadline time.Time) error {
	left := slices.Clone(c.nodes)
	took := 0
	for {
		var again addrList
		for _, addr := range left {
			if err := c.post(addr, "peer", admin.PeerRequest{Node: c.node, Peer: c.peer}); err != nil {
				fmt.Fprintf(c.log, "node at %s not told of node %d: %v\n", addr, c.node, err)
				again = append(again, addr)
				continue
			}
			took++
		}
		left = again
		switch {
		case took > 0:
			return nil
		case time.Now().After(deadline):
			return errors.New("no node took the new peer")
		}
		time.Sleep(300 * time.Millisecond)
	}
}

// gone has the metadata group record that the node removed left the
// cluster, through the first node that takes it: every node then stops
// sending to it.
func (c *clusterChange) gone() {
	for _, addr := range c.nodes {
		err := c.post(addr, "peer", admin.PeerRequest{Node: c.node})
		if err == nil {
			fmt.Fprintf(c.out, "node %d is no longer a peer\n", c.node)
			return
		}
		fmt.Fprintf(c.log, "node at %s did not record that node %d left: %v\n", addr, c.node, err)
	}
	fmt.Fprintf(c.log, "no node recorded that node %d left: the nodes go on trying to reach it (run the command again)\n", c.node)
}

// round looks at every node's view once, asks each group's leader for
// its next step, and returns what is not done yet.
func (c *clusterChange) round() ([]string, error) {
	answers := askNodes(c.nodes)
	// Each entity's group as its leader (the newest term's) reports it.
	leaders := map[string]*broker.GroupStatus{}
	at := map[string]string{}
	answered := 0
	for _, a := range answers {
		if a.status == nil {
			continue
		}
		answered++
		for i := range a.status.Groups {
			g := &a.status.Groups[i]
			if _, ok := leaders[g.Entity]; !ok {
				leaders[g.Entity] = nil
			}
			if g.Role == "leader" && (leaders[g.Entity] == nil || g.Term > leaders[g.Entity].Term) {
				leaders[g.Entity], at[g.Entity] = g, a.http
			}
		}
	}
	if answered == 0 {
		return nil, errors.New("no node answered")
	}
	var left []string
	for _, entity := range slices.Sorted(maps.Keys(leaders)) {
		g := leaders[entity]
		if g == nil {
			left = append(left, entity+": no leader known")
			continue
		}
		step := c.next(g)
		if step == "" {
			continue
		}
		if step == "wait" {
			pr := g.Progress[c.node]
			left = append(left, fmt.Sprintf("%s: learner %d catching up (%d of %d)", entity, c.node, pr.Match, g.Commit))
			continue
		}
		left = append(left, fmt.Sprintf("%s: %s %d", entity, step, c.node))
		err := c.post(at[entity], "change", admin.ChangeRequest{Entity: entity, Step: step, Node: c.node})
		if err == nil {
			fmt.Fprintf(c.out, "%s: %s %d\n", entity, step, c.node)
		} else {
			fmt.Fprintf(c.log, "%s: %s %d at %s: %v\n", entity, step, c.node, at[entity], err)
		}
	}
	return left, nil
}

// next is the step g's leader takes next: "" when the group is done,
// "wait" while a learner catches up.
func (c *clusterChange) next(g *broker.GroupStatus) string {
	voter, learner := slices.Contains(g.Voters, c.node), slices.Contains(g.Learners, c.node)
	switch {
	case !c.add && (voter || learner):
		return replica.Remove
	case !c.add || voter:
		return ""
	case !learner:
		return replica.AddLearner
	}
	// A learner is promoted once it holds what the group committed: a
	// voter far behind would slow every commit it is needed for.
	if pr, ok := g.Progress[c.node]; ok && pr.Match >= g.Commit && pr.State == "replicate" {
		return replica.Promote
	}
	return "wait"
}

// post sends body to one of the administration API's cluster requests on
// the node at addr.
func (c *clusterChange) post(addr, op string, body any) error {
	b, _ := json.Marshal(body)
	req, err := http.NewRequest(http.MethodPost, nodeBase(addr)+"/$walbus/cluster/"+op, bytes.NewReader(b))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", sas.Sign("sb://"+req.URL.Host+"/",
		sas.Key{Name: c.keyName, Value: c.key}, time.Now().Add(time.Hour), sas.GoStyle))
	req.Header.Set("Content-Type", "application/json")
	client := &http.Client{Timeout: 40 * time.Second} // a step waits for its commit (30 s at most)
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNoContent {
		return nil
	}
	var e struct {
		Error string `json:"error"`
	}
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	if json.Unmarshal(msg, &e) == nil && e.Error != "" {
		return fmt.Errorf("%s: %s", resp.Status, e.Error)
	}
	return fmt.Errorf("%s: %s", resp.Status, strings.TrimSpace(string(msg)))
}
