// Command run runs the official Go SDK's own live tests (azservicebus and
// its admin package, at the version go.mod pins) against a real walbus
// serve, as a conformance suite.
//
// The SDK's test helpers sign in with Azure AD. run.go edits one file of
// them, internal/test/test_helpers.go, so that every client is made from a
// connection string: it reads the file from the module cache, applies the
// edits below (each must match exactly once, so a new SDK version that
// moved the code fails loudly), and hands the result to go test -overlay.
// Nothing of the SDK is copied into this repository.
//
// The tests then run in a network namespace of their own (unshare) in
// which only the loopback interface exists, beside the walbus they test:
// nothing they do can reach another address (the managed identity probe of
// 169.254.169.254 included).
//
//	go run . --walbus ../../../bin/walbus [--run REGEXP] [--v]
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"
)

const sdkModule = "github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"

// packages are the SDK packages whose tests run, with their directories
// relative to the module.
var packages = []struct{ path, dir string }{
	{sdkModule, "."},
	{sdkModule + "/admin", "admin"},
}

// edit is one change to the SDK's test helper file.
type edit struct{ old, new string }

// helperEdits make the helpers build every client from a connection string
// and never reach for an Azure AD credential.
var helperEdits = []edit{
	// The Azure AD credential goes; noIdentity (in the added file) takes its
	// place and fails any test that still asks for a token.
	{"\t\"github.com/Azure/azure-sdk-for-go/sdk/internal/test/credential\"\n", ""},
	{"tokenCred, err := credential.New(nil)", "tokenCred, err := noIdentity(nil)"},
	// NewClient: tests that ask for a token credential get the connection
	// string client too.
	{"\tif options.UseConnectionString {\n", "\tif options.UseConnectionString || connectionStringsOnly {\n"},
	// CreateExpiringQueue makes its queue through the connection string.
	{"\tiv := GetIdentityVars(t)\n\n\tem, err := atom.NewEntityManager(iv.Endpoint, iv.Cred, \"\", nil)",
		"\tem, err := atom.NewEntityManagerWithConnectionString(MustGetEnvVar(t, EnvKeyConnectionString), \"\", nil)"},
}

// addedHelper is a file added to the helper package by the overlay.
const addedHelper = `package test

import (
	"context"
	"errors"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
)

// Added by walbus's conformance runner: every client uses a connection string.
const connectionStringsOnly = true

type noIdentityCredential struct{}

func noIdentity(any) (azcore.TokenCredential, error) { return noIdentityCredential{}, nil }

func (noIdentityCredential) GetToken(context.Context, policy.TokenRequestOptions) (azcore.AccessToken, error) {
	return azcore.AccessToken{}, errors.New("walbus conformance: no Azure AD identity here; this test needs the cloud")
}
`

func main() {
	walbus := flag.String("walbus", "", "the walbus binary")
	run := flag.String("run", "", "only tests matching this regexp (go test -run)")
	verbose := flag.Bool("v", false, "print every test's output, not just failures'")
	inside := flag.String("inside", "", "internal: the work directory, when running inside the network namespace")
	flag.Parse()
	var err error
	if *inside != "" {
		err = runInside(*inside, *walbus, *run, *verbose)
	} else {
		err = prepare(*walbus, *run, *verbose)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "conformance:", err)
		os.Exit(1)
	}
}

