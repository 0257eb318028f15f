package main

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	pb "go.etcd.io/raft/v3/raftpb"

	"github.com/walbus/walbus/admin"
	"github.com/walbus/walbus/broker"
	"github.com/walbus/walbus/broker/replica"
	"github.com/walbus/walbus/broker/replica/peer"
)

// clusterOptions are serve's cluster flags (docs/cluster.md). The nodes
// come from --peers or from --cluster-file; --node-id says which one this
// is.
type clusterOptions struct {
	name, file, listen, peers string
	node                      uint64
	tick, balance             time.Duration
	join                      bool
	tlsCert, tlsKey, tlsCA    string
	advertiseHTTP             string
}

func (c *clusterOptions) flags(fs *flag.FlagSet) {
	fs.StringVar(&c.name, "cluster", "", "run as a node of the cluster of this name (docs/cluster.md): entity logs replicated with Raft")
	fs.StringVar(&c.file, "cluster-file", "", `JSON file of the cluster: {"cluster": "name", "nodes": [{"id": 1, "peer": "host:port"}, ...]}`)
	fs.Uint64Var(&c.node, "node-id", 0, "this node's id in the cluster (1 or more)")
	fs.StringVar(&c.listen, "peer-listen", "", "address to listen on for the other nodes (default: this node's address in --peers or the cluster file)")
	fs.StringVar(&c.peers, "peers", "", "the cluster's nodes, this one included: 1=host:port,2=host:port,3=host:port")
	fs.DurationVar(&c.tick, "raft-tick", 100*time.Millisecond, "Raft's tick: a leader's heartbeat; an election takes 10")
	fs.StringVar(&c.tlsCert, "peer-tls-cert", "", "this node's certificate (PEM) for mutual TLS between the nodes: it must allow server and client authentication")
	fs.StringVar(&c.tlsKey, "peer-tls-key", "", "its private key (PEM)")
	fs.StringVar(&c.tlsCA, "peer-tls-ca", "", "the certificate authority (PEM) whose certificates the other nodes must present")
	fs.DurationVar(&c.balance, "leader-balance", 5*time.Second, "how often the node hands groups it leads beyond its share to other nodes (0: never)")
	fs.BoolVar(&c.join, "join", false, "join a cluster that runs: entities this node has no data for wait for `walbus cluster add` (docs/cluster.md)")
	fs.StringVar(&c.advertiseHTTP, "advertise-http", "", "the URL the other nodes reach this node's HTTP listener at, e.g. http://10.0.0.5:5300: they pass on to it the administration requests it must serve (default: https with --tls-cert, which they must trust, else http; --http's host, or the peer address's if --http names none; --http's port)")
}

// on reports whether serve runs as a cluster's node.
func (c *clusterOptions) on() bool { return c.name != "" || c.file != "" }

// clusterFile is the cluster file's form.
type clusterFile struct {
	Cluster string `json:"cluster"`
	Nodes   []struct {
		ID   uint64 `json:"id"`
		Peer string `json:"peer"`
	} `json:"nodes"`
}

// clusterConfig is the cluster as the flags and the file say.
type clusterConfig struct {
	name   string
	node   uint64
	listen string
	nodes  map[uint64]string // every node's peer address, this one's included
	tls    *tls.Config       // nil: the peer links are plain TCP
	// advertise is --advertise-http: the URL the other nodes reach this
	// node's HTTP listener at, "" to derive it (httpURL).
	advertise string
}

