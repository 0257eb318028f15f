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

// walbus's own message operations, beyond the Service Bus administration
// API, for the console and `walbus dlq` (docs/operations.md, "Dead
// letters"). Both take a Manage key, as the rest of the API does, and
// answer JSON:
//
//	POST /$walbus/redrive/<queue or topic/Subscriptions/sub>
//	     body {"sequenceNumbers": [...]} or nothing for all: {"redriven": n}
//	POST /$walbus/purge/<queue or topic/Subscriptions/sub>[/$DeadLetterQueue]
//	     {"purged": n}
//
// Paths are link addresses (broker.Resolve).

// messagesRequest serves /$walbus/<op>/<path>.
func (a *API) messagesRequest(w http.ResponseWriter, r *http.Request, op string, segs []string) {
	if r.Method != http.MethodPost {
		jsonError(w, http.StatusMethodNotAllowed, "use POST")
		return
	}
	e, queue, err := a.b.Resolve(strings.Join(segs, "/"))
	if err == nil && queue == event.MainQueue && e.IsTopic() {
		err = fmt.Errorf("%w: %s is a topic; name one of its subscriptions", projection.ErrInvalid, e.Name())
	}
	if err != nil {
		jsonError(w, statusOf(err), err.Error())
		return
	}
	switch {
	case strings.EqualFold(op, "redrive") && event.KindOf(queue) == event.KindMessages:
		var body struct {
			SequenceNumbers []uint64 `json:"sequenceNumbers"`
		}
		raw, err := io.ReadAll(io.LimitReader(r.Body, maxBody))
		if err == nil && len(strings.TrimSpace(string(raw))) > 0 {
			err = json.Unmarshal(raw, &body)
		}
		if err != nil {
			jsonError(w, http.StatusBadRequest, "want {\"sequenceNumbers\": [...]} or no body: "+err.Error())
			return
		}
		n, err := redrive(e, queue, body.SequenceNumbers)
		answer(w, err, map[string]int{"redriven": n})
	case strings.EqualFold(op, "purge"):
		n, err := purge(e, queue)
		answer(w, err, map[string]int{"purged": n})
	default:
		jsonError(w, http.StatusNotFound, fmt.Sprintf("no operation %s for %s", op, r.URL.Path))
	}
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

func answer(w http.ResponseWriter, err error, v any) {
	if err != nil {
		jsonError(w, statusOf(err), err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(v)
}

func jsonError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(map[string]string{"error": msg})
}

// statusOf is the HTTP status of a broker error.
func statusOf(err error) int {
	switch {
	case errors.Is(err, broker.ErrEntityNotFound):
		return http.StatusNotFound
	case errors.Is(err, projection.ErrInvalid), errors.Is(err, projection.ErrNotAllowed), errors.Is(err, errBadAdvance):
		return http.StatusBadRequest
	case errors.Is(err, broker.ErrNoTestClock):
		return http.StatusNotFound
	}
	return http.StatusInternalServerError
}