// prepare builds the test binaries with the edited helpers, then runs
// itself again inside a network namespace that has only loopback.
func prepare(walbus, run string, verbose bool) error {
	if walbus == "" {
		return errors.New("--walbus is required")
	}
	walbus, err := filepath.Abs(walbus)
	if err != nil {
		return err
	}
	if err := samePin("go.mod", filepath.Join("..", "..", "..", "go.mod")); err != nil {
		return err
	}
	// The module's directory in the cache (downloaded first: go list -m
	// names no directory for a module not downloaded yet).
	if out, err := exec.Command("go", "mod", "download", sdkModule).CombinedOutput(); err != nil {
		return fmt.Errorf("go mod download %s: %v: %s", sdkModule, err, out)
	}
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", sdkModule).Output()
	if err != nil {
		return fmt.Errorf("go list -m %s: %w", sdkModule, err)
	}
	modDir := strings.TrimSpace(string(out))
	if modDir == "" {
		return fmt.Errorf("go list -m %s names no directory", sdkModule)
	}
	work, err := os.MkdirTemp("", "walbus-gosdk-")
	if err != nil {
		return err
	}
	// go test -overlay may not replace files in the module cache, so the
	// tests build from a copy of the module made for this run (and removed
	// after it), which a go.mod beside it names with a replace directive.
	cached := modDir
	modDir = filepath.Join(work, "azservicebus")
	if err := copyTree(cached, modDir); err != nil {
		return err
	}
	gomod, err := os.ReadFile("go.mod")
	if err != nil {
		return err
	}
	gomod = append(gomod, "\nreplace "+sdkModule+" => "+modDir+"\n"...)
	if err := os.WriteFile(filepath.Join(work, "go.mod"), gomod, 0o644); err != nil {
		return err
	}
	if err := copyFile("go.sum", filepath.Join(work, "go.sum")); err != nil {
		return err
	}
	helperPath := filepath.Join(modDir, "internal", "test", "test_helpers.go")
	src, err := os.ReadFile(helperPath)
	if err != nil {
		return err
	}
	edited, err := applyEdits(string(src), helperEdits)
	if err != nil {
		return fmt.Errorf("%s: %w", helperPath, err)
	}
	overlay := map[string]map[string]string{"Replace": {
		helperPath: filepath.Join(work, "test_helpers.go"),
		filepath.Join(modDir, "internal", "test", "walbus_added.go"): filepath.Join(work, "walbus_added.go"),
	}}
	if err := os.WriteFile(filepath.Join(work, "test_helpers.go"), []byte(edited), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(work, "walbus_added.go"), []byte(addedHelper), 0o644); err != nil {
		return err
	}
	ov, _ := json.Marshal(overlay)
	if err := os.WriteFile(filepath.Join(work, "overlay.json"), ov, 0o644); err != nil {
		return err
	}
	for _, p := range packages {
		bin := filepath.Join(work, binName(p.dir))
		cmd := exec.Command("go", "test", "-c", "-modfile", filepath.Join(work, "go.mod"), "-overlay", filepath.Join(work, "overlay.json"), "-o", bin, p.path)
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("building the tests of %s: %w", p.path, err)
		}
	}
	if err := os.WriteFile(filepath.Join(work, "moddir"), []byte(modDir), 0o644); err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	// The namespace has its own /etc/hosts too (a mount namespace binds
	// one over it): localhost is 127.0.0.2, so that nothing listens on
	// 127.0.0.1, as TestClientUsingCustomEndpoint expects of a TCP proxy
	// address it makes up, and the premium namespace has a name.
	hosts := "127.0.0.2 localhost\n127.0.0.3 " + premiumHost + "\n"
	if err := os.WriteFile(filepath.Join(work, "hosts"), []byte(hosts), 0o644); err != nil {
		return err
	}
	args := []string{"--net", "--mount", "--map-root-user", "sh", "-c",
		`ip link set lo up && mount --bind "$WALBUS_HOSTS" /etc/hosts && exec "$0" "$@"`,
		self, "--inside", work, "--walbus", walbus, "--run", run}
	if verbose {
		args = append(args, "--v")
	}
	cmd := exec.Command("unshare", args...)
	cmd.Env = append(os.Environ(), "WALBUS_HOSTS="+filepath.Join(work, "hosts"))
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if err = cmd.Run(); err != nil {
		err = fmt.Errorf("the tests, run by unshare in a network namespace of loopback only (which needs unshare, mount and ip): %w", err)
	}
	if os.Getenv("WALBUS_KEEP") == "" {
		os.RemoveAll(work)
	} else {
		fmt.Println("kept", work)
	}
	return err
}

// copyTree copies a directory tree, leaving the copies writable (the
// module cache's files are read-only).
func copyTree(from, to string) error {
	return filepath.WalkDir(from, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(from, path)
		if err != nil {
			return err
		}
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(to, rel), 0o755)
		}
		return copyFile(path, filepath.Join(to, rel))
	})
}

func copyFile(from, to string) error {
	b, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	return os.WriteFile(to, b, 0o644)
}

