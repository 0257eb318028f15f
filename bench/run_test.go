package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/walbus/walbus/amqpserver"
	"github.com/walbus/walbus/amqpserver/sas"
	"github.com/walbus/walbus/bench/floor"
	"github.com/walbus/walbus/broker"
	"github.com/walbus/walbus/projection"
)

// startWalbus serves a real broker, in this process, with the queues.
func startWalbus(t *testing.T, queues ...string) string {
	t.Helper()
	return serveWalbus(t, func(b *broker.Broker) {
		for _, q := range queues {
			if _, err := b.CreateQueue(q, projection.DefaultConfig()); err != nil {
				t.Fatal(err)
			}
		}
	})
}

// startWalbusTopics serves a real broker, in this process, with the
// topics, each with the subscriptions s1 to sN.
func startWalbusTopics(t *testing.T, subscriptions int, topics ...string) string {
	t.Helper()
	return serveWalbus(t, func(b *broker.Broker) {
		for _, name := range topics {
			topic, err := b.CreateTopic(name, broker.DefaultTopicConfig())
			if err != nil {
				t.Fatal(err)
			}
			for i := range subscriptions {
				if err := topic.CreateSubscription(fmt.Sprintf("s%d", i+1), broker.DefaultSubscriptionConfig(), nil); err != nil {
					t.Fatal(err)
				}
			}
		}
	})
}

// serveWalbus serves a real broker, in this process, after setup has
// created its entities.
func serveWalbus(t *testing.T, setup func(*broker.Broker)) string {
	t.Helper()
	b, _, err := broker.Open(broker.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	setup(b)
	keys, err := sas.NewKeys(sas.Key{Name: emulatorKeyName, Value: emulatorKey, Rights: sas.Manage})
	if err != nil {
		t.Fatal(err)
	}
	srv := amqpserver.New(b, amqpserver.Config{Keys: keys})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(l)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
		b.Close()
	})
	return l.Addr().String()
}

// A short run with each client moves messages end to end with no errors,
// and measures what it claims to.
func TestRunAgainstWalbus(t *testing.T) {
	// A queue each, so no run drains another's backlog.
	addr := startWalbus(t, "sdk", "amqp", "paced")
	for _, tc := range []struct {
		queue string
		args  []string
	}{
		// The SDK, batched sends from two goroutines, two receivers
		// completing up to four messages at once.
		{"sdk", []string{"--client", "sdk", "--conn-string",
			fmt.Sprintf("Endpoint=sb://%s;SharedAccessKeyName=%s;SharedAccessKey=%s;UseDevelopmentEmulator=true", addr, emulatorKeyName, emulatorKey),
			"--batch", "10", "--in-flight", "2", "--receivers", "2"}},
		// Plain AMQP with SASL PLAIN, eight unsettled sends, credit eight.
		{"amqp", []string{"--url", fmt.Sprintf("amqp://%s:%s@%s", emulatorKeyName, emulatorKey, addr), "--in-flight", "8"}},
		// Paced, receive-and-delete.
		{"paced", []string{"--url", "amqp://" + addr, "--client", "sdk", "--rate", "200", "--mode", "rad"}},
	} {
		t.Run(tc.queue, func(t *testing.T) {
			res, text := runArgs(t, append([]string{"--queue", tc.queue, "--size", "256", "--warmup", "300ms", "--duration", "1500ms"}, tc.args...))
			if res.Sent == 0 || res.Received == 0 || res.SendRate <= 0 || res.ReceiveRate <= 0 {
				t.Fatalf("sent %d received %d", res.Sent, res.Received)
			}
			if res.Stale != 0 {
				t.Fatalf("%d messages not from this run", res.Stale)
			}
			l := res.Latency
			if l.Count == 0 || l.P50 <= 0 || l.P99 < l.P50 || l.P999 < l.P99 || l.Max < l.P999 {
				t.Fatalf("latency %+v", l)
			}
			if s := res.SendLatency; s.Count == 0 || s.P50 <= 0 {
				t.Fatalf("send latency %+v", s)
			}
			if math := res.MeasuredSeconds; math < 1.4 || math > 2 {
				t.Fatalf("measured %vs of a 1.5s window", math)
			}
			if runtime.GOOS == "linux" {
				// The broker listens in this process, and is found there.
				if res.Broker == nil || res.Broker.PID != os.Getpid() || !res.Broker.SameProcess || res.Broker.PeakRSSBytes <= 0 {
					t.Fatalf("broker %+v (%s)", res.Broker, res.BrokerNote)
				}
				if res.ClientUsage == nil || res.ClientUsage.CPUSeconds <= 0 {
					t.Fatalf("client %+v", res.ClientUsage)
				}
				// The machine was at least as busy as this process (broker
				// and client), give or take /proc/stat's 10 ms ticks.
				own := res.ClientUsage.CPUSeconds / res.MeasuredSeconds
				if m := res.Machine; m == nil || m.CPUs < 1 || m.BusyCPUs < own/2 || m.BusyCPUs > float64(m.CPUs) ||
					m.StolenCPUs < 0 || m.StolenCPUs > m.BusyCPUs {
					t.Fatalf("machine %+v; this process used %.2f CPUs", m, own)
				}
				if !strings.Contains(text, "CPUs busy") {
					t.Fatal("the text report does not say how busy the machine was")
				}
			}
			var back Result
			if data, err := json.Marshal(res); err != nil || json.Unmarshal(data, &back) != nil || back.Sent != res.Sent {
				t.Fatalf("json round trip: %v", err)
			}
		})
	}
}

