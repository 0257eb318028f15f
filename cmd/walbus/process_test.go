package main

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"
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
	amqp     string
	http     string
	args     []string
	env      []string // added to this process's environment
	mu       sync.Mutex
	log      bytes.Buffer
	exited   chan struct{}
	exitCode int
}

func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// startWalbus starts walbus serve on fresh loopback ports with data in dir
// and waits until /health says it is ready.
func startWalbus(t *testing.T, dir string, args ...string) *proc {
	t.Helper()
	p := &proc{t: t, dir: dir, amqp: freePort(t), http: freePort(t), args: args}
	p.start()
	t.Cleanup(func() { p.kill() })
	return p
}

func (p *proc) start() {
	p.t.Helper()
	args := append([]string{"serve", "--data", p.dir, "--amqp", p.amqp, "--http", p.http}, p.args...)
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
		if resp, err := p.healthClient().Get(p.scheme() + "://" + p.http + "/health"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	p.t.Fatalf("walbus did not become ready:\n%s", p.logs())
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

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(b []byte) (int, error) { return f(b) }

// writeConfig writes an emulator Config.json with one queue.
func writeConfig(t *testing.T, queue, props string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "Config.json")
	body := fmt.Sprintf(`{"UserConfig": {"Namespaces": [{"Name": "sbemulatorns",
		"Queues": [{"Name": %q, "Properties": {%s}}], "Topics": []}], "Logging": {"Type": "File"}}}`, queue, props)
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}