// samePin checks that this module tests the SDK version the repository
// pins.
func samePin(ours, repo string) error {
	version := func(path string) (string, error) {
		b, err := os.ReadFile(path)
		if err != nil {
			return "", err
		}
		for _, line := range strings.Split(string(b), "\n") {
			if f := strings.Fields(strings.TrimPrefix(strings.TrimSpace(line), "require ")); len(f) >= 2 && f[0] == sdkModule {
				return f[1], nil
			}
		}
		return "", fmt.Errorf("%s does not require %s", path, sdkModule)
	}
	a, err := version(ours)
	if err != nil {
		return err
	}
	b, err := version(repo)
	if err != nil {
		return err
	}
	if a != b {
		return fmt.Errorf("%s tests %s %s but the repository pins %s: update it (go get %s@%s && go mod tidy)", ours, sdkModule, a, b, sdkModule, b)
	}
	return nil
}

func binName(dir string) string {
	if dir == "." {
		return "azservicebus.test"
	}
	return dir + ".test"
}

func applyEdits(src string, edits []edit) (string, error) {
	for _, e := range edits {
		if n := strings.Count(src, e.old); n != 1 {
			return "", fmt.Errorf("edit %q matches %d times, not once: has the SDK changed?", e.old, n)
		}
		src = strings.Replace(src, e.old, e.new, 1)
	}
	return src, nil
}

// The keys the SDK's bicep template creates, and the queues.
const rootKey = "conformance-root-key"

var keys = []map[string]string{
	{"name": "NoManage", "key": "conformance-no-manage", "rights": "Listen,Send"},
	{"name": "SendOnly", "key": "conformance-send-only", "rights": "Send"},
	{"name": "ListenOnly", "key": "conformance-listen-only", "rights": "Listen"},
}

func builtInQueue(name string, sessions bool) map[string]any {
	return map[string]any{"Name": name, "Properties": map[string]any{
		"LockDuration":                        "PT5M",
		"MaxSizeInMegabytes":                  1024,
		"RequiresDuplicateDetection":          false,
		"RequiresSession":                     sessions,
		"DefaultMessageTimeToLive":            "P10675199DT2H48M5.4775807S",
		"DeadLetteringOnMessageExpiration":    false,
		"DuplicateDetectionHistoryTimeWindow": "PT10M",
		"MaxDeliveryCount":                    10,
		"AutoDeleteOnIdle":                    "P10675199DT2H48M5.4775807S",
		"EnablePartitioning":                  false,
	}}
}

func runInside(work, walbus, run string, verbose bool) error {
	if err := loopbackOnly(); err != nil {
		return err
	}
	modDirB, err := os.ReadFile(filepath.Join(work, "moddir"))
	if err != nil {
		return err
	}
	modDir := string(modDirB)
	certDir := filepath.Join(work, "certs")
	if out, err := exec.Command(walbus, "cert", "--out", certDir, "--host", "localhost", "--host", premiumHost).CombinedOutput(); err != nil {
		return fmt.Errorf("walbus cert: %v: %s", err, out)
	}
	// Two namespaces, as the bicep template makes: a Standard one (whose
	// messages are at most 256 KB) and a Premium one (up to 100 MB).
	standard, err := startNamespace(walbus, work, certDir, "standard", "127.0.0.2", "256KiB")
	if err != nil {
		return err
	}
	defer standard.stop()
	premium, err := startNamespace(walbus, work, certDir, "premium", "127.0.0.3", "100MiB")
	if err != nil {
		return err
	}
	defer premium.stop()
	// The SDK takes the endpoint's host for TLS's server name, port and
	// all, so the endpoints have no port: AMQP goes to 5671 and the
	// administration API to 443, both walbus listeners (the namespace's
	// own root may bind them).
	cs := func(host, name, key string) string {
		return "Endpoint=sb://" + host + "/;SharedAccessKeyName=" + name + ";SharedAccessKey=" + key
	}
	env := append(os.Environ(),
		"AZURE_RECORD_MODE=live",
		"SSL_CERT_FILE="+filepath.Join(certDir, "ca.pem"),
		"SERVICEBUS_ENDPOINT=localhost",
		"SERVICEBUS_ENDPOINT_PREMIUM="+premiumHost,
		"SERVICEBUS_CONNECTION_STRING="+cs("localhost", "RootManageSharedAccessKey", rootKey),
		"SERVICEBUS_CONNECTION_STRING_PREMIUM="+cs(premiumHost, "RootManageSharedAccessKey", rootKey),
		"SERVICEBUS_CONNECTION_STRING_NO_MANAGE="+cs("localhost", keys[0]["name"], keys[0]["key"]),
		"SERVICEBUS_CONNECTION_STRING_SEND_ONLY="+cs("localhost", keys[1]["name"], keys[1]["key"]),
		"SERVICEBUS_CONNECTION_STRING_LISTEN_ONLY="+cs("localhost", keys[2]["name"], keys[2]["key"]),
	)
	listed, err := readSkipped("skipped.txt")
	if err != nil {
		return err
	}
	var total summary
	failed := false
	for _, p := range packages {
		s, err := runTests(filepath.Join(work, binName(p.dir)), filepath.Join(modDir, p.dir), env, run, listed, verbose)
		if err != nil {
			failed = true
			fmt.Printf("%s: %v\n", p.path, err)
		}
		fmt.Printf("%s: %d passed, %d failed, %d skipped themselves, %d listed as not run\n", p.path, s.pass, len(s.fail), len(s.skipped), s.listed)
		total.add(s)
	}
	fmt.Printf("\nconformance: %d of %d tests passed (%d failed, %d skipped themselves, %d not run: skipped.txt)\n",
		total.pass, total.pass+len(total.fail)+len(total.skipped)+total.listed, len(total.fail), len(total.skipped), total.listed)
	for _, name := range slices.Sorted(maps.Keys(listed)) {
		fmt.Printf("  not run: %s: %s\n", name, listed[name])
	}
	if len(total.skipped) > 0 {
		// A test that skips itself, or any of its subtests, here has not
		// passed: it belongs in skipped.txt with its reason, or fixed.
		fmt.Println("skipped themselves (not in skipped.txt):", strings.Join(total.skipped, " "))
		failed = true
	}
	if len(total.fail) > 0 {
		fmt.Println("failed:", strings.Join(total.fail, " "))
		failed = true
	}
	if failed {
		for _, ns := range []*namespace{standard, premium} {
			tail, _ := exec.Command("tail", "-n", "40", ns.log).Output()
			fmt.Printf("%s namespace's walbus log, its end:\n%s", ns.name, tail)
		}
		return errors.New("the SDK's tests did not all pass")
	}
	return nil
}

