package main

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
)

// walbusBin is the walbus binary the process tests run, built once.
var walbusBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "walbus-bin")
	if err != nil {
		panic(err)
	}
	walbusBin = filepath.Join(dir, "walbus")
	build := exec.Command("go", "build", "-o", walbusBin, ".")
	build.Stderr = os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "cannot build walbus:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// proc is a walbus serve child process.
type proc struct {
	t        *testing.T
	cmd      *exec.Cmd
	dir      string
	amqp     string // empty for a port the kernel chooses; then what it chose
	http     string // likewise
	amqps    string // what it listens on for --amqps, once started
	args     []string
	env      []string // added to this process's environment
	mu       sync.Mutex
	log      bytes.Buffer
	exited   chan struct{}
	exitCode int
}

// startWalbus starts walbus serve on fresh loopback ports with data in dir
// and waits until /health says it is ready.
func startWalbus(t *testing.T, dir string, args ...string) *proc {
	t.Helper()
	p := &proc{t: t, dir: dir, args: args}
	p.start()
	t.Cleanup(func() { p.kill() })
	return p
}

// start runs walbus serve and waits until /health says it is ready. The
// first start listens on ports the kernel chooses and reads them from the
// process's "listening" log lines; restarts keep them. (A port found free
// here and passed on could be taken by a walbus of another test before
// this one binds it, and the health check would then reach that one.)
func (p *proc) start() {
	p.t.Helper()
	if p.amqp == "" {
		p.amqp = "127.0.0.1:0"
	}
	if p.http == "" {
		p.http = "127.0.0.1:0"
	}
	p.mu.Lock()
	from := p.log.Len()
	p.mu.Unlock()
	// A small disk reserve: each test's broker writes it (a test's own
	// --disk-reserve, later in args, wins).
	args := append([]string{"serve", "--data", p.dir, "--amqp", p.amqp, "--http", p.http, "--disk-reserve", "1MiB"}, p.args...)
	p.cmd = exec.Command(walbusBin, args...)
	p.cmd.Env = append(os.Environ(), p.env...)
	p.cmd.Stderr = writerFunc(func(b []byte) (int, error) {
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.log.Write(b)
	})
	if err := p.cmd.Start(); err != nil {
		p.t.Fatal(err)
	}
	p.exited = make(chan struct{})
	go func() {
		err := p.cmd.Wait()
		p.exitCode = 0
		if ee, ok := err.(*exec.ExitError); ok {
			p.exitCode = ee.ExitCode()
		}
		close(p.exited)
	}()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-p.exited:
			p.t.Fatalf("walbus exited with %d:\n%s", p.exitCode, p.logs())
		default:
		}
		if !p.listening(from) {
			time.Sleep(20 * time.Millisecond)
			continue
		}
		if resp, err := p.healthClient().Get(p.scheme() + "://" + p.http + "/health"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				p.listening(from) // and the lines logged since
				return
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	p.t.Fatalf("walbus did not become ready:\n%s", p.logs())
}

// listeningLine is serve's "listening" log line, as text or JSON.
var listeningLine = regexp.MustCompile(`listening"?,? ?"?(amqps|amqp|http)"?[=:]"?([^\s",}]+)`)

// listening takes the addresses the process has logged since byte from of
// its log, and reports whether both the AMQP and the HTTP one are known.
func (p *proc) listening(from int) bool {
	p.mu.Lock()
	text := string(p.log.Bytes()[from:])
	p.mu.Unlock()
	var amqp, http bool
	for _, m := range listeningLine.FindAllStringSubmatch(text, -1) {
		switch m[1] {
		case "amqp":
			p.amqp, amqp = m[2], true
		case "http":
			p.http, http = m[2], true
		case "amqps":
			p.amqps = m[2]
		}
	}
	return amqp && http
}

// scheme is https when the process serves HTTP over TLS.
func (p *proc) scheme() string {
	if slices.Contains(p.args, "--http-tls") {
		return "https"
	}
	return "http"
}

// healthClient trusts the process's certificate authority when it serves
// HTTPS (the CA is next to the --tls-cert file).
func (p *proc) healthClient() *http.Client {
	i := slices.Index(p.args, "--tls-cert")
	if p.scheme() != "https" || i < 0 {
		return http.DefaultClient
	}
	pem, err := os.ReadFile(filepath.Join(filepath.Dir(p.args[i+1]), "ca.pem"))
	if err != nil {
		p.t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	return &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: "localhost"}}}
}

func (p *proc) logs() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.log.String()
}

// kill ends the process with SIGKILL: a crash.
func (p *proc) kill() {
	if p.cmd == nil || p.cmd.Process == nil {
		return
	}
	select {
	case <-p.exited:
		return
	default:
	}
	p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.exited
}

// signal sends sig and waits for the exit status.
func (p *proc) signal(sig os.Signal) int {
	p.cmd.Process.Signal(sig)
	select {
	case <-p.exited:
	case <-time.After(60 * time.Second):
		p.t.Fatalf("walbus did not exit after %v:\n%s", sig, p.logs())
	}
	return p.exitCode
}

func (p *proc) connString() string {
	return fmt.Sprintf("Endpoint=sb://%s;SharedAccessKeyName=RootManageSharedAccessKey;SharedAccessKey=SAS_KEY_VALUE;UseDevelopmentEmulator=true", p.amqp)
}

// sdkClient is a Go SDK client of the root key for p, with default
// options; callers close it.
func (p *proc) sdkClient() *azservicebus.Client {
	p.t.Helper()
	client, err := azservicebus.NewClientFromConnectionString(p.connString(), nil)
	if err != nil {
		p.t.Fatal(err)
	}
	return client
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(b []byte) (int, error) { return f(b) }

// lockedLog gathers what a process writes, from the goroutine that copies
// its output, for a benchmark to read meanwhile.
type lockedLog struct {
	mu sync.Mutex
	b  []byte
}

func (l *lockedLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.b = append(l.b, p...)
	return len(p), nil
}

// Bytes returns a copy of what was written so far.
func (l *lockedLog) Bytes() []byte {
	l.mu.Lock()
	defer l.mu.Unlock()
	return bytes.Clone(l.b)
}

// writeConfig writes an emulator Config.json with one queue.
func writeConfig(t *testing.T, queue, props string) string {
	t.Helper()
	return writeConfigQueues(t, queueDef{queue, props})
}

// queueDef is a queue of a Config.json: its name and the JSON of its
// properties, without braces.
type queueDef struct{ name, props string }

// writeConfigQueues writes an emulator Config.json with these queues.
func writeConfigQueues(t testing.TB, queues ...queueDef) string {
	t.Helper()
	var list []string
	for _, q := range queues {
		list = append(list, fmt.Sprintf(`{"Name": %q, "Properties": {%s}}`, q.name, q.props))
	}
	path := filepath.Join(t.TempDir(), "Config.json")
	body := fmt.Sprintf(`{"UserConfig": {"Namespaces": [{"Name": "sbemulatorns",
		"Queues": [%s], "Topics": []}], "Logging": {"Type": "File"}}}`, strings.Join(list, ", "))
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}
