package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

const (
	// setupTimeout bounds connecting every sender and receiver.
	setupTimeout = 30 * time.Second
	// closeTimeout bounds closing the connections after the run.
	closeTimeout = 5 * time.Second
	// errorBackoff paces a sender or receiver that keeps failing, so a
	// broken broker costs errors, not a spinning CPU.
	errorBackoff = 10 * time.Millisecond
	// warmupErrorTolerance is how many failures the warm-up may have (a
	// link still attaching, a first token) before the run counts as failed.
	warmupErrorTolerance = 5
	// firstErrors is how many error messages the result keeps.
	firstErrors = 5
	// rssEvery is how often the broker's RSS is sampled for its peak.
	rssEvery = 250 * time.Millisecond
)

// Run connects the senders and receivers cfg asks for, runs them through
// the warm-up and the measured window, and reports. It returns an error
// only if it could not start; failures during the run are in the Result.
// Cancelling ctx ends the run early and reports the window so far.
// Progress, if not nil, gets a line a second.
func Run(ctx context.Context, cfg Config, progress io.Writer) (*Result, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	r := &runner{cfg: cfg, run: newRunID()}
	for _, source := range cfg.receiveSources() {
		r.groups = append(r.groups, &receiveGroup{source: source})
	}
	payload := make([]byte, cfg.Size)
	rand.Read(payload) // incompressible, as real payloads tend to be
	var d driver
	switch cfg.Client {
	case ClientSDK:
		d = newSDKDriver(cfg, r.run, payload)
	default:
		d = newAMQPDriver(cfg, r.run, payload)
	}
	defer func() {
		closeCtx, cancel := context.WithTimeout(context.Background(), closeTimeout)
		defer cancel()
		d.close(closeCtx)
	}()

	senders, receivers, err := connect(ctx, d, cfg, r.groups)
	if err != nil {
		return nil, err
	}
	broker := watchBroker(cfg)

	start := time.Now()
	r.windowStart = start.Add(cfg.Warmup)
	r.windowEnd.Store(r.windowStart.Add(cfg.Duration).UnixNano())
	work, stopWork := context.WithCancel(ctx)
	defer stopWork()
	var wg sync.WaitGroup
	r.sendLatency = make([]*histogram, 0, cfg.Senders*cfg.InFlight)
	for i, s := range senders {
		var p *pacer
		if cfg.Rate > 0 {
			p = newPacer(start, cfg.Rate, i, cfg.Senders)
		}
		for range cfg.InFlight {
			h := newHistogram()
			r.sendLatency = append(r.sendLatency, h)
			wg.Go(func() { r.sendLoop(work, s, p, h) })
		}
	}
	r.latency = make([]*histogram, len(receivers))
	for i, rc := range receivers {
		r.latency[i] = newHistogram()
		rc.group.latency = append(rc.group.latency, r.latency[i])
		wg.Go(func() { r.receiveLoop(work, rc.receiver, rc.group, r.latency[i]) })
	}
	if progress != nil {
		wg.Go(func() { r.report(work, progress, start) })
	}

	// The measured window: sample CPU and disk writes at both ends, and
	// RSS throughout.
	if !sleepUntil(ctx, r.windowStart) {
		r.windowEnd.Store(time.Now().UnixNano()) // cut short in the warm-up
	}
	broker.begin()
	client, clientErr := selfUsage()
	machine, machineErr := readMachineTimes()
	end := time.Unix(0, r.windowEnd.Load())
	if !sleepUntil(ctx, end) {
		end = time.Now()
		r.windowEnd.Store(end.UnixNano())
	}
	broker.end()
	clientEnd, clientEndErr := selfUsage()
	machineEnd, machineEndErr := readMachineTimes()
	stopWork()
	wg.Wait()

	res := r.result(end.Sub(r.windowStart))
	res.Broker, res.BrokerNote = broker.usage(res.Sent, res.Received)
	if clientErr == nil && clientEndErr == nil {
		res.ClientUsage = perMessage(clientEnd.CPU-client.CPU, clientEnd.RSS, res.Sent, res.Received)
		res.ClientUsage.PID = os.Getpid()
	}
	if machineErr == nil && machineEndErr == nil {
		res.Machine = machineLoad(machine, machineEnd)
	}
	return res, nil
}

// groupReceiver is one receiver and the group it receives for.
type groupReceiver struct {
	receiver msgReceiver
	group    *receiveGroup
}