func (c *clusterOptions) resolve() (*clusterConfig, error) {
	cfg := &clusterConfig{name: c.name, node: c.node, listen: c.listen, nodes: map[uint64]string{}}
	if c.advertiseHTTP != "" {
		u, err := checkNodeURL(c.advertiseHTTP)
		if err != nil {
			return nil, fmt.Errorf("--advertise-http: %w", err)
		}
		cfg.advertise = u
	}
	if c.file != "" {
		b, err := os.ReadFile(c.file)
		if err != nil {
			return nil, err
		}
		var f clusterFile
		dec := json.NewDecoder(strings.NewReader(string(b)))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&f); err != nil {
			return nil, fmt.Errorf("--cluster-file %s: %w", c.file, err)
		}
		if cfg.name == "" {
			cfg.name = f.Cluster
		} else if f.Cluster != "" && f.Cluster != cfg.name {
			return nil, fmt.Errorf("--cluster %q, and the cluster file names %q", cfg.name, f.Cluster)
		}
		for _, n := range f.Nodes {
			if err := cfg.add(n.ID, n.Peer); err != nil {
				return nil, fmt.Errorf("--cluster-file %s: %w", c.file, err)
			}
		}
	}
	if c.peers != "" {
		for _, part := range strings.Split(c.peers, ",") {
			id, addr, ok := strings.Cut(strings.TrimSpace(part), "=")
			n, err := strconv.ParseUint(id, 10, 64)
			if !ok || err != nil {
				return nil, fmt.Errorf("--peers: %q is not id=host:port", part)
			}
			if err := cfg.add(n, addr); err != nil {
				return nil, fmt.Errorf("--peers: %w", err)
			}
		}
	}
	switch {
	case cfg.name == "":
		return nil, errors.New("a cluster needs a name: --cluster")
	case cfg.node == 0:
		return nil, errors.New("a cluster's node needs --node-id")
	case cfg.nodes[cfg.node] == "":
		return nil, fmt.Errorf("node %d is not among the cluster's nodes (--peers or --cluster-file)", cfg.node)
	case len(cfg.nodes) < 3:
		return nil, fmt.Errorf("a cluster has three nodes or more; %d given", len(cfg.nodes))
	}
	if cfg.listen == "" {
		cfg.listen = cfg.nodes[cfg.node]
	}
	switch n := btoi(c.tlsCert != "") + btoi(c.tlsKey != "") + btoi(c.tlsCA != ""); {
	case n == 3:
		cert, err := tls.LoadX509KeyPair(c.tlsCert, c.tlsKey)
		if err != nil {
			return nil, fmt.Errorf("--peer-tls-cert and --peer-tls-key: %w", err)
		}
		pem, err := os.ReadFile(c.tlsCA)
		if err != nil {
			return nil, fmt.Errorf("--peer-tls-ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--peer-tls-ca %s: no certificate in it", c.tlsCA)
		}
		// Both ends present a certificate of the cluster's authority:
		// the connection is the node pair's, each way.
		cfg.tls = &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: pool, ClientCAs: pool,
			ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS13}
	case n > 0:
		return nil, errors.New("mutual TLS between the nodes needs --peer-tls-cert, --peer-tls-key and --peer-tls-ca")
	}
	return cfg, nil
}

// checkNodeURL checks a node's HTTP URL as --advertise-http gives it:
// http or https, a host, nothing after the port. It returns it without a
// trailing slash.
func checkNodeURL(s string) (string, error) {
	u, err := url.Parse(s)
	switch {
	case err != nil:
		return "", err
	case u.Scheme != "http" && u.Scheme != "https":
		return "", fmt.Errorf("%q is not an http:// or https:// URL", s)
	case u.Host == "" || u.Hostname() == "":
		return "", fmt.Errorf("%q names no host", s)
	case strings.Trim(u.Path, "/") != "" || u.RawQuery != "" || u.Fragment != "" || u.User != nil:
		return "", fmt.Errorf("%q has more than a scheme, a host and a port", s)
	case len(s) > peer.MaxAdvertise:
		return "", fmt.Errorf("%q is over %d bytes", s, peer.MaxAdvertise)
	}
	return u.Scheme + "://" + u.Host, nil
}

// httpURL is the URL this node advertises to the others for its HTTP
// listener (the administration API): --advertise-http, or else one made
// of the listener's. httpFlag is --http, bound the address the listener
// took ("" for none: then the node advertises nothing, unless
// --advertise-http), and withTLS whether it takes TLS. The host is --http's
// if it names one, else the host of this node's peer address (the
// address the others reach it at); the port is the one bound, which
// --http may have left to the kernel.
func (c *clusterConfig) httpURL(httpFlag, bound string, withTLS bool) string {
	if c.advertise != "" || bound == "" {
		return c.advertise
	}
	scheme := "http"
	if withTLS {
		scheme = "https"
	}
	return c.listenerURL(scheme, httpFlag, bound)
}

// amqpURL is the address this node advertises to the others for its AMQP
// listener, where they pass on the links to the entities it leads: amqps
// when walbus has a certificate (the others must trust it, as for
// httpURL), else amqp; the host and port as httpURL takes them, from
// amqpFlag (--amqp) and the address it bound ("" for none: then the node
// advertises none).
func (c *clusterConfig) amqpURL(amqpFlag, bound string, withTLS bool) string {
	if bound == "" {
		return ""
	}
	scheme := "amqp"
	if withTLS {
		scheme = "amqps"
	}
	return c.listenerURL(scheme, amqpFlag, bound)
}

// listenerURL is scheme://host:port for a listener of this node: the host
// of flag, the address the listener was asked for, if it names one, else
// the host of this node's peer address (where the others reach it); the
// port the listener bound.
func (c *clusterConfig) listenerURL(scheme, flag, bound string) string {
	host, _, _ := net.SplitHostPort(flag)
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		host, _, _ = net.SplitHostPort(c.nodes[c.node])
	}
	_, port, _ := net.SplitHostPort(bound)
	return scheme + "://" + net.JoinHostPort(host, port)
}