// premiumHost names the premium namespace (in the namespace's own
// /etc/hosts).
const premiumHost = "premium.localhost"

type namespace struct {
	name, log string
	cmd       *exec.Cmd
}

// startNamespace starts a walbus serving AMQP on ip:5671 and HTTPS on
// ip:443, with the bicep template's keys and queues.
func startNamespace(walbus, work, certDir, name, ip, maxMessage string) (*namespace, error) {
	dir := filepath.Join(work, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	config := map[string]any{"UserConfig": map[string]any{
		"Namespaces": []any{map[string]any{
			"Name":   name,
			"Queues": []any{builtInQueue("testQueue", false), builtInQueue("testQueueWithSessions", true)},
			"Topics": []any{},
		}},
		"Logging": map[string]any{"Type": "File"},
	}}
	if err := writeJSON(filepath.Join(dir, "Config.json"), config); err != nil {
		return nil, err
	}
	if err := writeJSON(filepath.Join(dir, "keys.json"), keys); err != nil {
		return nil, err
	}
	ns := &namespace{name: name, log: filepath.Join(dir, "walbus.log")}
	logFile, err := os.Create(ns.log)
	if err != nil {
		return nil, err
	}
	defer logFile.Close()
	ns.cmd = exec.Command(walbus, "serve",
		"--data", filepath.Join(dir, "data"),
		"--config", filepath.Join(dir, "Config.json"),
		"--keys", filepath.Join(dir, "keys.json"),
		"--key", "RootManageSharedAccessKey="+rootKey+":Manage",
		"--no-default-key",
		"--amqps", ip+":5671", "--amqp", "", "--http", ip+":443",
		"--tls-cert", filepath.Join(certDir, "server.pem"),
		"--tls-key", filepath.Join(certDir, "server-key.pem"),
		"--max-message-size", maxMessage, "--max-frame-size", "1MiB",
		"--log-level", "debug")
	ns.cmd.Stdout, ns.cmd.Stderr = logFile, logFile
	if err := ns.cmd.Start(); err != nil {
		return nil, err
	}
	if err := waitFor(ip+":5671", 30*time.Second); err != nil {
		ns.stop()
		return nil, err
	}
	return ns, nil
}

func (ns *namespace) stop() {
	ns.cmd.Process.Signal(os.Interrupt)
	ns.cmd.Wait()
}

// loopbackOnly checks that this process sees no network but loopback.
func loopbackOnly() error {
	ifs, err := net.Interfaces()
	if err != nil {
		return err
	}
	for _, i := range ifs {
		if i.Flags&net.FlagLoopback == 0 {
			return fmt.Errorf("interface %s is present: the tests must run with loopback only", i.Name)
		}
	}
	return nil
}

func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o600)
}