// connect opens every sender and receiver, concurrently: sixty-four
// connections one after another would take a while. Each group gets
// cfg.Receivers receivers.
func connect(ctx context.Context, d driver, cfg Config, groups []*receiveGroup) ([]msgSender, []groupReceiver, error) {
	ctx, cancel := context.WithTimeout(ctx, setupTimeout)
	defer cancel()
	senders := make([]msgSender, cfg.Senders)
	receivers := make([]groupReceiver, cfg.Receivers*len(groups))
	errs := make(chan error, len(senders)+len(receivers))
	var wg sync.WaitGroup
	for i := range senders {
		wg.Go(func() {
			var err error
			if senders[i], err = d.newSender(ctx); err != nil {
				errs <- fmt.Errorf("sender %d: %w", i, err)
			}
		})
	}
	for i := range receivers {
		g := groups[i/cfg.Receivers]
		receivers[i].group = g
		wg.Go(func() {
			var err error
			if receivers[i].receiver, err = d.newReceiver(ctx, g.source); err != nil {
				if cfg.receiveGroups() != nil {
					err = fmt.Errorf("receiver %d on %s: %w", i%cfg.Receivers, g.source, err)
				} else {
					err = fmt.Errorf("receiver %d: %w", i, err)
				}
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return nil, nil, err
	}
	return senders, receivers, nil
}

// runner is one run's shared state. The window's start is fixed before
// any worker starts; its end moves earlier if the run is cut short.
type runner struct {
	cfg         Config
	run         string
	windowStart time.Time
	windowEnd   atomic.Int64 // unix ns

	seq atomic.Int64 // the last message number handed out

	// All time, for progress.
	sentAll, receivedAll, errorsAll atomic.Int64
	// In the measured window.
	sent, received, stale atomic.Int64
	// Where receivers receive from: one group for a queue, one for each
	// subscription or receive address. Fixed before any worker starts.
	groups []*receiveGroup

	// One histogram per goroutine that records, merged at the end.
	latency     []*histogram // end to end, per receiver
	sendLatency []*histogram // send call, per send goroutine

	mu     sync.Mutex
	errors Errors
}

// receiveGroup is one source's receivers and what they received in the
// window.
type receiveGroup struct {
	source   string
	received atomic.Int64
	latency  []*histogram // its receivers' histograms, among runner.latency
}

func newRunID() string {
	var b [8]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func (r *runner) inWindow(t time.Time) bool {
	return !t.Before(r.windowStart) && t.UnixNano() < r.windowEnd.Load()
}

// fail records a failed operation at time at.
func (r *runner) fail(op string, at time.Time, err error) {
	r.errorsAll.Add(1)
	r.mu.Lock()
	defer r.mu.Unlock()
	phase := ""
	switch {
	case at.Before(r.windowStart):
		r.errors.Warmup++
		phase = " (warm-up)"
	case op == "send":
		r.errors.Send++
	case op == "receive":
		r.errors.Receive++
	default:
		r.errors.Settle++
	}
	if len(r.errors.First) < firstErrors {
		r.errors.First = append(r.errors.First, fmt.Sprintf("%s%s: %v", op, phase, err))
	}
}

// failed handles an operation's error; it reports whether the loop should
// end. Errors after the run's context ends are the cancellation itself.
func (r *runner) failed(ctx context.Context, op string, err error) bool {
	if ctx.Err() != nil {
		return true
	}
	r.fail(op, time.Now(), err)
	if isFatal(err) {
		return true
	}
	return !sleepFor(ctx, errorBackoff)
}

func (r *runner) sendLoop(ctx context.Context, s msgSender, p *pacer, h *histogram) {
	n := r.cfg.Batch
	due := make([]time.Time, 0, n)
	stamps := make([]stamp, 0, n)
	for ctx.Err() == nil {
		stamps = stamps[:0]
		if p != nil {
			due = p.take(due[:0], n)
			if !sleepUntil(ctx, due[n-1]) {
				return
			}
			for _, t := range due {
				stamps = append(stamps, stamp{sent: t.UnixNano(), seq: r.seq.Add(1)})
			}
		} else {
			now := time.Now().UnixNano()
			first := r.seq.Add(int64(n)) - int64(n)
			for i := range n {
				stamps = append(stamps, stamp{sent: now, seq: first + int64(i) + 1})
			}
		}
		begin := time.Now()
		if begin.UnixNano() >= r.windowEnd.Load() {
			return // no sends start after the window, so none go uncounted
		}
		if err := s.send(ctx, stamps); err != nil {
			if r.failed(ctx, "send", err) {
				return
			}
			continue
		}
		end := time.Now()
		r.sentAll.Add(int64(n))
		if r.inWindow(end) {
			r.sent.Add(int64(n))
			if !begin.Before(r.windowStart) {
				h.Record(end.Sub(begin))
			}
		}
	}
}

// receiveLoop receives and hands each message to one of --in-flight
// settling goroutines, so that many completions are outstanding at once.
// Latency is taken on arrival, before settling, for every message of this
// run that arrives in the window, whenever it was sent: a backlog built
// up in the warm-up is latency the window really sees, and counting only
// messages sent in the window would keep just the ones that overtook it.
func (r *runner) receiveLoop(ctx context.Context, rc msgReceiver, g *receiveGroup, h *histogram) {
	settle := make(chan delivery)
	var settlers sync.WaitGroup
	for range r.cfg.InFlight {
		settlers.Go(func() {
			for dl := range settle {
				if err := dl.settle(ctx); err != nil {
					// Keep draining even after a fatal error: the
					// receive loop sees it too, stops, and closes settle.
					r.failed(ctx, "complete", err)
					continue
				}
				r.delivered(dl, g, time.Now())
			}
		})
	}
	defer func() {
		close(settle)
		settlers.Wait()
	}()
	var batch []delivery
	for ctx.Err() == nil {
		var err error
		batch, err = rc.receive(ctx, batch[:0])
		now := time.Now()
		for _, dl := range batch {
			if dl.ours && r.inWindow(now) {
				h.Record(now.Sub(time.Unix(0, dl.sent)))
			}
			if dl.settle == nil {
				r.delivered(dl, g, now)
				continue
			}
			select {
			case settle <- dl:
			case <-ctx.Done():
				return
			}
		}
		if err != nil && r.failed(ctx, "receive", err) {
			return
		}
	}
}

// delivered counts a message received (and settled, in peek-lock mode)
// by one of g's receivers.
func (r *runner) delivered(dl delivery, g *receiveGroup, at time.Time) {
	r.receivedAll.Add(1)
	if !r.inWindow(at) {
		return
	}
	r.received.Add(1)
	g.received.Add(1)
	if !dl.ours {
		r.stale.Add(1)
	}
}

// report writes a progress line a second until ctx ends.
func (r *runner) report(ctx context.Context, w io.Writer, start time.Time) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	var sent, received int64
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-tick.C:
			phase := "measuring"
			if now.Add(-time.Second).Before(r.windowStart) { // the second just past
				phase = "warm-up"
			}
			s, rc := r.sentAll.Load(), r.receivedAll.Load()
			fmt.Fprintf(w, "%5.0fs %-9s  sent %8d/s  received %8d/s  errors %d\n",
				now.Sub(start).Seconds(), phase, s-sent, rc-received, r.errorsAll.Load())
			sent, received = s, rc
		}
	}
}

// result summarizes the run once every worker has stopped.
func (r *runner) result(measured time.Duration) *Result {
	latency, sendLatency := newHistogram(), newHistogram()
	for _, h := range r.latency {
		latency.Merge(h)
	}
	for _, h := range r.sendLatency {
		sendLatency.Merge(h)
	}
	c := r.cfg
	res := &Result{
		Client: c.Client, Mode: c.Mode, Queue: c.address(), Size: c.Size,
		Senders: c.Senders, Receivers: c.Receivers, Batch: c.Batch, RecvBatch: c.receiveBatch(), InFlight: c.InFlight, Rate: c.Rate,
		WarmupSeconds:   c.Warmup.Seconds(),
		MeasuredSeconds: max(measured, 0).Seconds(),
		Sent:            r.sent.Load(),
		Received:        r.received.Load(),
		Stale:           r.stale.Load(),
		Latency:         summarize(latency),
		SendLatency:     summarize(sendLatency),
		Errors:          r.errors,
	}
	if res.MeasuredSeconds > 0 {
		res.SendRate = float64(res.Sent) / res.MeasuredSeconds
		res.ReceiveRate = float64(res.Received) / res.MeasuredSeconds
	}
	if names := c.receiveGroups(); names != nil {
		// A topic's run, or a fan-out's: how the copies spread.
		if c.Topic != "" {
			res.Queue, res.Topic = "", c.Topic
		}
		for i, g := range r.groups {
			h := newHistogram()
			for _, rh := range g.latency {
				h.Merge(rh)
			}
			n := g.received.Load()
			gr := GroupResult{Name: names[i], Received: n, Latency: summarize(h)}
			if res.MeasuredSeconds > 0 {
				gr.ReceiveRate = float64(n) / res.MeasuredSeconds
			}
			res.ReceivedBy = append(res.ReceivedBy, gr)
		}
	}
	return res
}

// sleepUntil waits for t; false if ctx ended first.
func sleepUntil(ctx context.Context, t time.Time) bool {
	return sleepFor(ctx, time.Until(t))
}

func sleepFor(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// brokerWatch measures the broker process over the window, if it can.
type brokerWatch struct {
	pid         int
	note        string // why it is not measured, or a caveat
	start, last procUsage
	peakRSS     atomic.Int64
	stop        chan struct{}
	done        sync.WaitGroup
	err         error
	// Disk writes, apart: /proc/PID/io may be unreadable (another user's
	// process) where stat and status are not.
	ioStart, ioLast procIO
	ioErr           error
}

// watchBroker picks the broker process: --broker-pid, or the listener on
// the target port if the target is this host.
func watchBroker(cfg Config) *brokerWatch {
	w := &brokerWatch{pid: cfg.BrokerPID}
	if w.pid == 0 {
		t := cfg.target()
		switch {
		case runtime.GOOS != "linux":
			w.note = "not measured: finding the broker needs Linux's /proc; give --broker-pid"
		case !isLocalHost(t.host):
			w.note = fmt.Sprintf("not measured: %s is not this host", t.host)
		default:
			pid, err := findListenerPID(t.port)
			if err != nil {
				w.note = "not measured: " + err.Error() + "; give --broker-pid"
			}
			w.pid = pid
		}
	}
	if w.pid == os.Getpid() {
		w.note = "the broker runs in this process: its CPU and RSS include the client's"
	}
	return w
}

func (w *brokerWatch) begin() {
	if w.pid == 0 {
		return
	}
	if w.start, w.err = readProcUsage(w.pid); w.err != nil {
		return
	}
	w.ioStart, w.ioErr = readProcIO(w.pid)
	w.peakRSS.Store(w.start.RSS)
	w.stop = make(chan struct{})
	w.done.Go(func() {
		tick := time.NewTicker(rssEvery)
		defer tick.Stop()
		for {
			select {
			case <-w.stop:
				return
			case <-tick.C:
				if u, err := readProcUsage(w.pid); err == nil && u.RSS > w.peakRSS.Load() {
					w.peakRSS.Store(u.RSS)
				}
			}
		}
	})
}

func (w *brokerWatch) end() {
	if w.stop == nil {
		return
	}
	close(w.stop)
	w.done.Wait()
	w.last, w.err = readProcUsage(w.pid)
	if w.ioErr == nil {
		w.ioLast, w.ioErr = readProcIO(w.pid)
	}
}

// usage is the broker's share, or why there is none.
func (w *brokerWatch) usage(sent, received int64) (*Usage, string) {
	if w.pid == 0 {
		return nil, w.note
	}
	if w.err != nil {
		return nil, fmt.Sprintf("not measured: pid %d: %v", w.pid, w.err)
	}
	u := perMessage(w.last.CPU-w.start.CPU, max(w.peakRSS.Load(), w.last.RSS), sent, received)
	u.PID = w.pid
	u.SameProcess = w.pid == os.Getpid()
	var notes []string
	if w.note != "" {
		notes = append(notes, w.note)
	}
	if w.ioErr != nil {
		notes = append(notes, "disk writes not measured: "+w.ioErr.Error())
	} else {
		u.Disk = diskPerMessage(w.ioStart, w.ioLast, sent, received)
		if sent > 0 && u.Disk.WriteBytes == 0 {
			notes = append(notes, "it wrote nothing to storage in the window (messages in memory only, or on tmpfs?)")
		}
	}
	return u, strings.Join(notes, "; ")
}

// diskPerMessage divides the storage writes between two samples over the
// messages sent and received.
func diskPerMessage(from, to procIO, sent, received int64) *DiskWrites {
	d := &DiskWrites{WriteBytes: to.WriteBytes - from.WriteBytes,
		CancelledBytes: to.CancelledWriteBytes - from.CancelledWriteBytes}
	if sent > 0 {
		d.BytesPerSent = float64(d.WriteBytes) / float64(sent)
	}
	if received > 0 {
		d.BytesPerReceived = float64(d.WriteBytes) / float64(received)
	}
	return d
}

// perMessage divides cpu over the messages sent and received.
func perMessage(cpu time.Duration, rss, sent, received int64) *Usage {
	u := &Usage{CPUSeconds: cpu.Seconds(), PeakRSSBytes: rss}
	if sent > 0 {
		u.CPUPerSentMicros = float64(cpu.Microseconds()) / float64(sent)
	}
	if received > 0 {
		u.CPUPerReceivedMicros = float64(cpu.Microseconds()) / float64(received)
	}
	return u
}
