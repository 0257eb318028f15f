package admin

import (
	"crypto/subtle"
	"embed"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"path"
	"strings"
	"time"

	"github.com/walbus/walbus/amqpserver/sas"
)

// The web console (docs/console.md): a page and its scripts, embedded in
// the binary, that use the administration API and walbus's JSON API
// (/$walbus/...) like any other client.
//
//	GET /                   the page
//	GET /$console/<file>    its scripts and styles
//	POST /$walbus/token     a SAS token for a key name and key: {"keyName", "key"}
//
// A request needs a SAS token of a key with Manage rights, except the
// console's own from a loopback address to a loopback host name: those
// carry the X-Walbus-Console header, which a page of another origin
// cannot send without a CORS preflight that walbus never grants, and the
// host name check turns DNS rebinding away.

//go:embed console/*.html console/*.js console/*.css
var consoleFiles embed.FS

// consoleHeader marks the console's requests.
const consoleHeader = "X-Walbus-Console"

// consoleKey is who a keyless console request on loopback acts as.
var consoleKey = sas.Key{Name: "console on loopback", Rights: sas.Manage | sas.Send | sas.Listen}

// consoleTokenLife is how long a token /$walbus/token signs lasts.
const consoleTokenLife = 8 * time.Hour

// serveConsole serves the page and its files, and reports whether the
// request was one of them.
func serveConsole(w http.ResponseWriter, r *http.Request, p string) bool {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		return false
	}
	var name string
	switch {
	case p == "":
		name = "index.html"
	case strings.HasPrefix(p, "$console/"):
		name = strings.TrimPrefix(p, "$console/")
	default:
		return false
	}
	if name == "" || strings.Contains(name, "/") || name != path.Clean(name) {
		http.NotFound(w, r)
		return true
	}
	f, err := consoleFiles.Open("console/" + name)
	if err != nil {
		http.NotFound(w, r)
		return true
	}
	defer f.Close()
	h := w.Header()
	// Everything the page loads is its own: no other origin, no inline
	// script, no framing.
	h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; style-src 'self'; frame-ancestors 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Cache-Control", "no-cache")
	st, _ := f.Stat()
	http.ServeContent(w, r, name, st.ModTime(), f.(io.ReadSeeker))
	return true
}

// loopbackConsole reports whether r is the console's request from a
// loopback address to a loopback host name, which needs no key.
func loopbackConsole(r *http.Request) bool {
	if r.Header.Get(consoleHeader) == "" || !fromLoopback(r) {
		return false
	}
	host := r.Host
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.Trim(host, "[]")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// hasToken reports whether r carries a SAS token.
func hasToken(r *http.Request) bool {
	return r.Header.Get("Authorization") != "" || r.Header.Get("ServiceBusAuthorization") != ""
}

// token serves POST /$walbus/token: the console's sign-in. The key must
// have Manage rights; the token lasts consoleTokenLife.
func (a *API) token(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		jsonError(w, http.StatusMethodNotAllowed, "use POST")
		return
	}
	var body struct {
		KeyName string `json:"keyName"`
		Key     string `json:"key"`
	}
	raw, err := io.ReadAll(io.LimitReader(r.Body, maxBody))
	if err == nil {
		err = json.Unmarshal(raw, &body)
	}
	if err != nil {
		jsonError(w, http.StatusBadRequest, `want {"keyName": "...", "key": "..."}: `+err.Error())
		return
	}
	key, ok := a.keys.Lookup(body.KeyName)
	if !ok || subtle.ConstantTimeCompare([]byte(key.Value), []byte(body.Key)) != 1 {
		a.logger.Warn("console sign-in refused", "key", body.KeyName, "from", r.RemoteAddr)
		jsonError(w, http.StatusUnauthorized, "no key of that name and value")
		return
	}
	if !key.Rights.Has(sas.Manage) {
		jsonError(w, http.StatusUnauthorized, "the console takes a key with Manage rights: "+key.Name+" lacks them")
		return
	}
	expiry := a.now().Add(consoleTokenLife)
	a.answer(w, r, nil, map[string]string{
		"token":     sas.Sign(base(r), key, expiry, sas.GoStyle),
		"expiresAt": expiry.UTC().Format(time.RFC3339),
	})
}
