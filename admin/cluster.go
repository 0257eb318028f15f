package admin

import (
	"encoding/json"
	"net/http"

	"github.com/walbus/walbus/broker"
)

// ClusterStatus is a cluster's node as GET /cluster shows it: which node
// it is, the cluster's nodes, and each entity's group as this node's
// member sees it (docs/cluster.md).
type ClusterStatus struct {
	Node    uint64               `json:"node"`
	Cluster string               `json:"cluster"`
	Peers   map[uint64]string    `json:"peers"` // every node's peer address, this one's included
	Groups  []broker.GroupStatus `json:"groups"`
}

// ClusterHealth is what /health says of a cluster's node: which node it
// is, its role, the entities it leads and those it follows.
type ClusterHealth struct {
	Node uint64 `json:"node"`
	// Role is "leader" when the node leads every entity it holds,
	// "follower" when it leads none, "mixed" otherwise, and "none" when it
	// holds no entity.
	Role      string   `json:"role"`
	Leading   []string `json:"leading"`
	Following []string `json:"following"`
}

// NewClusterHealth is the node's role as its groups say it. An entity is
// led where its member leads and serves (it has applied what came before
// its term), as the entity's actor takes appends only then.
func NewClusterHealth(st ClusterStatus) ClusterHealth {
	h := ClusterHealth{Node: st.Node, Leading: []string{}, Following: []string{}}
	for _, g := range st.Groups {
		if g.Serving {
			h.Leading = append(h.Leading, g.Entity)
		} else {
			h.Following = append(h.Following, g.Entity)
		}
	}
	switch {
	case len(st.Groups) == 0:
		h.Role = "none"
	case len(h.Following) == 0:
		h.Role = "leader"
	case len(h.Leading) == 0:
		h.Role = "follower"
	default:
		h.Role = "mixed"
	}
	return h
}

// SetCluster makes the node a cluster's: f tells its status, which
// GET /cluster shows and from which /health says its role. f is called
// on the HTTP request's goroutine, once per request.
func (h *Health) SetCluster(f func() ClusterStatus) { h.cluster.Store(&f) }

// clusterHandler serves GET /cluster: the node's ClusterStatus, or 404
// on a single node. A request with a SAS token goes to the
// administration API instead, where it reads a queue or topic named
// "cluster".
type clusterHandler struct {
	h   *Health
	api http.Handler
}

func (c clusterHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if hasToken(r) && c.api != nil {
		c.api.ServeHTTP(w, r)
		return
	}
	f := c.h.cluster.Load()
	if f == nil {
		http.Error(w, "not a node of a cluster", http.StatusNotFound)
		return
	}
	if !c.h.ready.Load() {
		w.Header().Set("Retry-After", "1")
		http.Error(w, "walbus is starting", http.StatusServiceUnavailable)
		return
	}
	st := (*f)()
	if st.Groups == nil {
		st.Groups = []broker.GroupStatus{}
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	json.NewEncoder(w).Encode(st)
}
