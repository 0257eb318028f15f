package bench

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
)

// Result is what a run measured. It marshals to the --json output as is.
type Result struct {
	Client string `json:"client"`
	Mode   string `json:"mode"`
	// Queue is the queue, or the node address senders send to (--address);
	// empty for a topic.
	Queue     string  `json:"queue"`
	Topic     string  `json:"topic,omitempty"`
	Size      int     `json:"size"`
	Senders   int     `json:"senders"`
	Receivers int     `json:"receivers"`
	Batch     int     `json:"batch"`
	RecvBatch int     `json:"receive_batch"`
	InFlight  int     `json:"in_flight"`
	Rate      float64 `json:"rate"` // 0: unpaced

	WarmupSeconds   float64 `json:"warmup_seconds"`
	MeasuredSeconds float64 `json:"measured_seconds"`

	// Messages sent (acknowledged by the broker) and received (and
	// completed, in peek-lock mode) in the measured window, and their rates.
	// With a topic or receive addresses, Received counts every copy.
	Sent        int64   `json:"sent"`
	Received    int64   `json:"received"`
	SendRate    float64 `json:"send_per_second"`
	ReceiveRate float64 `json:"receive_per_second"`
	// Stale counts the received messages this run did not send: left in
	// the queue by an earlier run (a receive-only run drains those), or
	// sent by someone else. They count in Received but have no latency.
	Stale int64 `json:"stale"`
	// ReceivedBy splits Received by subscription, or by receive address:
	// Receivers receivers each. Nil for a queue.
	ReceivedBy []GroupResult `json:"received_by,omitempty"`

	// Latency is end to end, due-to-send to arrival; SendLatency is one
	// send call (a whole batch with --batch), start to acknowledgement.
	Latency     LatencyStats `json:"latency"`
	SendLatency LatencyStats `json:"send_latency"`

	// Broker is nil when the broker process could not be measured;
	// BrokerNote says why, or adds a caveat.
	Broker      *Usage `json:"broker,omitempty"`
	BrokerNote  string `json:"broker_note,omitempty"`
	ClientUsage *Usage `json:"client_usage,omitempty"`
	// Machine is the whole machine's load over the window (Linux only):
	// latency on a machine near its CPU limit is mostly waiting for a CPU.
	Machine *Machine `json:"machine,omitempty"`

	Errors Errors `json:"errors"`
}

// GroupResult is what one subscription's (or receive address's) receivers
// received in the measured window.
type GroupResult struct {
	Name        string       `json:"name"`
	Received    int64        `json:"received"`
	ReceiveRate float64      `json:"receive_per_second"`
	Latency     LatencyStats `json:"latency"`
}

// LatencyStats summarizes a histogram, in microseconds.
type LatencyStats struct {
	Count uint64  `json:"count"`
	P50   float64 `json:"p50_us"`
	P99   float64 `json:"p99_us"`
	P999  float64 `json:"p999_us"`
	Max   float64 `json:"max_us"`
	Mean  float64 `json:"mean_us"`
}

