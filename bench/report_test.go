package bench

import (
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"
)

// reportFixture is a made-up result of each kind, for the golden text.
func reportFixture(t *testing.T, name string) *Result {
	t.Helper()
	latency := LatencyStats{Count: 9000, P50: 1480, P99: 4850, P999: 8000, Max: 8470, Mean: 1700}
	broker := &Usage{PID: 4242, CPUSeconds: 2.5, CPUPerSentMicros: 250, CPUPerReceivedMicros: 125, PeakRSSBytes: 48 << 20}
	client := &Usage{PID: 4343, CPUSeconds: 1.2, CPUPerSentMicros: 120, CPUPerReceivedMicros: 60, PeakRSSBytes: 30 << 20}
	res := &Result{Client: ClientAMQP, Mode: ModePeekLock, Size: 1024, Senders: 2, Receivers: 2, Batch: 1, RecvBatch: 1,
		InFlight: 8, WarmupSeconds: 1, MeasuredSeconds: 10, Latency: latency, SendLatency: latency,
		Broker: broker, ClientUsage: client, Machine: &Machine{CPUs: 2, BusyCPUs: 1.5, StolenCPUs: 0.01}}
	groups := func(names ...string) {
		for i, n := range names {
			res.ReceivedBy = append(res.ReceivedBy, GroupResult{Name: n, Received: 10000 - int64(i), ReceiveRate: 1000 - 0.1*float64(i), Latency: latency})
		}
	}
	switch name {
	case "queue": // as before topics: no disk figures, no groups
		res.Queue, res.Sent, res.Received, res.SendRate, res.ReceiveRate = "q", 10000, 10000, 1000, 1000
	case "queue-disk":
		res.Queue, res.Sent, res.Received, res.SendRate, res.ReceiveRate = "q", 10000, 10000, 1000, 1000
		broker.Disk = &DiskWrites{WriteBytes: 80 << 20, BytesPerSent: 8388.608, BytesPerReceived: 8388.608}
	case "topic":
		res.Topic, res.Sent, res.Received, res.SendRate, res.ReceiveRate = "t", 10000, 19999, 1000, 1999.9
		groups("s1", "s2")
		broker.Disk = &DiskWrites{WriteBytes: 40 << 20, BytesPerSent: 4194.304, BytesPerReceived: 2097.25}
	case "fanout":
		res.Queue, res.Sent, res.Received, res.SendRate, res.ReceiveRate = "/exchange/bench-fan", 10000, 19999, 1000, 1999.9
		groups("/amq/queue/bench-fan-1", "/amq/queue/bench-fan-2")
		res.BrokerNote = "disk writes not measured: open /proc/4242/io: permission denied"
	case "many-subscriptions":
		res.Topic, res.Sent, res.SendRate = "t", 10000, 1000
		var names []string
		for i := range 12 {
			names = append(names, "s"+string(rune('a'+i)))
		}
		groups(names...)
		for _, g := range res.ReceivedBy {
			res.Received += g.Received
		}
		res.ReceiveRate = float64(res.Received) / res.MeasuredSeconds
	default:
		t.Fatalf("no fixture %q", name)
	}
	return res
}

// The text report of each kind of run. The queue case is the report as it
// was before topics, byte for byte: a queue run prints what it printed.
// Rewrite with: go test ./bench -run TestWriteText -rewrite
func TestWriteText(t *testing.T) {
	datadriven.RunTest(t, "testdata/report", func(t *testing.T, td *datadriven.TestData) string {
		if td.Cmd != "report" || len(td.CmdArgs) != 1 {
			t.Fatalf("%s: want report NAME", td.Pos)
		}
		var b strings.Builder
		if err := reportFixture(t, td.CmdArgs[0].Key).WriteText(&b); err != nil {
			t.Fatal(err)
		}
		return b.String()
	})
}

// A subscription (or receive address) whose receivers got nothing fails
// the run, even when the others received: its rules, or the broker's
// fan-out, dropped every copy.
func TestProblemNamesAnEmptyGroup(t *testing.T) {
	res := &Result{Senders: 1, Receivers: 1, MeasuredSeconds: 1, Sent: 10, Received: 10,
		ReceivedBy: []GroupResult{{Name: "s1", Received: 10}, {Name: "s2"}}}
	if p := res.Problem(); !strings.Contains(p, "from s2") {
		t.Fatalf("problem %q, want it to name s2", p)
	}
	res.ReceivedBy[1].Received = 1
	if p := res.Problem(); p != "" {
		t.Fatalf("problem %q for a run where every group received", p)
	}
	// A send-only topic run has groups that receive nothing, rightly.
	res = &Result{Senders: 1, Receivers: 0, MeasuredSeconds: 1, Sent: 10,
		ReceivedBy: []GroupResult{{Name: "s1"}, {Name: "s2"}}}
	if p := res.Problem(); p != "" {
		t.Fatalf("problem %q for a send-only run", p)
	}
}
