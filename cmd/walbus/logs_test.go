package main

import (
	"bufio"
	"context"
	"encoding/json"
	"net"
	"strings"
	"syscall"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/Azure/go-amqp"
)

// logLine is one line of --log-format json.
type logLine map[string]any

func (l logLine) str(key string) string { s, _ := l[key].(string); return s }

// jsonLines parses what the process logged so far; every line must be JSON.
func jsonLines(t *testing.T, p *proc) []logLine {
	t.Helper()
	var lines []logLine
	sc := bufio.NewScanner(strings.NewReader(p.logs()))
	for sc.Scan() {
		var l logLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("not a JSON log line: %q", sc.Text())
		}
		lines = append(lines, l)
	}
	return lines
}

// find returns the lines whose msg is msg.
func find(lines []logLine, msg string) []logLine {
	var out []logLine
	for _, l := range lines {
		if l.str("msg") == msg {
			out = append(out, l)
		}
	}
	return out
}

// Settings come from WALBUS_ variables as well as flags, and the logs are
// what an operator needs: a line per entity created and recovered, per
// connection opened and closed (with the peer and the reason), and nothing
// per message at the default level.
func TestOperatorLogsFromEnvironment(t *testing.T) {
	dir := t.TempDir()
	cfg := writeConfig(t, "orders", `"LockDuration": "PT1M"`)
	p := &proc{t: t, dir: dir,
		env: []string{"WALBUS_LOG_FORMAT=json", "WALBUS_CONFIG=" + cfg, "WALBUS_LOG_LEVEL=info"}}
	p.start()
	t.Cleanup(p.kill)

	lines := jsonLines(t, p) // JSON: WALBUS_LOG_FORMAT took effect
	if created := find(lines, "entity created"); len(created) != 1 || created[0].str("entity") != "orders" {
		t.Fatalf("entity created lines %v (WALBUS_CONFIG should have created orders)", created)
	}

	nc, err := net.Dial("tcp", p.amqp)
	if err != nil {
		t.Fatal(err)
	}
	local := nc.LocalAddr().String()
	conn, err := amqp.NewConn(context.Background(), nc,
		&amqp.ConnOptions{SASLType: amqp.SASLTypePlain("RootManageSharedAccessKey", "SAS_KEY_VALUE")})
	if err != nil {
		t.Fatal(err)
	}
	sess, err := conn.NewSession(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	snd, err := sess.NewSender(context.Background(), "orders", nil)
	if err != nil {
		t.Fatal(err)
	}
	before := len(jsonLines(t, p))
	for range 200 {
		if err := snd.Send(context.Background(), &amqp.Message{Data: [][]byte{[]byte("x")}}, nil); err != nil {
			t.Fatal(err)
		}
	}
	if after := len(jsonLines(t, p)); after != before {
		t.Fatalf("200 sends logged %d lines at the default level", after-before)
	}
	conn.Close()

	if code := p.signal(syscall.SIGTERM); code != 0 {
		t.Fatalf("exit %d", code)
	}
	lines = jsonLines(t, p)
	opened, closed := find(lines, "connection opened"), find(lines, "connection closed")
	if len(opened) != 1 || opened[0].str("peer") != local {
		t.Fatalf("connection opened lines %v; want one with peer %s", opened, local)
	}
	if len(closed) != 1 || closed[0].str("peer") != local || closed[0].str("reason") == "" {
		t.Fatalf("connection closed lines %v; want one with peer %s and a reason", closed, local)
	}

	// The next start recovers the entity from the snapshot the shutdown
	// wrote: nothing to replay, so no line of its own at info, and one
	// line sums the entities up.
	first := len(lines)
	p.start()
	lines = jsonLines(t, p)[first:]
	if rec := find(lines, "entity recovered"); len(rec) != 0 {
		t.Fatalf("entity recovered lines %v after a clean shutdown", rec)
	}
	sum := find(lines, "entities recovered")
	if len(sum) != 1 || sum[0]["entities"] != 1.0 || sum[0]["from_snapshots"] != 1.0 || sum[0]["records_replayed"] != 0.0 {
		t.Fatalf("entities recovered lines %v", sum)
	}

	// After a crash the entity replays its log, and says so (a few
	// events would not be worth a line: a graceful stop leaves as many).
	client := p.sdkClient()
	sender, err := client.NewSender("orders", nil)
	if err != nil {
		t.Fatal(err)
	}
	for range 20 {
		if err := sender.SendMessage(context.Background(), &azservicebus.Message{Body: []byte("y")}, nil); err != nil {
			t.Fatal(err)
		}
	}
	client.Close(context.Background())
	first = len(jsonLines(t, p))
	p.kill()
	p.start()
	lines = jsonLines(t, p)[first:]
	rec := find(lines, "entity recovered")
	if len(rec) != 1 || rec[0].str("entity") != "orders" || rec[0]["replayed"] == nil || rec[0]["replayed"] == 0.0 {
		t.Fatalf("entity recovered lines %v after a crash", rec)
	}
	if r := find(lines, "recovered"); len(r) != 1 || r[0]["took"] == nil || r[0].str("sync") != "always" {
		t.Fatalf("recovered lines %v", r)
	}
}