func summarize(h *histogram) LatencyStats {
	us := func(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
	return LatencyStats{Count: h.Count(), P50: us(h.Quantile(0.50)), P99: us(h.Quantile(0.99)),
		P999: us(h.Quantile(0.999)), Max: us(h.Max()), Mean: us(h.Mean())}
}

// Usage is a process's CPU and memory over the measured window.
type Usage struct {
	PID int `json:"pid"`
	// SameProcess says the broker runs inside the bench, so its figures
	// include the client's.
	SameProcess          bool    `json:"same_process,omitempty"`
	CPUSeconds           float64 `json:"cpu_seconds"`
	CPUPerSentMicros     float64 `json:"cpu_us_per_sent"`
	CPUPerReceivedMicros float64 `json:"cpu_us_per_received"`
	// PeakRSSBytes is the broker's highest sampled RSS in the window, or
	// the client's highest RSS in its life.
	PeakRSSBytes int64 `json:"peak_rss_bytes"`
	// Disk is the broker's writes to storage in the window; nil for the
	// client, and when /proc/PID/io could not be read.
	Disk *DiskWrites `json:"disk,omitempty"`
}

// DiskWrites is what a process sent to storage over the measured window:
// the change in write_bytes of /proc/PID/io. The kernel charges buffered
// writes a page at a time as they dirty the page cache, so this is pages
// written, not bytes appended, and the file system's journal is not in it.
type DiskWrites struct {
	WriteBytes int64 `json:"write_bytes"`
	// CancelledBytes is the part of WriteBytes never written after all:
	// pages of files deleted or truncated before writeback.
	CancelledBytes   int64   `json:"cancelled_write_bytes"`
	BytesPerSent     float64 `json:"bytes_per_sent"`
	BytesPerReceived float64 `json:"bytes_per_received"`
}

// Machine is how busy the machine's CPUs were over the measured window,
// in CPUs: 1.5 of 2 is 75% busy. It counts every process, this one and the
// broker included, and the kernel's work for them.
type Machine struct {
	CPUs     int     `json:"cpus"`
	BusyCPUs float64 `json:"busy_cpus"`
	// StolenCPUs is the part of BusyCPUs a hypervisor gave to other
	// guests: time this machine wanted a CPU and did not get one.
	StolenCPUs float64 `json:"stolen_cpus"`
}

// BusyPercent is BusyCPUs as a share of all CPUs.
func (m *Machine) BusyPercent() float64 { return 100 * m.BusyCPUs / float64(m.CPUs) }

// Errors counts failed operations. Warm-up errors are counted apart and
// tolerated up to a few.
type Errors struct {
	Send    int64    `json:"send"`
	Receive int64    `json:"receive"`
	Settle  int64    `json:"complete"`
	Warmup  int64    `json:"warmup"`
	First   []string `json:"first,omitempty"`
}

// Failed says the run had errors beyond the warm-up's tolerance, or its
// measured window saw no messages where it should have: a client that
// keeps retrying a broker that is gone may report no error at all.
func (r *Result) Failed() bool { return r.Problem() != "" }

// Problem says why the run failed, or "" if it did not.
func (r *Result) Problem() string {
	e := r.Errors
	switch {
	case e.Send+e.Receive+e.Settle > 0 || e.Warmup > warmupErrorTolerance:
		msg := fmt.Sprintf("errors: %d send, %d receive, %d complete, %d in the warm-up", e.Send, e.Receive, e.Settle, e.Warmup)
		if len(e.First) > 0 {
			msg += "; first: " + strings.Join(e.First, "; ")
		}
		return msg
	case r.MeasuredSeconds == 0:
		return ""
	case r.Senders > 0 && r.Sent == 0:
		return "no message was sent in the measured window"
	case r.Receivers > 0 && r.Received == 0:
		return "no message was received in the measured window"
	}
	if r.Receivers > 0 {
		for _, g := range r.ReceivedBy {
			if g.Received == 0 {
				return fmt.Sprintf("no message was received from %s in the measured window", g.Name)
			}
		}
	}
	return ""
}

// Behind says paced senders fell more than 5% short of --rate.
func (r *Result) Behind() bool {
	return r.Rate > 0 && r.MeasuredSeconds > 0 && r.SendRate < 0.95*r.Rate
}

// WriteText writes r as an aligned table.
func (r *Result) WriteText(w io.Writer) error {
	var b strings.Builder
	rate := "unpaced"
	if r.Rate > 0 {
		rate = fmt.Sprintf("%g/s", r.Rate)
	}
	receivers := fmt.Sprintf("%d receivers", r.Receivers)
	groupNames := make([]string, len(r.ReceivedBy))
	for i, g := range r.ReceivedBy {
		groupNames[i] = g.Name
	}
	switch {
	case r.Topic != "":
		fmt.Fprintf(&b, "walbus bench: client %s, %s, topic %s, subscriptions %s, %d-byte messages\n",
			r.Client, r.Mode, r.Topic, shortList(groupNames), r.Size)
		receivers += " per subscription"
	case r.ReceivedBy != nil:
		fmt.Fprintf(&b, "walbus bench: client %s, %s, sending to %s, receiving from %s, %d-byte messages\n",
			r.Client, r.Mode, r.Queue, shortList(groupNames), r.Size)
		receivers += " per address"
	default:
		fmt.Fprintf(&b, "walbus bench: client %s, %s, queue %s, %d-byte messages\n", r.Client, r.Mode, r.Queue, r.Size)
	}
	fmt.Fprintf(&b, "  %d senders, %s, batch %d (receive %d), in-flight %d, rate %s; measured %.2fs after %gs warm-up\n\n",
		r.Senders, receivers, r.Batch, r.RecvBatch, r.InFlight, rate, r.MeasuredSeconds, r.WarmupSeconds)

	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	received := "receive+complete"
	if r.Mode == ModeReceiveAndDelete {
		received = "receive (delete)"
	}
	fmt.Fprint(tw, "\tmsgs/s\tmessages\tp50\tp99\tp99.9\tmax\t\n")
	if r.Senders > 0 {
		fmt.Fprintf(tw, "send\t%.0f\t%d\t%s\t\n", r.SendRate, r.Sent, latencyCells(r.SendLatency))
	}
	if r.Receivers > 0 {
		fmt.Fprintf(tw, "%s\t%.0f\t%d\t%s\t\n", received, r.ReceiveRate, r.Received, latencyCells(r.Latency))
		if len(r.ReceivedBy) <= maxGroupRows {
			for _, g := range r.ReceivedBy {
				fmt.Fprintf(tw, "  %s\t%.0f\t%d\t%s\t\n", g.Name, g.ReceiveRate, g.Received, latencyCells(g.Latency))
			}
		}
	}
	tw.Flush()
	b.WriteString("  (send latency: one send call to its acknowledgement; receive latency: end to end)\n")
	if r.ReceivedBy != nil && r.Receivers > 0 {
		b.WriteString("  (received counts every copy")
		if r.Sent > 0 {
			fmt.Fprintf(&b, ": %.2f per message sent", float64(r.Received)/float64(r.Sent))
		}
		b.WriteString(")\n")
		if len(r.ReceivedBy) > maxGroupRows {
			lo, hi := r.ReceivedBy[0], r.ReceivedBy[0]
			for _, g := range r.ReceivedBy {
				if g.Received < lo.Received {
					lo = g
				}
				if g.Received > hi.Received {
					hi = g
				}
			}
			fmt.Fprintf(&b, "  (least received: %s, %.0f/s; most: %s, %.0f/s)\n", lo.Name, lo.ReceiveRate, hi.Name, hi.ReceiveRate)
		}
	}
	b.WriteString("\n")

	tw = tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprint(tw, "\tpid\tCPU s\tCPU µs/sent\tCPU µs/received\tpeak RSS\t\n")
	for _, row := range []struct {
		name string
		u    *Usage
	}{{"broker", r.Broker}, {"client", r.ClientUsage}} {
		if row.u == nil {
			fmt.Fprintf(tw, "%s\t-\t-\t-\t-\t-\t\n", row.name)
			continue
		}
		fmt.Fprintf(tw, "%s\t%d\t%.2f\t%s\t%s\t%s\t\n", row.name, row.u.PID, row.u.CPUSeconds,
			micros(row.u.CPUPerSentMicros), micros(row.u.CPUPerReceivedMicros), formatBytes(row.u.PeakRSSBytes))
	}
	tw.Flush()
	if u := r.Broker; u != nil && u.Disk != nil {
		copies := "message received"
		if r.ReceivedBy != nil {
			copies = "copy received"
		}
		fmt.Fprintf(&b, "  broker disk writes: %s", formatSize(float64(u.Disk.WriteBytes)))
		if u.Disk.BytesPerSent > 0 {
			fmt.Fprintf(&b, ", %s per message sent", formatSize(u.Disk.BytesPerSent))
		}
		if u.Disk.BytesPerReceived > 0 {
			fmt.Fprintf(&b, ", %s per %s", formatSize(u.Disk.BytesPerReceived), copies)
		}
		b.WriteString("\n")
	}
	if r.BrokerNote != "" {
		fmt.Fprintf(&b, "  broker: %s\n", r.BrokerNote)
	}
	if m := r.Machine; m != nil {
		fmt.Fprintf(&b, "  machine: %.2f of %d CPUs busy (%.0f%%), %.2f stolen by the hypervisor\n",
			m.BusyCPUs, m.CPUs, m.BusyPercent(), m.StolenCPUs)
	}
	if r.Behind() {
		fmt.Fprintf(&b, "\nThe senders managed %.0f of the %g messages/s asked for; latency counts from each\n"+
			"message's scheduled time, so it includes the backlog of sends that could not start on time.\n",
			r.SendRate, r.Rate)
	}

	e := r.Errors
	fmt.Fprintf(&b, "\nerrors: %d send, %d receive, %d complete; %d during warm-up", e.Send, e.Receive, e.Settle, e.Warmup)
	if r.Stale > 0 {
		fmt.Fprintf(&b, "\n%d of the messages received were not sent by this run (no latency for those)", r.Stale)
	}
	b.WriteString("\n")
	for _, msg := range e.First {
		fmt.Fprintf(&b, "  %s\n", msg)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// latencyCells are the p50, p99, p99.9 and max columns of a table row.
func latencyCells(l LatencyStats) string {
	if l.Count == 0 {
		return "-\t-\t-\t-"
	}
	return strings.Join([]string{formatMicros(l.P50), formatMicros(l.P99), formatMicros(l.P999), formatMicros(l.Max)}, "\t")
}

// formatMicros prints a latency with about three significant digits.
func formatMicros(us float64) string {
	v, unit := us, "µs"
	switch {
	case us >= 1e6:
		v, unit = us/1e6, "s"
	case us >= 1e3:
		v, unit = us/1e3, "ms"
	}
	switch {
	case v >= 100:
		return fmt.Sprintf("%.0f%s", v, unit)
	case v >= 10:
		return fmt.Sprintf("%.1f%s", v, unit)
	}
	return fmt.Sprintf("%.2f%s", v, unit)
}

func micros(us float64) string {
	if us == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f", us)
}

// maxGroupRows is the most subscriptions (or receive addresses) the text
// report lists one by one; past it, it names the least and most received.
const maxGroupRows = 10

// shortList joins names, or, when there are many, the first few and the
// last with their number.
func shortList(names []string) string {
	if len(names) <= 6 {
		return strings.Join(names, ", ")
	}
	return fmt.Sprintf("%s, ... %s (%d)", strings.Join(names[:3], ", "), names[len(names)-1], len(names))
}

// formatSize prints a byte count with a binary unit.
func formatSize(n float64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.2f GiB", n/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", n/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", n/(1<<10))
	}
	return fmt.Sprintf("%.0f B", n)
}

func formatBytes(n int64) string {
	if n == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
}
