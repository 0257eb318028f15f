package admin

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strings"

	"github.com/walbus/walbus/broker"
	"github.com/walbus/walbus/log/event"
	"github.com/walbus/walbus/projection"
)

// walbus's own API, beyond the Service Bus administration API, for the
// console and `walbus dlq` (docs/console.md has every request). It takes a
// Manage key, as the rest of the API does, and answers JSON. Paths are
// link addresses (broker.Resolve):
//
//	GET  /$walbus/overview                     every entity, its counts and counters
//	GET  /$walbus/messages/<path>?state=&from=&max=   a page of messages
//	GET  /$walbus/sessions/<path>              its sessions
//	GET  /$walbus/audit/<path>?seq=N           a message's history, as walbus audit
//	POST /$walbus/send/<queue or topic>        {"body": ..., properties}
//	POST /$walbus/cancel/<path>                {"sequenceNumbers": [...]}: scheduled messages
//	POST /$walbus/redrive/<queue or topic/Subscriptions/sub>
//	     body {"sequenceNumbers": [...]} or nothing for all: {"redriven": n}
//	POST /$walbus/purge/<queue or topic/Subscriptions/sub>[/$DeadLetterQueue]
//	     {"purged": n}
//
// In a cluster, an operation another node leads is passed on to that
// node, as the administration API's are (forward.go, jsonBrokerError);
// reads come from this node's replica.

// walbusRequest serves /$walbus/<op>/<path>.
func (a *API) walbusRequest(w http.ResponseWriter, r *http.Request, op string, segs []string) {
	op = strings.ToLower(op)
	method := http.MethodPost
	switch op {
	case "overview", "messages", "sessions", "audit":
		method = http.MethodGet
	}
	if r.Method != method {
		jsonError(w, http.StatusMethodNotAllowed, "use "+method)
		return
	}
	if op == "overview" {
		a.overview(w, r)
		return
	}
	if len(segs) == 0 {
		jsonError(w, http.StatusNotFound, "name an entity: /$walbus/"+op+"/<path>")
		return
	}
	e, queue, err := a.b.Resolve(strings.Join(segs, "/"))
	if err != nil {
		a.jsonBrokerError(w, r, err)
		return
	}
	switch op {
	case "messages":
		a.browse(w, r, e, queue)
		return
	case "audit":
		a.audit(w, r, e)
		return
	case "send":
		a.send(w, r, e, queue)
		return
	case "cancel": // a topic's scheduled messages wait in its own queue
		seqs, ok := readSeqs(w, r, false)
		if ok {
			n, err := cancel(e, queue, seqs)
			a.answer(w, r, err, map[string]int{"cancelled": n})
		}
		return
	}
	if queue == event.MainQueue && e.IsTopic() {
		jsonError(w, http.StatusBadRequest, fmt.Sprintf("%s is a topic; name one of its subscriptions", e.Name()))
		return
	}
	switch op {
	case "sessions":
		a.sessions(w, r, e, queue)
	case "redrive":
		if event.KindOf(queue) != event.KindMessages {
			jsonError(w, http.StatusBadRequest, "name the entity whose dead letters to re-drive, not its dead-letter queue")
			return
		}
		seqs, ok := readSeqs(w, r, true)
		if ok {
			n, err := redrive(e, queue, seqs)
			a.answer(w, r, err, map[string]int{"redriven": n})
		}
	case "purge":
		n, err := purge(e, queue)
		a.answer(w, r, err, map[string]int{"purged": n})
	default:
		jsonError(w, http.StatusNotFound, fmt.Sprintf("no operation %s for %s", op, r.URL.Path))
	}
}

// readSeqs reads a body {"sequenceNumbers": [...]}; with orNone a request
// without a body reads as nil (all).
func readSeqs(w http.ResponseWriter, r *http.Request, orNone bool) ([]uint64, bool) {
	var body struct {
		SequenceNumbers []uint64 `json:"sequenceNumbers"`
	}
	raw, err := io.ReadAll(io.LimitReader(r.Body, maxBody))
	switch {
	case err != nil:
	case len(strings.TrimSpace(string(raw))) > 0:
		err = json.Unmarshal(raw, &body)
	case !orNone:
		err = errors.New("no body")
	}
	if err == nil && !orNone && len(body.SequenceNumbers) == 0 {
		err = errors.New("no sequence numbers")
	}
	if err != nil {
		jsonError(w, http.StatusBadRequest, "want {\"sequenceNumbers\": [...]}: "+err.Error())
		return nil, false
	}
	return body.SequenceNumbers, true
}

// redrive re-drives seqs, or every dead-lettered message, a batch at a
// time.
func redrive(e *broker.Entity, queue uint32, seqs []uint64) (int, error) {
	return batches(seqs != nil, func(done func(int, error)) { e.Redrive(queue, seqs, done) })
}

// purge deletes every message of queue that no receiver holds, a batch
// at a time.
func purge(e *broker.Entity, queue uint32) (int, error) {
	return batches(false, func(done func(int, error)) { e.Delete(queue, broker.MaxDelete, math.MaxInt64, "", done) })
}

// batches runs op until it fails or does nothing (or once, with once),
// and sums what it did.
func batches(once bool, op func(done func(int, error))) (int, error) {
	type result struct {
		n   int
		err error
	}
	total := 0
	for {
		ch := make(chan result, 1)
		op(func(n int, err error) { ch <- result{n, err} })
		res := <-ch
		total += res.n
		if res.err != nil || once || res.n == 0 {
			return total, res.err
		}
	}
}

// answer answers v as JSON, or, when err is not nil, answers err as
// jsonBrokerError does.
func (a *API) answer(w http.ResponseWriter, r *http.Request, err error, v any) {
	if err != nil {
		a.jsonBrokerError(w, r, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(v)
}

// jsonBrokerError answers a JSON request whose operation the broker
// refused with err, as brokerError does the administration API's: passed
// on to the node that leads the group when it is known (forward.go), else
// with err's status; a 503 comes with Retry-After.
func (a *API) jsonBrokerError(w http.ResponseWriter, r *http.Request, err error) {
	if node, ok := a.forwardTo(r, err); ok {
		a.forward(w, r, node, err)
		return
	}
	status := statusOf(err)
	if status == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", "1")
	}
	jsonError(w, status, err.Error())
}

func jsonError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(map[string]string{"error": msg})
}

// statusOf is the HTTP status of a broker error.
func statusOf(err error) int {
	switch {
	case errors.Is(err, broker.ErrNotLeader):
		return http.StatusServiceUnavailable
	case errors.Is(err, broker.ErrEntityNotFound):
		return http.StatusNotFound
	case errors.Is(err, projection.ErrInvalid), errors.Is(err, projection.ErrNotAllowed), errors.Is(err, errBadAdvance):
		return http.StatusBadRequest
	case errors.Is(err, broker.ErrNoTestClock), errors.Is(err, projection.ErrMessageNotFound):
		return http.StatusNotFound
	case errors.Is(err, projection.ErrMessageTooLarge):
		return http.StatusRequestEntityTooLarge
	case errors.Is(err, projection.ErrSessionIDRequired):
		return http.StatusBadRequest
	case errors.Is(err, projection.ErrEntityDisabled), errors.Is(err, projection.ErrQuotaExceeded):
		return http.StatusForbidden
	case errors.Is(err, projection.ErrExists):
		return http.StatusConflict
	}
	return http.StatusInternalServerError
}
