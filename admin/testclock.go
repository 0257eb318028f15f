package admin

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/walbus/walbus/admin/timespan"
	"github.com/walbus/walbus/amqpserver/sas"
)

// The test clock (walbus serve --test-clock; docs/operations.md, "The test
// clock"): GET /$test/clock reads it, POST /$test/clock?advance=24h (or a
// JSON body {"advance": "24h"}; Go durations or ISO 8601, P1D) moves it
// ahead. From a loopback address no key is asked; from elsewhere a
// Manage key is.

// testClock serves /$test/clock.
func (a *API) testClock(w http.ResponseWriter, r *http.Request) {
	if !a.b.TestClock() {
		jsonError(w, http.StatusNotFound, "the test clock is off: walbus serve --test-clock")
		return
	}
	if !fromLoopback(r) {
		key, err := a.authenticate(r)
		if err != nil {
			jsonError(w, http.StatusUnauthorized, err.Error())
			return
		}
		if !key.Rights.Has(sas.Manage) {
			jsonError(w, http.StatusUnauthorized, "the test clock takes a key with Manage rights: "+key.Name+" lacks them")
			return
		}
	}
	switch r.Method {
	case http.MethodGet:
	case http.MethodPost:
		advance := r.URL.Query().Get("advance")
		if advance == "" {
			var body struct {
				Advance string `json:"advance"`
			}
			raw, err := io.ReadAll(io.LimitReader(r.Body, maxBody))
			if err == nil {
				err = json.Unmarshal(raw, &body)
			}
			if err != nil {
				jsonError(w, http.StatusBadRequest, "want ?advance=24h or {\"advance\": \"24h\"}: "+err.Error())
				return
			}
			advance = body.Advance
		}
		d, err := parseAdvance(advance)
		if err == nil {
			err = a.b.AdvanceClock(d)
		}
		if err != nil {
			a.jsonBrokerError(w, r, err)
			return
		}
		a.logger.Info("test clock advanced", "by", d, "now", a.b.Now())
	default:
		jsonError(w, http.StatusMethodNotAllowed, "GET reads the test clock, POST advances it")
		return
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string]string{"now": a.b.Now().UTC().Format(time.RFC3339Nano),
		"offset": a.b.ClockOffset().String()})
}

// parseAdvance reads a duration as Go writes it (36h, 90m) or as ISO 8601
// (P1D, PT36H).
func parseAdvance(s string) (time.Duration, error) {
	if d, err := time.ParseDuration(s); err == nil {
		return d, nil
	}
	if ticks, err := timespan.ParseISO(s); err == nil {
		return time.Duration(ticks) * 100, nil
	}
	return 0, fmt.Errorf("%w: advance %q: want a duration such as 24h or P1D", errBadAdvance, s)
}

var errBadAdvance = errors.New("bad advance")

// fromLoopback reports whether r came from a loopback address.
func fromLoopback(r *http.Request) bool {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return false
	}
	ip := net.ParseIP(strings.Trim(host, "[]"))
	return ip != nil && ip.IsLoopback()
}
