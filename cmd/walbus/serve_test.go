package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/Azure/go-amqp"

	"github.com/walbus/walbus/log"
	"github.com/walbus/walbus/log/event"
)

// runWalbus runs the binary to completion and returns its exit status and
// output. A run that has not ended after two minutes (a serve that should
// have refused to start) is killed, and reports exit status -1.
func runWalbus(t *testing.T, env []string, args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, walbusBin, args...)
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return code, stdout.String(), stderr.String()
}

func TestCommandLine(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "bad.json")
	os.WriteFile(bad, []byte("{\n  \"UserConfig\": {\"Namespaces\": [{\"Name\": \"ns\",\n    \"Queues\": [{\"Name\": \"q\", \"Properties\": {\"LockDuration\": \"PT1X\"}}]}]}\n}\n"), 0o644)
	// Service Bus does not support ForwardTo on a queue that requires sessions.
	sessionForward := filepath.Join(t.TempDir(), "session-forward.json")
	os.WriteFile(sessionForward, []byte("{\"UserConfig\": {\"Namespaces\": [{\"Name\": \"ns\", \"Queues\": [\n  {\"Name\": \"next\"},\n"+
		"  {\"Name\": \"q\", \"Properties\": {\"RequiresSession\": true, \"ForwardTo\": \"next\"}}]}]}}\n"), 0o644)
	for _, c := range []struct {
		name   string
		env    []string
		args   []string
		code   int
		output string // expected in stdout+stderr
	}{
		{"version", nil, []string{"version"}, 0, "walbus "},
		{"no command", nil, nil, 2, "Usage:"},
		{"unknown command", nil, []string{"frobnicate"}, 2, `unknown command "frobnicate"`},
		{"help", nil, []string{"serve", "--help"}, 0, "WALBUS_MAX_FRAME_SIZE"},
		{"unknown flag", nil, []string{"serve", "--bogus"}, 2, "flag provided but not defined: -bogus"},
		{"bad value", nil, []string{"serve", "--sync", "sometimes"}, 2, `unknown sync policy "sometimes"`},
		{"bad size", nil, []string{"serve", "--max-frame-size", "12x"}, 2, "not a size"},
		// 2^54+1 KiB would wrap to 1024 bytes, 2^34+1 GiB to 1 GiB.
		{"size that overflows", nil, []string{"serve", "--max-message-size", "18014398509481985KiB"}, 2, "too large"},
		{"size that overflows, from the environment", []string{"WALBUS_MAX_FRAME_SIZE=17179869185GiB"}, []string{"serve"}, 2, "too large"},
		{"bad env", []string{"WALBUS_LOG_LEVEL=loud"}, []string{"serve"}, 2, `unknown log level "loud"`},
		{"bad env for a typed flag", []string{"WALBUS_MAX_CONNECTIONS=many"}, []string{"serve"}, 2, "WALBUS_MAX_CONNECTIONS"},
		{"no session wait", nil, []string{"serve", "--session-wait", "0s"}, 2, "--session-wait must be positive"},
		{"amqps without a certificate", nil, []string{"serve", "--amqps", "127.0.0.1:0"}, 2, "need --tls-cert"},
		{"bad config", nil, []string{"serve", "--data", t.TempDir(), "--amqp", "127.0.0.1:0", "--http", "",
			"--config", bad}, 2, bad + ":3:"},
		{"session queue that forwards", nil, []string{"serve", "--data", t.TempDir(), "--amqp", "127.0.0.1:0", "--http", "",
			"--config", sessionForward}, 2, sessionForward + ":3:70: UserConfig.Namespaces[0].Queues[1].Properties.ForwardTo: ForwardTo is not supported for session-enabled queues"},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, stdout, stderr := runWalbus(t, c.env, c.args...)
			if code != c.code || !strings.Contains(stdout+stderr, c.output) {
				t.Fatalf("exit %d (want %d); output does not contain %q:\n%s%s", code, c.code, c.output, stdout, stderr)
			}
		})
	}
}