// advertised is what a node tells the others of itself in its peer hello:
// the URLs of its HTTP and AMQP listeners, "" for none.
type advertised struct {
	HTTP string `json:"http,omitempty"`
	AMQP string `json:"amqp,omitempty"`
}

// encode is a as the hello carries it: a JSON object of at most
// peer.MaxAdvertise bytes.
func (a advertised) encode() (string, error) {
	b, err := json.Marshal(a)
	if err != nil {
		return "", err
	}
	if len(b) > peer.MaxAdvertise {
		return "", fmt.Errorf("the URLs this node advertises take %d bytes, the most is %d: shorten --advertise-http", len(b), peer.MaxAdvertise)
	}
	return string(b), nil
}

// parseAdvertised reads what a node advertised: the JSON object, or the
// URL of its HTTP listener alone, as nodes advertised it before the AMQP
// proxy.
func parseAdvertised(s string) advertised {
	var a advertised
	if strings.HasPrefix(s, "{") && json.Unmarshal([]byte(s), &a) == nil {
		return a
	}
	return advertised{HTTP: s}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

func (c *clusterConfig) add(id uint64, addr string) error {
	if id == 0 || addr == "" {
		return fmt.Errorf("node %d at %q: a node has an id of 1 or more and an address", id, addr)
	}
	if old, ok := c.nodes[id]; ok && old != addr {
		return fmt.Errorf("node %d is at %s and at %s", id, old, addr)
	}
	c.nodes[id] = addr
	return nil
}

// learnedPeersFile, in the data directory, holds the nodes an operator
// added (walbus cluster add) that the node's flags or cluster file do not
// name: {"nodes": {"4": "host:port"}}.
const learnedPeersFile = "cluster-peers.json"

type learnedPeers struct {
	Nodes map[uint64]string `json:"nodes"`
}

// learn adds the nodes the data directory's learnedPeersFile names and
// the flags do not (the flags win where both name a node).
func (c *clusterConfig) learn(dir string, logger *slog.Logger) error {
	b, err := os.ReadFile(filepath.Join(dir, learnedPeersFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var lp learnedPeers
	if err := json.Unmarshal(b, &lp); err != nil {
		return fmt.Errorf("%s: %w", filepath.Join(dir, learnedPeersFile), err)
	}
	for id, addr := range lp.Nodes {
		switch old, ok := c.nodes[id]; {
		case !ok:
			if err := c.add(id, addr); err != nil {
				return fmt.Errorf("%s: %w", filepath.Join(dir, learnedPeersFile), err)
			}
		case old != addr:
			logger.Warn("a node added later is at another address than the flags say; the flags win", "node", id,
				"flags", old, "added", addr)
		}
	}
	return nil
}

// clusterNode is a node's side of the cluster: the peer transport and the
// broker's options for it (with Counters of their own, for /metrics). The
// broker is set once it is open; messages that come before are dropped
// (Raft sends again).
type clusterNode struct {
	cfg       *clusterConfig
	dir       string     // the data directory
	self      advertised // what this node advertises of its listeners
	log       *slog.Logger
	transport *peer.Transport
	broker    atomic.Pointer[broker.Broker]
	mu        sync.Mutex // cfg.nodes, once the node runs
}

// AddPeer makes node id at addr one of the cluster's nodes for the
// transport, now and after a restart (learnedPeersFile): walbus cluster
// add tells every node before it adds id to the groups.
func (n *clusterNode) AddPeer(id uint64, addr string) error {
	if _, _, err := net.SplitHostPort(addr); err != nil || id == 0 {
		return fmt.Errorf("node %d at %q: want an id of 1 or more and host:port", id, addr)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if id == n.cfg.node {
		return nil
	}
	if old, ok := n.cfg.nodes[id]; ok && old == addr {
		return nil
	}
	lp := learnedPeers{Nodes: map[uint64]string{}}
	if b, err := os.ReadFile(filepath.Join(n.dir, learnedPeersFile)); err == nil {
		if err := json.Unmarshal(b, &lp); err != nil || lp.Nodes == nil {
			lp.Nodes = map[uint64]string{}
		}
	}
	lp.Nodes[id] = addr
	b, _ := json.MarshalIndent(lp, "", "  ")
	if err := writeFileDurable(filepath.Join(n.dir, learnedPeersFile), append(b, '\n')); err != nil {
		return err
	}
	n.cfg.nodes[id] = addr
	n.transport.SetPeer(id, addr)
	return nil
}

// onPeer follows the metadata group's record of node id's peer address
// (broker.Cluster.OnPeer): a node added is one of the transport's peers,
// one that left is forgotten.
func (n *clusterNode) onPeer(id uint64, addr string) {
	if id == n.cfg.node {
		return
	}
	if addr != "" {
		if err := n.AddPeer(id, addr); err != nil {
			n.log.Warn("cannot take a node the metadata group names", "node", id, "peer", addr, "err", err)
		}
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if _, ok := n.cfg.nodes[id]; !ok {
		return
	}
	delete(n.cfg.nodes, id)
	n.transport.RemovePeer(id)
	n.log.Info("node left the cluster; no longer a peer", "node", id)
	lp := learnedPeers{}
	if b, err := os.ReadFile(filepath.Join(n.dir, learnedPeersFile)); err == nil && json.Unmarshal(b, &lp) == nil && lp.Nodes[id] != "" {
		delete(lp.Nodes, id)
		b, _ := json.MarshalIndent(lp, "", "  ")
		if err := writeFileDurable(filepath.Join(n.dir, learnedPeersFile), append(b, '\n')); err != nil {
			n.log.Warn("cannot forget a node that left in "+learnedPeersFile, "node", id, "err", err)
		}
	}
}

// writeFileDurable writes path whole or not at all: a temporary file,
// fsynced, renamed over it, and the directory fsynced.
func writeFileDurable(path string, b []byte) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o640)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return err
	}
	d, err := os.Open(filepath.Dir(path))
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// startCluster starts the node's peer transport, which tells the other
// nodes the URLs of this node's listeners, self (httpURL, amqpURL).
func startCluster(c *clusterConfig, tick time.Duration, self advertised, logger *slog.Logger) (*clusterNode, *broker.Cluster, error) {
	advertise, err := self.encode()
	if err != nil {
		return nil, nil, err
	}
	n := &clusterNode{cfg: c, self: self, log: logger}
	peers := map[uint64]string{}
	var ids []uint64
	for id, addr := range c.nodes {
		ids = append(ids, id)
		if id != c.node {
			peers[id] = addr
		}
	}
	slices.Sort(ids)
	tr, err := peer.New(peer.Config{Cluster: c.name, ID: c.node, Listen: c.listen, Peers: peers, Logger: logger, TLS: c.tls,
		Advertise: advertise,
		Deliver: func(group uint64, m *pb.Message) {
			if b := n.broker.Load(); b != nil {
				b.Step(group, m)
			}
		},
		SnapshotDone: func(group, to uint64, ok bool) {
			if b := n.broker.Load(); b != nil {
				b.ReportSnapshot(group, to, ok)
			}
		},
		Unreachable: func(to uint64) {
			if b := n.broker.Load(); b != nil {
				b.ReportUnreachable(to)
			}
		}})
	if err != nil {
		return nil, nil, fmt.Errorf("cluster %s: listen for peers: %w", c.name, err)
	}
	n.transport = tr
	logger.Info("listening", "peers", tr.Addr(), "cluster", c.name, "node", c.node, "advertise", advertise)
	return n, &broker.Cluster{ID: c.node, Peers: ids, Tick: tick, Counters: &replica.Counters{},
		Send: func(group uint64, m *pb.Message) { tr.Send(group, []*pb.Message{m}) }}, nil
}

// nodeURL is the URL of node id's HTTP listener, as that node advertised
// it (this node's own, for its id): where the administration API passes
// on a request another node must serve. It is false for a node that has
// advertised none, or not yet connected. It is safe to call from any
// goroutine.
func (n *clusterNode) nodeURL(id uint64) (string, bool) {
	u := n.self.HTTP
	if id != n.cfg.node {
		u = parseAdvertised(n.transport.Advertised(id)).HTTP
	}
	return u, u != ""
}

// amqpAddr is the address of node id's AMQP listener, as that node
// advertised it: where this node passes on the links and $management
// requests for the entities id leads (amqpserver.Config.Leader). It is
// false for this node, and for one that has advertised none or not yet
// connected. It is safe to call from any goroutine.
func (n *clusterNode) amqpAddr(id uint64) (string, bool) {
	if id == n.cfg.node {
		return "", false
	}
	a := parseAdvertised(n.transport.Advertised(id)).AMQP
	return a, a != ""
}

// status is the node as GET /cluster shows it, b's groups included.
func (n *clusterNode) status(b *broker.Broker) admin.ClusterStatus {
	n.mu.Lock()
	peers := maps.Clone(n.cfg.nodes)
	n.mu.Unlock()
	urls := map[uint64]string{}
	for id := range peers {
		if u, ok := n.nodeURL(id); ok {
			urls[id] = u
		}
	}
	return admin.ClusterStatus{Node: n.cfg.node, Cluster: n.cfg.name, Peers: peers, HTTP: urls, Groups: b.ClusterStatus()}
}