func waitFor(addr string, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("walbus did not listen on %s: %w", addr, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// readSkipped reads the tests that cannot pass here: one per line, a
// test's name (TEST, or TEST/SUB for a subtest, as go test -v names it)
// and then the reason.
func readSkipped(path string) (map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	m := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, reason, _ := strings.Cut(line, " ")
		if strings.TrimSpace(reason) == "" {
			return nil, fmt.Errorf("%s: %s has no reason", path, name)
		}
		if strings.Count(name, "/") > 1 {
			return nil, fmt.Errorf("%s: %s: a test or a test's subtest (TEST/SUB) can be listed, not deeper", path, name)
		}
		m[name] = strings.TrimSpace(reason)
	}
	return m, sc.Err()
}

// summary counts top-level tests: a test passed if it and every one of its
// subtests passed; one that skipped itself or a subtest is in skipped.
type summary struct {
	pass, listed  int
	fail, skipped []string
}

func (s *summary) add(o summary) {
	s.pass += o.pass
	s.listed += o.listed
	s.fail = append(s.fail, o.fail...)
	s.skipped = append(s.skipped, o.skipped...)
}

// resultLine is a test's result, indented for a subtest.
var resultLine = regexp.MustCompile(`^(\s*)--- (PASS|FAIL|SKIP): (\S+) `)

// runTests runs one test binary in its package's directory and counts its
// top-level tests.
func runTests(bin, dir string, env []string, run string, listed map[string]string, verbose bool) (summary, error) {
	var s summary
	pattern := ".*"
	if run != "" {
		pattern = run
	}
	list, err := exec.Command(bin, "-test.list", pattern).Output()
	if err != nil {
		return s, fmt.Errorf("listing tests: %w", err)
	}
	// The tests to run are named one by one, leaving out the listed ones;
	// listed subtests (TEST/SUB) are left out by -test.skip, whose first
	// level, empty, matches every test.
	var runNames, skipSubs []string
	for _, n := range strings.Fields(string(list)) {
		if !strings.HasPrefix(n, "Test") {
			continue
		}
		if _, ok := listed[n]; ok {
			s.listed++
			continue
		}
		runNames = append(runNames, regexp.QuoteMeta(n))
		for name := range listed {
			if top, sub, ok := strings.Cut(name, "/"); ok && top == n {
				skipSubs = append(skipSubs, regexp.QuoteMeta(sub))
			}
		}
	}
	if len(runNames) == 0 {
		return s, nil
	}
	sort.Strings(skipSubs)
	args := []string{"-test.v", "-test.count", "1", "-test.timeout", "30m", "-test.run", "^(" + strings.Join(runNames, "|") + ")$"}
	if len(skipSubs) > 0 {
		args = append(args, "-test.skip", "/^("+strings.Join(skipSubs, "|")+")$")
	}
	cmd := exec.Command(bin, args...)
	cmd.Dir, cmd.Env = dir, env
	var buf bytes.Buffer
	var w io.Writer = &buf
	if verbose {
		w = io.MultiWriter(&buf, os.Stdout)
	}
	cmd.Stdout, cmd.Stderr = w, w
	runErr := cmd.Run()
	subSkipped := map[string]bool{}
	var tops []string
	results := map[string]string{}
	for _, line := range strings.Split(buf.String(), "\n") {
		m := resultLine.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		if m[1] != "" {
			if m[2] == "SKIP" {
				top, _, _ := strings.Cut(m[3], "/")
				subSkipped[top] = true
			}
			continue
		}
		tops = append(tops, m[3])
		results[m[3]] = m[2]
	}
	for _, name := range tops {
		switch {
		case results[name] == "FAIL":
			s.fail = append(s.fail, name)
		case results[name] == "SKIP" || subSkipped[name]:
			s.skipped = append(s.skipped, name)
		default:
			s.pass++
		}
	}
	if len(s.fail) > 0 && !verbose {
		fmt.Print(buf.String())
	}
	if runErr != nil && len(s.fail) == 0 {
		fmt.Print(buf.String())
		return s, fmt.Errorf("the test binary failed: %w", runErr)
	}
	return s, nil
}