// SIGTERM: clients are closed with amqp:connection:forced, the process
// exits 0, and it wrote a snapshot so the next start replays nothing.
func TestGracefulShutdown(t *testing.T) {
	dir := t.TempDir()
	cfg := writeConfig(t, "q", `"LockDuration": "PT1M"`)
	p := startWalbus(t, dir, "--config", cfg)
	conn, err := amqp.Dial(context.Background(), "amqp://"+p.amqp,
		&amqp.ConnOptions{SASLType: amqp.SASLTypePlain("RootManageSharedAccessKey", "SAS_KEY_VALUE")})
	if err != nil {
		t.Fatal(err)
	}
	sess, _ := conn.NewSession(context.Background(), nil)
	snd, err := sess.NewSender(context.Background(), "q", nil)
	if err != nil {
		t.Fatal(err)
	}
	for range 10 {
		if err := snd.Send(context.Background(), &amqp.Message{Data: [][]byte{[]byte("x")}}, nil); err != nil {
			t.Fatal(err)
		}
	}
	if code := p.signal(syscall.SIGTERM); code != 0 {
		t.Fatalf("exit status %d after SIGTERM:\n%s", code, p.logs())
	}
	select {
	case <-conn.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the client's connection stayed open")
	}
	var connErr *amqp.ConnError
	if !errors.As(conn.Err(), &connErr) || connErr.RemoteErr == nil || connErr.RemoteErr.Condition != "amqp:connection:forced" {
		t.Fatalf("client saw %v, want amqp:connection:forced", conn.Err())
	}
	p.start()
	if !strings.Contains(p.logs(), "replayed=0") {
		t.Fatalf("restart after a clean shutdown replayed the log:\n%s", p.logs())
	}
}

