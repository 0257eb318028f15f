package admin

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"

	"github.com/walbus/walbus/broker"
	"github.com/walbus/walbus/broker/replica"
)

// ClusterStatus is a cluster's node as GET /cluster shows it: which node
// it is, the cluster's nodes, and each entity's group as this node's
// member sees it (docs/cluster.md).
type ClusterStatus struct {
	Node    uint64            `json:"node"`
	Cluster string            `json:"cluster"`
	Peers   map[uint64]string `json:"peers"` // every node's peer address, this one's included
	// HTTP is the URL of each node's HTTP listener, as the node
	// advertised it to this one (its own included): where administration
	// requests are passed on to. A node not yet heard from is missing.
	HTTP   map[uint64]string    `json:"http,omitempty"`
	Groups []broker.GroupStatus `json:"groups"`
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
	// Namespace is the node's role in the metadata group: "leader",
	// "follower", "learner" (added, not yet a voter), "joining" (started
	// with --join, not yet added), "removed" (out of the group), or ""
	// when its member knows no leader.
	Namespace string `json:"namespace,omitempty"`
}

// NewClusterHealth is the node's role as its groups say it. An entity is
// led where its member leads and serves (it has applied what came before
// its term), as the entity's actor takes appends only then.
func NewClusterHealth(st ClusterStatus) ClusterHealth {
	h := ClusterHealth{Node: st.Node, Leading: []string{}, Following: []string{}}
	groups := 0
	for _, g := range st.Groups {
		if g.Entity == broker.MetaEntity {
			h.Namespace = namespaceRole(st.Node, g)
			continue
		}
		groups++
		if g.Serving {
			h.Leading = append(h.Leading, g.Entity)
		} else {
			h.Following = append(h.Following, g.Entity)
		}
	}
	switch {
	case groups == 0:
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

// namespaceRole is node's role in the metadata group g.
func namespaceRole(node uint64, g broker.GroupStatus) string {
	switch {
	case len(g.Voters) == 0 && len(g.Learners) == 0:
		return "joining"
	case slices.Contains(g.Learners, node):
		return "learner"
	case !slices.Contains(g.Voters, node):
		return "removed"
	case g.Serving:
		return "leader"
	case g.Leader != 0:
		return "follower"
	}
	return ""
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

// ClusterControl is what the administration API asks of a cluster's node
// beyond its broker.
type ClusterControl interface {
	// AddPeer makes node id, at peer address addr, one of the cluster's
	// nodes for this node's transport, now and after a restart.
	AddPeer(id uint64, addr string) error
}

// PeerRequest is POST /$walbus/cluster/peer's body: node Node listens
// for its peers at Peer, or, when Peer is "", has left the cluster.
type PeerRequest struct {
	Node uint64 `json:"node"`
	Peer string `json:"peer"`
}

// ChangeRequest is POST /$walbus/cluster/change's body: one step of a
// membership change of an entity's group, or of the metadata group when
// Entity is broker.MetaEntity (replica.AddLearner, Promote, Remove), which
// the node proposes if it leads the group.
type ChangeRequest struct {
	Entity string `json:"entity"`
	Step   string `json:"step"`
	Node   uint64 `json:"node"`
}

// clusterRequest serves the membership requests, each a POST with a JSON
// body (a key with Manage rights, as every request of the API):
//
//	/$walbus/cluster/peer     PeerRequest: 204 once the node knows the peer
//	                          and the metadata group recorded it (passed on
//	                          to the group's leader), so that every node,
//	                          one down now included, learns it; 503 when
//	                          the group cannot record it now
//	/$walbus/cluster/change   ChangeRequest: 204 once the group committed the
//	                          step; 409 when this node does not lead the
//	                          group; 422 when the step does not fit it
func (a *API) clusterRequest(w http.ResponseWriter, r *http.Request, op string) {
	if a.Cluster == nil {
		jsonError(w, http.StatusNotFound, "not a node of a cluster")
		return
	}
	if r.Method != http.MethodPost {
		jsonError(w, http.StatusMethodNotAllowed, "use POST")
		return
	}
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<16))
	dec.DisallowUnknownFields()
	switch op {
	case "peer":
		var req PeerRequest
		if err := dec.Decode(&req); err != nil {
			jsonError(w, http.StatusBadRequest, "the body: "+err.Error())
			return
		}
		if req.Peer != "" {
			if err := a.Cluster.AddPeer(req.Node, req.Peer); err != nil {
				jsonError(w, http.StatusBadRequest, err.Error())
				return
			}
		} else if req.Node == 0 {
			jsonError(w, http.StatusBadRequest, "name the node: an id of 1 or more")
			return
		}
		if err := a.b.RecordPeer(req.Node, req.Peer); err != nil {
			if node, ok := a.forwardTo(r, err); ok {
				a.forward(w, r, node, err)
				return
			}
			w.Header().Set("Retry-After", "1")
			jsonError(w, http.StatusServiceUnavailable, "the metadata group did not record the peer: "+err.Error())
			return
		}
	case "change":
		var req ChangeRequest
		if err := dec.Decode(&req); err != nil {
			jsonError(w, http.StatusBadRequest, "the body: "+err.Error())
			return
		}
		switch req.Step {
		case replica.AddLearner, replica.Promote, replica.Remove:
		default:
			jsonError(w, http.StatusBadRequest, fmt.Sprintf("step %q: want %s, %s or %s", req.Step, replica.AddLearner,
				replica.Promote, replica.Remove))
			return
		}
		if req.Node == 0 {
			jsonError(w, http.StatusBadRequest, "name the node: an id of 1 or more")
			return
		}
		a.logger.Info("membership change", "entity", req.Entity, "step", req.Step, "node", req.Node)
		switch err := a.b.ChangeMembership(req.Entity, req.Step, req.Node); {
		case errors.Is(err, broker.ErrEntityNotFound):
			jsonError(w, http.StatusNotFound, err.Error())
			return
		case errors.Is(err, broker.ErrNotLeader):
			jsonError(w, http.StatusConflict, err.Error())
			return
		case err != nil:
			jsonError(w, http.StatusUnprocessableEntity, err.Error())
			return
		}
	default:
		jsonError(w, http.StatusNotFound, "no /$walbus/cluster/"+op+": peer or change")
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