// A topic run sends each message once and receives a copy on every
// subscription: with the SDK, with go-amqp attached to the subscriptions'
// paths, and with go-amqp given those paths as --receive-addresses (as for
// another broker's fan-out). Every subscription's receivers get copies,
// and the broker's disk writes are measured.
// runArgs parses args, runs the bench (20 s at most) and fails the test if
// the run failed; it returns the result and its text report, logged.
func runArgs(t *testing.T, args []string) (*Result, string) {
	t.Helper()
	cfg, err := ParseArgs(args, os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	res, err := Run(ctx, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	var text bytes.Buffer
	if err := res.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	t.Logf("\n%s", text.String())
	if res.Failed() || res.Errors.Warmup > 0 {
		t.Fatalf("errors: %+v (%s)", res.Errors, res.Problem())
	}
	return res, text.String()
}

func TestRunTopicAgainstWalbus(t *testing.T) {
	// A topic each, so no run drains another's backlog.
	addr := startWalbusTopics(t, 2, "sdk", "amqp", "fanout")
	conn := fmt.Sprintf("Endpoint=sb://%s;SharedAccessKeyName=%s;SharedAccessKey=%s;UseDevelopmentEmulator=true", addr, emulatorKeyName, emulatorKey)
	url := fmt.Sprintf("amqp://%s:%s@%s", emulatorKeyName, emulatorKey, addr)
	for _, tc := range []struct {
		name   string
		args   []string
		header string
	}{
		{"sdk", []string{"--conn-string", conn, "--topic", "sdk", "--subscriptions", "2", "--batch", "5"},
			"topic sdk, subscriptions s1, s2"},
		{"amqp", []string{"--url", url, "--topic", "amqp", "--subscriptions", "s1,s2", "--in-flight", "4"},
			"topic amqp, subscriptions s1, s2"},
		{"fanout", []string{"--url", url, "--address", "fanout",
			"--receive-addresses", "fanout/Subscriptions/s1,fanout/Subscriptions/s2", "--in-flight", "4"},
			"sending to fanout, receiving from fanout/Subscriptions/s1, fanout/Subscriptions/s2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, text := runArgs(t, append([]string{"--size", "256", "--warmup", "300ms", "--duration", "1500ms", "--receivers", "2"}, tc.args...))
			if res.Sent == 0 || res.Stale != 0 || len(res.ReceivedBy) != 2 || res.Latency.Count == 0 {
				t.Fatalf("sent %d, stale %d, by group %+v, latency %+v", res.Sent, res.Stale, res.ReceivedBy, res.Latency)
			}
			var copies int64
			for _, g := range res.ReceivedBy {
				if g.Received == 0 || g.ReceiveRate <= 0 {
					t.Fatalf("group %+v received nothing", g)
				}
				copies += g.Received
			}
			if copies != res.Received {
				t.Fatalf("groups received %d in all, the run %d", copies, res.Received)
			}
			if !strings.Contains(text, tc.header) || !strings.Contains(text, "2 receivers per ") {
				t.Fatalf("the report does not say %q and its receivers", tc.header)
			}
			if runtime.GOOS == "linux" {
				if res.Broker == nil || res.Broker.Disk == nil || res.Broker.Disk.BytesPerSent < 0 {
					t.Fatalf("broker %+v (%s)", res.Broker, res.BrokerNote)
				}
				if !strings.Contains(text, "broker disk writes:") {
					t.Fatal("the text report does not give the broker's disk writes")
				}
			}
		})
	}
}

// A receive-only run drains what an earlier run left: those messages count
// as received, marked stale, with no latency (their send times belong to
// another run). The earlier run is sent with the SDK and drained with
// go-amqp, so the stamps also cross from one client to the other.
func TestRunDrainsEarlierMessages(t *testing.T) {
	addr := startWalbus(t, "q")
	run := func(args ...string) *Result {
		t.Helper()
		cfg, err := ParseArgs(append([]string{"--queue", "q", "--warmup", "0s"}, args...), os.Stderr)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		res, err := Run(ctx, cfg, nil)
		if err != nil {
			t.Fatal(err)
		}
		if res.Failed() || res.Errors.Warmup > 0 {
			t.Fatalf("errors: %+v", res.Errors)
		}
		return res
	}
	fill := run("--client", "sdk", "--url", "amqp://"+addr, "--receivers", "0", "--batch", "20", "--duration", "500ms")
	if fill.Sent == 0 || fill.Received != 0 {
		t.Fatalf("fill: sent %d received %d", fill.Sent, fill.Received)
	}
	drain := run("--url", fmt.Sprintf("amqp://%s:%s@%s", emulatorKeyName, emulatorKey, addr),
		"--senders", "0", "--in-flight", "16", "--duration", "1s")
	if drain.Received == 0 || drain.Stale != drain.Received || drain.Latency.Count != 0 {
		t.Fatalf("drain: received %d, stale %d, latency %+v", drain.Received, drain.Stale, drain.Latency)
	}
	// With no warm-up, the fill sent what its window counted plus at most
	// the one batch of 20 in flight when the window closed.
	if drain.Received > fill.Sent+20 {
		t.Fatalf("drained %d, more than the %d sent", drain.Received, fill.Sent)
	}
}

// A run that cannot reach its queue fails at the start, for senders and
// receivers of both clients, instead of measuring nothing.
func TestRunRefusesAMissingQueue(t *testing.T) {
	addr := startWalbus(t, "q")
	conn := fmt.Sprintf("Endpoint=sb://%s;SharedAccessKeyName=%s;SharedAccessKey=%s;UseDevelopmentEmulator=true", addr, emulatorKeyName, emulatorKey)
	url := fmt.Sprintf("amqp://%s:%s@%s", emulatorKeyName, emulatorKey, addr)
	for name, args := range map[string][]string{
		"sdk sender":    {"--client", "sdk", "--conn-string", conn, "--receivers", "0"},
		"sdk receiver":  {"--client", "sdk", "--conn-string", conn, "--senders", "0"},
		"amqp sender":   {"--url", url, "--receivers", "0"},
		"amqp receiver": {"--url", url, "--senders", "0"},
	} {
		t.Run(name, func(t *testing.T) {
			cfg, err := ParseArgs(append([]string{"--queue", "nosuchqueue", "--warmup", "0s", "--duration", "500ms"}, args...), os.Stderr)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			if res, err := Run(ctx, cfg, nil); err == nil {
				t.Fatalf("ran against a missing queue: %+v", res)
			}
		})
	}
}

// A window in which receivers saw nothing is a failed run, even with no
// errors counted: the SDK retries a broker that has gone away silently.
func TestResultWithNothingReceivedFails(t *testing.T) {
	res := &Result{Senders: 0, Receivers: 2, MeasuredSeconds: 1}
	if !res.Failed() || res.Problem() == "" {
		t.Fatal("a receive-only run that received nothing passed")
	}
	res.Received = 1
	if res.Failed() {
		t.Fatalf("a run that received passed as failed: %s", res.Problem())
	}
	res = &Result{Senders: 1, MeasuredSeconds: 1}
	if !res.Failed() {
		t.Fatal("a send-only run that sent nothing passed")
	}
	res.Errors.Send = 1
	res.Sent = 10
	if p := res.Problem(); !strings.Contains(p, "1 send") {
		t.Fatalf("problem %q does not count the send error", p)
	}
}

// A run against the do-nothing broker (walbus bench floor) works with each
// client and reports no errors: the floor is a usable control.
func TestRunAgainstTheFloor(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go floor.New().Serve(ln)
	addr := ln.Addr().String()
	for _, args := range [][]string{
		{"--client", "sdk", "--conn-string", "Endpoint=sb://" + addr + ";SharedAccessKeyName=k;SharedAccessKey=k;UseDevelopmentEmulator=true",
			"--queue", "sdk", "--rate", "500"},
		{"--client", "amqp", "--url", "amqp://" + addr, "--queue", "amqp", "--in-flight", "8"},
	} {
		cfg, err := ParseArgs(append(args, "--size", "256", "--warmup", "200ms", "--duration", "800ms"), os.Stderr)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		res, err := Run(ctx, cfg, nil)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		if res.Failed() || res.Errors.Warmup > 0 || res.Sent == 0 || res.Received == 0 || res.Stale != 0 {
			t.Fatalf("%v: sent %d received %d stale %d errors %+v", args[:2], res.Sent, res.Received, res.Stale, res.Errors)
		}
	}
}