func TestHealthAndMetrics(t *testing.T) {
	cfg := writeConfig(t, "q", `"LockDuration": "PT1M"`)
	p := startWalbus(t, t.TempDir(), "--config", cfg)
	resp, err := http.Get("http://" + p.http + "/health")
	if err != nil {
		t.Fatal(err)
	}
	var health struct {
		Status   string
		Entities int
	}
	json.NewDecoder(resp.Body).Decode(&health)
	resp.Body.Close()
	if resp.StatusCode != 200 || health.Status != "ok" || health.Entities != 1 {
		t.Fatalf("health %d %+v", resp.StatusCode, health)
	}

	client, _ := azservicebus.NewClientFromConnectionString(p.connString(), nil)
	defer client.Close(context.Background())
	s, _ := client.NewSender("q", nil)
	for range 5 {
		if err := s.SendMessage(context.Background(), &azservicebus.Message{Body: []byte("x")}, nil); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.ScheduleMessages(context.Background(), []*azservicebus.Message{{Body: []byte("later")}},
		time.Now().Add(time.Hour), nil); err != nil {
		t.Fatal(err)
	}
	// Of the five: one dead-lettered, one abandoned (available again), one
	// completed, one deferred, one left locked.
	r, _ := client.NewReceiverForQueue("q", nil)
	var msgs []*azservicebus.ReceivedMessage
	for len(msgs) < 5 {
		got, err := r.ReceiveMessages(context.Background(), 5-len(msgs), nil)
		if err != nil {
			t.Fatal(err)
		}
		msgs = append(msgs, got...)
	}
	ctx := context.Background()
	for i, err := range []error{
		r.DeadLetterMessage(ctx, msgs[0], nil),
		r.AbandonMessage(ctx, msgs[1], nil),
		r.CompleteMessage(ctx, msgs[2], nil),
		r.DeferMessage(ctx, msgs[3], nil),
	} {
		if err != nil {
			t.Fatalf("settle %d: %v", i, err)
		}
	}

	// The state of every message, as counted now and after a restart.
	states := []string{
		`walbus_queue_messages{entity="q",state="available",subqueue="active"} 1`,
		`walbus_queue_messages{entity="q",state="locked",subqueue="active"} 1`,
		`walbus_queue_messages{entity="q",state="deferred",subqueue="active"} 1`,
		`walbus_queue_messages{entity="q",state="scheduled",subqueue="active"} 1`,
		`walbus_queue_messages{entity="q",state="available",subqueue="deadletter"} 1`,
		`walbus_queue_messages{entity="q",state="available",subqueue="transferdeadletter"} 0`,
	}
	text := getText(t, "http://"+p.http+"/metrics")
	for _, want := range append(states,
		`walbus_messages_sent_total{entity="q"} 6`,
		`walbus_messages_delivered_total{entity="q"} 5`,
		`walbus_messages_completed_total{entity="q"} 1`,
		`walbus_messages_abandoned_total{entity="q"} 1`,
		`walbus_messages_dead_lettered_total{entity="q",reason="client"} 1`,
		`walbus_messages_expired_total{entity="q"} 0`,
		`walbus_lock_lost_total{entity="q"} 0`,
		`walbus_connections_open 1`,
		`walbus_sessions_open `,
		`walbus_links_open `,
		"walbus_group_commit_records_bucket",
		"walbus_snapshot_duration_seconds_count",
		"walbus_group_commit_duration_seconds_count",
		"walbus_fsync_duration_seconds_bucket",
		"walbus_message_wait_seconds_count 5", // first deliveries only, the scheduled one not yet
		"walbus_entity_log_bytes{entity=\"q\"}",
	) {
		if !strings.Contains(text, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	if t.Failed() {
		t.Log(text)
	}

	// After a restart the counts are rebuilt from the log (the lock is
	// still held: a minute long), and the recovery's duration is there.
	client.Close(context.Background())
	if code := p.signal(syscall.SIGTERM); code != 0 {
		t.Fatalf("exit %d", code)
	}
	p.start()
	text = getText(t, "http://"+p.http+"/metrics")
	for _, want := range append(states, `walbus_recovery_duration_seconds{entity="q"} `) {
		if !strings.Contains(text, want) {
			t.Errorf("metrics after restart lack %s", want)
		}
	}
}

func getText(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %v", url, resp.StatusCode, err)
	}
	return string(body)
}

// TLS: an SDK client without the emulator flag connects over TLS to a
// walbus using a certificate from `walbus cert`, trusting its CA through
// SSL_CERT_FILE as the README tells developers to.
func TestTLSWithGeneratedCertificate(t *testing.T) {
	certs := t.TempDir()
	if code, out, errOut := runWalbus(t, nil, "cert", "--out", certs, "--host", "localhost", "--host", "127.0.0.1"); code != 0 {
		t.Fatalf("walbus cert: %d %s %s", code, out, errOut)
	}
	cfg := writeConfig(t, "q", `"LockDuration": "PT1M"`)
	p := startWalbus(t, t.TempDir(), "--config", cfg, "--amqps", "127.0.0.1:0", "--http-tls",
		"--tls-cert", filepath.Join(certs, "server.pem"), "--tls-key", filepath.Join(certs, "server-key.pem"))
	port := p.amqps[strings.LastIndexByte(p.amqps, ':')+1:]
	// A child process, so SSL_CERT_FILE is read fresh by crypto/x509.
	cmd := exec.Command(os.Args[0], "-test.run=^TestTLSChild$", "-test.v")
	// The Go SDK puts a port given in the endpoint into the TLS server name,
	// so on any port but 5671 the endpoint names the host alone and
	// CustomEndpoint says where to dial (as the README explains).
	cmd.Env = append(os.Environ(), "SSL_CERT_FILE="+filepath.Join(certs, "ca.pem"),
		"WALBUS_TLS_CHILD=Endpoint=sb://localhost;SharedAccessKeyName=RootManageSharedAccessKey;SharedAccessKey=SAS_KEY_VALUE",
		"WALBUS_TLS_DIAL=127.0.0.1:"+port)
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "received over TLS") {
		t.Fatalf("TLS client: %v\n%s\nserver:\n%s", err, out, p.logs())
	}
}

// TestTLSChild is TestTLSWithGeneratedCertificate's client process.
func TestTLSChild(t *testing.T) {
	cs := os.Getenv("WALBUS_TLS_CHILD")
	if cs == "" {
		return // only meaningful as the child process
	}
	client, err := azservicebus.NewClientFromConnectionString(cs, &azservicebus.ClientOptions{CustomEndpoint: os.Getenv("WALBUS_TLS_DIAL")})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, _ := client.NewSender("q", nil)
	if err := s.SendMessage(ctx, &azservicebus.Message{Body: []byte("secret")}, nil); err != nil {
		t.Fatalf("send over TLS: %v", err)
	}
	r, _ := client.NewReceiverForQueue("q", nil)
	msgs, err := r.ReceiveMessages(ctx, 1, nil)
	if err != nil || len(msgs) != 1 || string(msgs[0].Body) != "secret" {
		t.Fatalf("receive over TLS: %v %v", msgs, err)
	}
	t.Log("received over TLS")
}

// A log damaged where written records follow (here a bit flipped in an
// early message's record) stops the start with exit 1 and says what to do;
// with --repair walbus starts, cutting the log at the damage: the
// messages before it are there, those from it on are gone.
func TestRepairFlag(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	p := startWalbus(t, dir, "--config", writeConfig(t, "orders", ""), "--idle-checkpoint", "0")
	client := p.sdkClient()
	s, err := client.NewSender("orders", nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		if err := s.SendMessage(ctx, &azservicebus.Message{Body: []byte(fmt.Sprint("m", i))}, nil); err != nil {
			t.Fatal(err)
		}
	}
	client.Close(ctx)
	p.kill()

	// Flip a byte inside the fourth message's record.
	logs, _ := filepath.Glob(filepath.Join(dir, "entities", "*", "log"))
	if len(logs) != 1 {
		t.Fatalf("entity logs %v", logs)
	}
	ro, err := log.OpenReadOnly(logs[0])
	if err != nil {
		t.Fatal(err)
	}
	var at int64
	var seg string
	enqueued := 0
	for _, sg := range ro.Segments() {
		ro.WalkSegment(sg.First, func(rec log.RecordInfo) error {
			if rec.Event.Type == event.Enqueued {
				if enqueued++; enqueued == 4 {
					at, seg = rec.Offset+int64(rec.Size)/2, sg.Path
				}
			}
			return nil
		})
	}
	ro.Close()
	if seg == "" {
		t.Fatal("no fourth message in the log")
	}
	b, err := os.ReadFile(seg)
	if err != nil {
		t.Fatal(err)
	}
	b[at] ^= 0x40
	if err := os.WriteFile(seg, b, 0o640); err != nil {
		t.Fatal(err)
	}

	code, out, errOut := runWalbus(t, nil, "serve", "--data", dir, "--amqp", "127.0.0.1:0", "--http", "")
	if code != 1 || !strings.Contains(out+errOut, "corrupt") || !strings.Contains(out+errOut, "--repair") {
		t.Fatalf("serve on a damaged log: exit %d\n%s%s", code, out, errOut)
	}

	p = startWalbus(t, dir, "--repair", "--idle-checkpoint", "0")
	if !strings.Contains(p.logs(), "log tail repaired") {
		t.Fatalf("no repair in the log:\n%s", p.logs())
	}
	client = p.sdkClient()
	defer client.Close(ctx)
	r, err := client.NewReceiverForQueue("orders", &azservicebus.ReceiverOptions{ReceiveMode: azservicebus.ReceiveModeReceiveAndDelete})
	if err != nil {
		t.Fatal(err)
	}
	msgs, err := r.PeekMessages(ctx, 20, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := bodies(msgs); !slices.Equal(got, []string{"m0", "m1", "m2"}) {
		t.Fatalf("after the repair the queue holds %v, want the three messages before the damage", got)
	}
}
