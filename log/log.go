// Package log is walbus's durable event log: a segmented write-ahead log
// on github.com/tidwall/wal that stores the records of package event, with
// group commit, tail repair, positional reads and archives.
//
// Every entity (queue or topic) has one log; entity definitions live in a
// namespace log of their own. Which goroutine runs Append's callback, and
// what it may do, is in docs/architecture.md#threading-contract.
package log

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tidwall/wal"

	"github.com/walbus/walbus/log/event"
)

// SyncPolicy says when appended records count as durable.
type SyncPolicy uint8

const (
	// SyncAlways fsyncs every group commit before acknowledging it. Default.
	SyncAlways SyncPolicy = iota
	// SyncInterval fsyncs at most once per Options.SyncInterval; a record is
	// acknowledged after the fsync that covers it.
	SyncInterval
	// SyncNone never fsyncs (except at Close): acknowledged records can be
	// lost by a machine crash. For benchmarks only.
	SyncNone
)

func (p SyncPolicy) String() string {
	switch p {
	case SyncAlways:
		return "always"
	case SyncInterval:
		return "interval"
	case SyncNone:
		return "none"
	}
	return fmt.Sprintf("sync(%d)", uint8(p))
}

// ParseSyncPolicy parses "always", "interval" or "none".
func ParseSyncPolicy(s string) (SyncPolicy, error) {
	for _, p := range []SyncPolicy{SyncAlways, SyncInterval, SyncNone} {
		if p.String() == s {
			return p, nil
		}
	}
	return 0, fmt.Errorf("unknown sync policy %q (want always, interval or none)", s)
}

// Options configure a Log. The zero value is usable.
type Options struct {
	Sync SyncPolicy
	// SyncInterval is the longest wait for an fsync with SyncInterval, and
	// with SyncAlways for records appended with AppendLazy. Default 10ms.
	SyncInterval time.Duration
	// SegmentSize is the size at which a segment file is closed and the next
	// begins. tidwall keeps the tail segment in memory, so this is also the
	// log's write-buffer footprint. Default 1 MiB: tidwall grows that buffer
	// by reallocation on the writer's goroutine, and the step that copies a
	// segment of several MiB into fresh memory (faulting it in, and waiting
	// out the collector's mark phase as an assist when one is under way)
	// stalls a commit for milliseconds; at 1 MiB the steps stay small. The
	// price is more segment changes, each with two more fsyncs (the closed
	// segment's and the directory's): about a tenth of the throughput of
	// large batched sends, against 4 MiB.
	SegmentSize int
	// MaxPendingBytes bounds encoded records waiting for the writer; Append
	// blocks beyond it. Default 64 MiB.
	MaxPendingBytes int
	// IdleRoll is how long the log goes without a write before a tail
	// segment of IdleRollBytes or more is closed and an empty one begun:
	// tidwall keeps the whole tail in memory, and an idle log (a drained
	// queue, say) should not. Default 2s.
	IdleRoll time.Duration
	// IdleRollBytes is the smallest tail worth a segment of its own when
	// the log goes idle, or is opened. Default 256 KiB.
	IdleRollBytes int
	// Repair cuts the log at damage found in its last segment instead of
	// refusing to open it. Damage in older segments is found by Scan and is
	// cut with TruncateBack.
	Repair bool
	// OnCommit, if set, is called on the writer goroutine after every group
	// commit, and after an fsync outside one (Records 0: the SyncInterval
	// timer's, or Close's), so a watcher learns when DurableIndex moves. It
	// must not block.
	OnCommit func(CommitStats)
	// OnFail, if set, is called once, when a write, fsync or segment
	// change fails and the log takes its sticky error (Err), whichever
	// goroutine found it: an owner that applied records ahead of their
	// durability must learn that they may be lost even when it writes
	// nothing more. It must not block or call the log.
	OnFail func(error)
	// Fault, if set, is asked before every write ("write") and fsync
	// ("sync"), before the directory fsync a new segment needs
	// ("segment-dir"), before an idle roll creates its segment ("roll") and
	// makes its name durable ("roll-dir"), and before a sleeping log opens
	// tidwall again ("wake"); an error it returns is treated as that
	// operation failing.
	// It is the fault-injection layer for tests (a full disk, a failing
	// device); production leaves it nil.
	Fault func(op string) error
	// Bracket, if set, is opened on the writer goroutine before the
	// callbacks of a group commit (or of an fsync outside one) run, once
	// the fsync is done, and closed after them and OnCommit: whoever the
	// callbacks hand output to can hold it until the end of the run.
	Bracket Bracket
}

// Bracket marks the start and end of a run of callbacks.
type Bracket interface {
	Open()
	Close()
}

// CommitStats describes one group commit.
type CommitStats struct {
	Records int
	Bytes   int
	Write   time.Duration
	Sync    time.Duration // zero when this commit did not fsync
	Synced  bool
}

// DefaultSegmentSize is Options.SegmentSize when it is not set.
const DefaultSegmentSize = 1 << 20

func (o Options) withDefaults() Options {
	if o.SyncInterval <= 0 {
		o.SyncInterval = 10 * time.Millisecond
	}
	if o.SegmentSize <= 0 {
		o.SegmentSize = DefaultSegmentSize
	}
	if o.MaxPendingBytes <= 0 {
		o.MaxPendingBytes = 64 << 20
	}
	if o.IdleRoll <= 0 {
		o.IdleRoll = 2 * time.Second
	}
	if o.IdleRollBytes <= 0 {
		o.IdleRollBytes = 256 << 10
	}
	return o
}

// lazyBatchBytes is how much lazy data may wait for a carrier before the
// writer takes it anyway.
const lazyBatchBytes = 256 << 10

// ErrClosed is returned by operations on a closed Log.
var ErrClosed = errors.New("log closed")

// ErrFailed matches the sticky error of a log whose write or fsync failed.
// The log refuses all later writes; recovery is Close, Open (which repairs
// the tail) and replay.
var ErrFailed = errors.New("log failed")

type failedError struct{ err error }

func (e *failedError) Error() string        { return "log failed: " + e.err.Error() }
func (e *failedError) Unwrap() error        { return e.err }
func (e *failedError) Is(target error) bool { return target == ErrFailed }

// OpenReport says what Open found.
type OpenReport struct {
	FirstIndex, LastIndex uint64
	Segments              int
	Repair                TailRepair
}

// Log is one segmented write-ahead log. Append is safe for concurrent use;
// one writer goroutine commits queued records in groups.
type Log struct {
	dir  string
	opts Options
	segs *segmentSet

	// wal is replaced when the writer rolls an idle tail (reopening
	// tidwall is the only way to make it let go of the tail's buffer), and
	// is nil while the log sleeps (see sleep). The writer goroutine uses it
	// freely once awake; TruncateFront and TruncateBack, which run on
	// others, hold walMu, and whoever replaces it holds walMu too (the
	// roll and sleep hold mu as well).
	wal       *wal.Log
	walMu     sync.Mutex
	lastWrite time.Time // writer goroutine only: when it last wrote records
	// newSegment (writer goroutine only): a segment file began since the
	// last fsync, so the next fsync makes the directory durable too.
	newSegment bool

	mu        sync.Mutex
	space     *sync.Cond // signalled when the writer takes the pending batch
	next      uint64     // index the next appended record gets
	tailFirst uint64     // mirror of tidwall's tail segment: its first index
	tailSize  int64      // and its size in bytes
	cycleNext bool       // tidwall will start a new segment before the next record
	pend      *batch
	err       error // sticky
	closed    bool

	// running (under mu): a writer goroutine is there. An asleep log has
	// none; the next append starts one.
	running bool
	writer  sync.WaitGroup
	wake    chan struct{}

	first   atomic.Uint64
	written atomic.Uint64 // last index handed to the segment files
	durable atomic.Uint64 // last index durable under the sync policy
	bytes   atomic.Int64  // bytes in segment files
}

func (l *Log) fault(op string) error {
	if l.opts.Fault == nil {
		return nil
	}
	return l.opts.Fault(op)
}

type batch struct {
	buf     []byte // encoded records back to back
	sizes   []int
	first   uint64
	last    uint64
	cycled  bool // a new segment file begins inside this batch
	filled  bool // a record in it fills the tail, which tidwall closes after writing it
	urgent  bool // something in it was appended with Append, not AppendLazy
	waiters []waiter
}

type waiter struct {
	last uint64
	done func(error)
}

// keepBatchBytes is the largest record buffer a batch keeps for the next
// one: a batch that carried large messages gives its buffer back to the
// collector instead of holding it for the life of the log.
const keepBatchBytes = 4 << 20

func (b *batch) reset() {
	if cap(b.buf) > keepBatchBytes {
		b.buf = nil
	}
	// The done callbacks hold whatever their callers captured (a whole
	// connection, say): clear them, not just the length.
	clear(b.waiters)
	b.buf, b.sizes, b.waiters = b.buf[:0], b.sizes[:0], b.waiters[:0]
	b.first, b.last, b.cycled, b.filled, b.urgent = 0, 0, false, false, false
}

// empty reports whether b holds neither records nor waiters.
func (b *batch) empty() bool { return len(b.sizes) == 0 && len(b.waiters) == 0 }

// release empties b and lets its buffers go.
func (b *batch) release() {
	b.reset()
	b.buf, b.sizes, b.waiters = nil, nil, nil
}

// releaseHeld empties held, dropping its callbacks.
func releaseHeld(held []waiter) []waiter {
	clear(held)
	return held[:0]
}

// Open opens (creating if needed) the log in dir, repairing a torn tail.
//
// A log whose tail needed no repair opens asleep (see sleep): it has read
// its directory once and its tail segment once, and holds no file until
// the first write or read. A namespace of thousands of entities then starts
// without a descriptor for each.
func Open(dir string, opts Options) (*Log, OpenReport, error) {
	opts = opts.withDefaults()
	var rep OpenReport
	if err := MkdirAllDurable(dir, 0o750); err != nil {
		return nil, rep, err
	}
	segs, interrupted, err := readSegments(dir)
	if err != nil {
		return nil, rep, err
	}
	if interrupted {
		// tidwall's Open finishes a truncation a crash cut short, and does so
		// before it reads the tail, so it works even if the tail is torn.
		if w, err := wal.Open(dir, tidwallOptions(opts)); err == nil {
			w.Close()
		}
		if segs, err = listSegments(dir); err != nil {
			return nil, rep, err
		}
	}
	var tail tailInfo
	rep.Repair, segs, tail, err = repairTail(dir, segs, opts.Repair)
	if err != nil {
		return nil, rep, fmt.Errorf("open log %s: %w", dir, err)
	}
	var w *wal.Log
	var first, last uint64
	if tail.known {
		// What tidwall would find: its first segment's name is the first
		// index, and the tail's records follow its own.
		first, last = segs[0], segs[len(segs)-1]+uint64(tail.records)-1
	} else {
		// A new log, or one repaired: tidwall creates or reads it now.
		if w, err = wal.Open(dir, tidwallOptions(opts)); err != nil {
			return nil, rep, fmt.Errorf("open log %s: %w", dir, err)
		}
		if len(segs) == 0 {
			// tidwall has just created the first segment; its name must be
			// durable before anything in it is acknowledged.
			if err := SyncDir(dir); err != nil {
				w.Close()
				return nil, rep, fmt.Errorf("open log %s: %w", dir, err)
			}
		}
		first, _ = w.FirstIndex()
		last, _ = w.LastIndex()
		if segs, err = listSegments(dir); err != nil {
			w.Close()
			return nil, rep, err
		}
	}
	var total int64
	for i, s := range segs {
		if i == len(segs)-1 && tail.known {
			total += tail.size
			break
		}
		fi, err := os.Stat(segmentPath(dir, s))
		if err != nil {
			if w != nil {
				w.Close()
			}
			return nil, rep, err
		}
		total += fi.Size()
		if i == len(segs)-1 {
			tail.size = fi.Size()
		}
	}
	l := &Log{
		dir:       dir,
		opts:      opts,
		wal:       w,
		segs:      newSegmentSet(dir, segs),
		next:      last + 1,
		tailFirst: segs[len(segs)-1],
		tailSize:  tail.size,
		cycleNext: tail.size > int64(opts.SegmentSize),
		pend:      &batch{},
		wake:      make(chan struct{}, 1),
	}
	l.space = sync.NewCond(&l.mu)
	l.segs.idle = opts.IdleRoll // readers' handles sleep as the writer does
	// A large tail begins the next segment at once: tidwall, when it opens,
	// reads its tail whole and keeps it, and a log that has just opened has
	// no use for it in memory.
	if w != nil && tail.size >= int64(opts.IdleRollBytes) {
		if err := l.beginSegment(last + 1); err != nil {
			l.wal.Close()
			return nil, rep, fmt.Errorf("open log %s: %w", dir, err)
		}
	} else if w == nil && tail.size >= int64(opts.IdleRollBytes) {
		ok, err := l.createSegment(last + 1)
		if err != nil {
			return nil, rep, fmt.Errorf("open log %s: %w", dir, err)
		}
		if ok {
			l.segs.add(last + 1)
			l.tailFirst, l.tailSize, l.cycleNext = last+1, 0, false
		}
	}
	l.first.Store(first)
	l.written.Store(last)
	l.durable.Store(last)
	l.bytes.Store(total)
	rep.FirstIndex, rep.LastIndex, rep.Segments = first, last, len(segs)
	if l.wal != nil {
		// Awake: the writer puts it to sleep once it has been idle.
		l.mu.Lock()
		l.startWriter()
		l.mu.Unlock()
	}
	return l, rep, nil
}

func tidwallOptions(o Options) *wal.Options {
	return &wal.Options{
		NoSync:           true, // we fsync per policy, once per group
		SegmentSize:      o.SegmentSize,
		SegmentCacheSize: 1,
		AllowEmpty:       true,
	}
}

// Dir is the directory of the log.
func (l *Log) Dir() string { return l.dir }

// FirstIndex is the index of the oldest record still in the log (LastIndex+1
// when it is empty).
func (l *Log) FirstIndex() uint64 { return l.first.Load() }

// LastIndex is the index of the newest appended record.
func (l *Log) LastIndex() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.next - 1
}

// DurableIndex is the newest index that is durable under the sync policy.
func (l *Log) DurableIndex() uint64 { return l.durable.Load() }

// Bytes is the size of the log's segment files.
func (l *Log) Bytes() int64 { return l.bytes.Load() }

// Err returns the sticky error of a failed log, or nil.
func (l *Log) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

// Append assigns the next indexes to evs, setting their Index, Flags and Pos,
// and queues them for the next group commit. It returns the first index.
// All of evs form one atomic group: after a crash either all are in the log
// or none is. done, if not nil, is called once on the writer goroutine when
// every record of evs is durable under the sync policy, or with the error
// that stopped the log; it must not block or call back into the Log. An
// empty evs makes done a barrier for everything appended before.
func (l *Log) Append(evs []event.Event, done func(error)) (uint64, error) {
	return l.append(evs, done, true)
}

// AppendLazy appends records whose durability nobody waits for: a lock on
// a message that is already durable, say, whose loss in a crash means only
// a redelivery. With SyncAlways they wait in the queue for the next
// ordinary group commit, which writes and fsyncs them with its own
// records, or for SyncInterval, whichever is first: a burst of deliveries
// then costs no write or fsync of its own. They are still an atomic group,
// durable before anything appended after them, and readable (ReadAt) only
// once written: callers keep what they may read back until DurableIndex
// passes it.
func (l *Log) AppendLazy(evs []event.Event) (uint64, error) {
	return l.append(evs, nil, false)
}

func (l *Log) append(evs []event.Event, done func(error), urgent bool) (uint64, error) {
	l.mu.Lock()
	for l.err == nil && !l.closed && len(l.pend.buf) > l.opts.MaxPendingBytes {
		l.space.Wait()
	}
	if err := l.err; err != nil {
		l.mu.Unlock()
		return 0, err
	}
	if l.closed {
		l.mu.Unlock()
		return 0, ErrClosed
	}
	p := l.pend
	first := l.next
	if len(p.sizes) == 0 {
		p.first = first
	}
	for i := range evs {
		e := &evs[i]
		e.Index = l.next
		e.Flags &^= event.FlagContinued
		if i < len(evs)-1 {
			e.Flags |= event.FlagContinued
		}
		start := len(p.buf)
		p.buf = event.AppendRecord(p.buf, e)
		size := len(p.buf) - start
		p.sizes = append(p.sizes, size)
		e.Pos = l.place(p, e.Index, size)
		p.last = e.Index
		l.next++
	}
	if done != nil {
		p.waiters = append(p.waiters, waiter{last: l.next - 1, done: done})
	}
	if !l.running {
		l.startWriter()
	}
	// Lazy records alone do not need the writer until its timer, unless
	// they are the first (it arms the timer) or fill a batch.
	wake := urgent || done != nil || len(p.sizes) == len(evs) || len(p.buf) >= lazyBatchBytes
	p.urgent = p.urgent || urgent
	l.mu.Unlock()
	if wake {
		select {
		case l.wake <- struct{}{}:
		default:
		}
	}
	return first, nil
}

// place computes where tidwall will put the next entry, mirroring its rule:
// after an entry brings the tail segment to SegmentSize or more, the next
// entry starts a new segment (and a tail found oversize at open is closed
// before the first write).
func (l *Log) place(p *batch, index uint64, size int) event.Position {
	if l.cycleNext {
		l.tailFirst, l.tailSize, l.cycleNext = index, 0, false
		l.segs.add(index)
		p.cycled = true
	}
	prefix := event.UvarintLen(uint64(size))
	pos := event.Position{Offset: uint32(l.tailSize) + uint32(prefix), Size: uint32(size)}
	l.tailSize += int64(prefix + size)
	if l.tailSize >= int64(l.opts.SegmentSize) {
		l.cycleNext, p.filled = true, true
	}
	return pos
}

// startWriter starts the writer goroutine. Callers hold mu.
func (l *Log) startWriter() {
	l.running = true
	l.writer.Add(1)
	go l.run()
}

// run is the writer: it takes everything queued, writes it as one tidwall
// batch, fsyncs per policy and then releases the waiters. It returns when
// the log closes or fails, or once it has put the log to sleep.
func (l *Log) run() {
	defer l.writer.Done()
	var (
		wb       wal.Batch
		spare    = &batch{}
		held     []waiter // written, waiting for an fsync (SyncInterval)
		lastSync = time.Now()
		timer    = time.NewTimer(time.Hour)
		armed    bool
		// idle runs out IdleRoll after the last write, at most once per
		// IdleRoll while writes go on.
		idle = time.NewTimer(time.Hour)
	)
	timer.Stop()
	// A log opened and never written sleeps too.
	idleArmed := true
	idle.Reset(l.opts.IdleRoll)
	defer idle.Stop()
	lazyDue := false // the timer ran out on lazy records
	for {
		l.mu.Lock()
		p, closing, failed := l.pend, l.closed, l.err != nil
		pending := !p.empty()
		// With SyncAlways, lazy records alone stay queued until an
		// ordinary append carries them, the timer runs out, or they fill a
		// batch: then they cost neither a write nor an fsync of their own.
		lazyOnly := pending && l.opts.Sync == SyncAlways && !p.urgent && len(p.waiters) == 0 &&
			!closing && !failed && !lazyDue && len(p.buf) < lazyBatchBytes
		if pending && !lazyOnly {
			l.pend, spare = spare, nil
			l.space.Broadcast()
		} else {
			p = nil
		}
		l.mu.Unlock()

		if failed && len(held) > 0 {
			// The log failed elsewhere (TruncateFront, a segment change):
			// what waits for an fsync will never have one.
			l.release(held, l.Err())
			held = releaseHeld(held)
		}
		if p == nil {
			if closing || failed {
				if !failed {
					l.syncAndRelease(&held, &lastSync)
				}
				return
			}
			if lazyOnly && !armed {
				timer.Reset(l.opts.SyncInterval)
				armed = true
			}
			select {
			case <-l.wake:
			case <-timer.C:
				armed = false
				lazyDue = l.opts.Sync == SyncAlways
				l.syncAndRelease(&held, &lastSync)
			case <-idle.C:
				idleArmed = false
				if wait := l.opts.IdleRoll - time.Since(l.lastWrite); wait > 0 {
					idle.Reset(wait)
					idleArmed = true
				} else {
					// Idle: let go of what was sized for the last burst.
					wb = wal.Batch{}
					spare.release()
					if l.rollIdle() {
						idle.Reset(l.opts.IdleRoll)
						idleArmed = true
					} else if retry, slept := l.sleep(); retry {
						idle.Reset(l.opts.IdleRoll)
						idleArmed = true
					} else if slept {
						return
					}
				}
			}
			continue
		}
		lazyDue = false
		if armed && l.opts.Sync == SyncAlways {
			// This batch carries whatever lazy records were waiting.
			timer.Stop()
			armed = false
		}
		if failed {
			l.release(p.waiters, l.Err())
			p.reset()
			spare = p
			continue
		}
		stats, err := l.write(&wb, p)
		if err != nil {
			l.fail(err)
			l.release(held, l.Err())
			l.release(p.waiters, l.Err())
			held = releaseHeld(held)
			p.reset()
			spare = p
			continue
		}
		if len(p.sizes) > 0 && !idleArmed {
			idle.Reset(l.opts.IdleRoll)
			idleArmed = true
		}
		held = append(held, p.waiters...)
		switch {
		case l.opts.Sync == SyncAlways || closing:
			stats.Sync, err = l.sync()
			stats.Synced = true
		case l.opts.Sync == SyncInterval && time.Since(lastSync) < l.opts.SyncInterval:
			if !armed {
				timer.Reset(l.opts.SyncInterval - time.Since(lastSync))
				armed = true
			}
		case l.opts.Sync == SyncInterval:
			stats.Sync, err = l.sync()
			stats.Synced = true
		default: // SyncNone: written counts as durable
			l.durable.Store(l.written.Load())
		}
		if stats.Synced {
			lastSync = time.Now()
		}
		l.openBracket()
		if err != nil {
			l.fail(err)
			l.release(held, l.Err())
			held = releaseHeld(held)
		} else if stats.Synced || l.opts.Sync == SyncNone {
			l.release(held, nil)
			held = releaseHeld(held)
		}
		if l.opts.OnCommit != nil {
			l.opts.OnCommit(stats)
		}
		l.closeBracket()
		p.reset()
		spare = p
	}
}

// write hands one batch to tidwall (which writes but does not fsync it) and
// makes a new segment's directory entry durable.
func (l *Log) write(wb *wal.Batch, p *batch) (CommitStats, error) {
	stats := CommitStats{Records: len(p.sizes), Bytes: len(p.buf)}
	if len(p.sizes) == 0 {
		return stats, nil
	}
	start := time.Now()
	l.lastWrite = start
	if err := l.wakeUp(); err != nil {
		return stats, err
	}
	off := 0
	for i, size := range p.sizes {
		wb.Write(p.first+uint64(i), p.buf[off:off+size])
		off += size
	}
	err := l.fault("write")
	if err == nil {
		err = l.wal.WriteBatch(wb)
	}
	wb.Clear()
	if len(p.buf) > keepBatchBytes {
		*wb = wal.Batch{} // the batch copied the records: let a large copy go
	}
	if err != nil {
		return stats, fmt.Errorf("write indexes %d-%d: %w", p.first, p.last, err)
	}
	var prefixes int
	for _, size := range p.sizes {
		prefixes += event.UvarintLen(uint64(size))
	}
	l.bytes.Add(int64(len(p.buf) + prefixes))
	if p.cycled {
		// tidwall fsyncs the segment it closes but not the directory that
		// gained a file: the next fsync does (nothing is acknowledged from
		// the new file before it), so a policy that fsyncs less often
		// also syncs the directory less often.
		l.newSegment = true
	}
	if p.cycled || p.filled {
		// tidwall keeps the segment it closed cached in memory, whether it
		// closed it before this batch's records or after the last of them.
		l.wal.ClearCache()
	}
	l.written.Store(p.last)
	stats.Write = time.Since(start)
	return stats, nil
}

// rollIdle closes the tail segment and begins an empty one, so that tidwall,
// reopened, lets go of the tail it kept in memory; it also drops the empty
// pending batch's buffers. The writer calls it when the log has been idle
// for IdleRoll; a tail under IdleRollBytes stays where it is. It reports
// true when the log was busy (records queued or not yet durable, a
// TruncateFront under way) and the caller should try again later. A roll
// that cannot create its file (a full disk) leaves the log as it was; one
// that fails after that fails the log, as a failed write does.
func (l *Log) rollIdle() (retry bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.pend.empty() {
		l.pend.release()
	}
	if l.closed || l.err != nil || l.tailSize < int64(l.opts.IdleRollBytes) {
		return false
	}
	if !l.pend.empty() || l.durable.Load() != l.written.Load() || !l.walMu.TryLock() {
		return true
	}
	defer l.walMu.Unlock()
	if l.wal == nil {
		return false // asleep: tidwall holds nothing
	}
	if l.cycleNext && exists(segmentPath(l.dir, l.next)) {
		// A record filled the tail: tidwall has begun the next segment
		// already (the next write records it) and write dropped the full
		// one from its cache. Nothing is held.
		return false
	}
	if err := l.beginSegment(l.next); err != nil {
		l.failLocked(err)
	}
	return false
}

// sleep closes tidwall and the segment files readers opened once the log
// has written nothing for IdleRoll and everything it wrote is durable, so
// that an idle queue holds no file open (a namespace of thousands of queues
// would otherwise need as many descriptors). The writer goroutine, which
// calls it, then returns: the next append starts another, whose first write
// opens tidwall again and so reads the tail segment back (at most a
// segment's worth of work on the first commit after a quiet spell). It
// reports that the caller should try again later (records pending, or
// TruncateFront under way), or that the log sleeps and the writer must
// return.
func (l *Log) sleep() (retry, slept bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed || l.err != nil {
		return false, false
	}
	if !l.pend.empty() || l.durable.Load() != l.written.Load() || !l.walMu.TryLock() {
		return true, false
	}
	defer l.walMu.Unlock()
	if l.wal != nil {
		err := l.wal.Close()
		l.wal = nil
		l.segs.close() // readers open what they need again
		if err != nil {
			l.failLocked(fmt.Errorf("close idle log: %w", err))
			return false, false
		}
	}
	l.running = false
	return false, true
}

// wakeUp opens tidwall again if the log sleeps. Writer goroutine only.
func (l *Log) wakeUp() error {
	l.walMu.Lock()
	defer l.walMu.Unlock()
	_, err := l.tidwallLocked()
	return err
}

// withTidwallLocked calls f with tidwall for a caller other than the writer
// that holds walMu: if the log sleeps, tidwall is opened for the call and
// closed after it.
func (l *Log) withTidwallLocked(f func(*wal.Log) error) error {
	asleep, err := l.tidwallLocked()
	if err != nil {
		return err
	}
	err = f(l.wal)
	if asleep {
		err = errors.Join(err, l.wal.Close())
		l.wal = nil
	}
	return err
}

// tidwallLocked opens tidwall for a caller holding walMu if the log sleeps,
// and says whether it did.
func (l *Log) tidwallLocked() (asleep bool, err error) {
	if l.wal != nil {
		return false, nil
	}
	if err := l.fault("wake"); err != nil {
		return true, fmt.Errorf("reopen idle log: %w", err)
	}
	w, err := wal.Open(l.dir, tidwallOptions(l.opts))
	if err != nil {
		return true, fmt.Errorf("reopen idle log: %w", err)
	}
	l.wal = w
	return true, nil
}

// beginSegment makes next, the index the next record gets, the first of a
// new, empty tail segment: it creates the file, makes its name durable, and
// reopens tidwall, which takes it as its tail and lets go of the old one.
// When the file cannot be created or its name made durable (a full disk,
// say), nothing changes. An error means the log can no longer be trusted.
// Callers hold mu and walMu, or own the log alone.
func (l *Log) beginSegment(next uint64) error {
	if ok, err := l.createSegment(next); !ok || err != nil {
		return err
	}
	if err := l.wal.Close(); err != nil { // fsyncs the old tail
		return fmt.Errorf("close segment before %s: %w", SegmentName(next), err)
	}
	w, err := wal.Open(l.dir, tidwallOptions(l.opts))
	if err != nil {
		return fmt.Errorf("reopen at segment %s: %w", SegmentName(next), err)
	}
	l.wal = w
	// What tidwall's own cycle does, done now: the next record starts the
	// new segment.
	l.segs.add(next)
	l.tailFirst, l.tailSize, l.cycleNext = next, 0, false
	return nil
}

// createSegment creates the empty segment file whose first index is next
// and makes its name durable. It reports false, and leaves no file, when
// that cannot be done (a full disk, say); an error means a file it could
// not take back is left, and the log can no longer be trusted.
func (l *Log) createSegment(next uint64) (bool, error) {
	path := segmentPath(l.dir, next)
	created := false
	err := l.fault("roll")
	if err == nil {
		var f *os.File
		if f, err = os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o640); err == nil {
			created = true
			err = f.Close()
		}
	}
	if err == nil {
		err = l.fault("roll-dir")
	}
	if err == nil {
		err = SyncDir(l.dir)
	}
	if err == nil {
		return true, nil
	}
	if !created {
		return false, nil
	}
	// A crash must not find the empty file after a tail that went on
	// taking records: its removal has to be durable, or the log fails.
	if err := os.Remove(path); err != nil {
		return false, fmt.Errorf("remove unused segment %s: %w", SegmentName(next), err)
	}
	if err := SyncDir(l.dir); err != nil {
		return false, fmt.Errorf("remove unused segment %s: %w", SegmentName(next), err)
	}
	return false, nil
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

func (l *Log) sync() (time.Duration, error) {
	if l.durable.Load() == l.written.Load() {
		return 0, nil
	}
	start := time.Now()
	if err := l.fault("sync"); err != nil {
		return 0, fmt.Errorf("fsync: %w", err)
	}
	if l.newSegment {
		err := l.fault("segment-dir")
		if err == nil {
			err = SyncDir(l.dir)
		}
		if err != nil {
			return time.Since(start), fmt.Errorf("sync directory after new segment: %w", err)
		}
		l.newSegment = false
	}
	if err := l.wal.Sync(); err != nil {
		return time.Since(start), fmt.Errorf("fsync: %w", err)
	}
	l.durable.Store(l.written.Load())
	return time.Since(start), nil
}

// syncAndRelease fsyncs what was written and not yet synced, outside a
// group commit (a timer, or Close), and releases the held waiters.
func (l *Log) syncAndRelease(held *[]waiter, lastSync *time.Time) {
	behind := l.durable.Load() != l.written.Load()
	took, err := l.sync()
	l.openBracket()
	defer l.closeBracket()
	if err != nil {
		l.fail(err)
		l.release(*held, l.Err())
	} else {
		l.release(*held, nil)
	}
	*held = releaseHeld(*held)
	*lastSync = time.Now()
	if behind && err == nil && l.opts.OnCommit != nil {
		// The durable index moved: tell whoever watches commits.
		l.opts.OnCommit(CommitStats{Sync: took, Synced: true})
	}
}

func (l *Log) openBracket() {
	if l.opts.Bracket != nil {
		l.opts.Bracket.Open()
	}
}

func (l *Log) closeBracket() {
	if l.opts.Bracket != nil {
		l.opts.Bracket.Close()
	}
}

func (l *Log) release(ws []waiter, err error) {
	for _, w := range ws {
		w.done(err)
	}
}

// fail makes err the log's sticky error.
func (l *Log) fail(err error) {
	l.mu.Lock()
	l.failLocked(err)
	l.mu.Unlock()
}

// failLocked is fail for a caller that holds mu.
func (l *Log) failLocked(err error) {
	if l.err == nil {
		l.err = &failedError{err: err}
		if l.opts.OnFail != nil {
			l.opts.OnFail(l.err)
		}
	}
	l.space.Broadcast()
}

// ReadAt reads the record with the given index from its position (as given
// by Append or a scan), checking its CRC and index. buf is reused when large
// enough; the event's byte slices alias the returned buffer.
func (l *Log) ReadAt(index uint64, pos event.Position, buf []byte) (event.Event, []byte, error) {
	if err := l.readable(index); err != nil {
		return event.Event{}, buf, err
	}
	return l.segs.readAt(index, pos, buf)
}

// ReadAhead is ReadAt through a reader's window (see Window): records read
// in log order cost one read of the segment per window. The event owns its
// bytes.
func (l *Log) ReadAhead(index uint64, pos event.Position, w *Window) (event.Event, error) {
	if err := l.readable(index); err != nil {
		return event.Event{}, err
	}
	return l.segs.readAhead(index, pos, w)
}

// readable reports why the record at index cannot be read, if it cannot.
func (l *Log) readable(index uint64) error {
	if index < l.first.Load() || index > l.written.Load() {
		return fmt.Errorf("read index %d: not in the log (%d-%d written)", index, l.first.Load(), l.written.Load())
	}
	return nil
}

// Scan calls fn with every written record from index from onward, in order.
// The event (and its byte slices) is only valid during the call.
func (l *Log) Scan(from uint64, fn func(*event.Event) error) error {
	if from < l.first.Load() {
		from = l.first.Load()
	}
	return l.segs.scan(from, l.written.Load(), fn)
}

// ScanFrom is Scan, under the name snapshot.Source shares with ReadOnly.
func (l *Log) ScanFrom(from uint64, fn func(*event.Event) error) error { return l.Scan(from, fn) }

// TruncateFront drops whole segments whose records all come before upTo, the
// first index still needed. It returns the new first index. To stay cheap it
// keeps the last record of the segment before the first needed one:
// tidwall rewrites the segment holding the new first index, and a segment
// reduced to one record costs one record to rewrite.
func (l *Log) TruncateFront(upTo uint64) (uint64, error) {
	if err := l.Err(); err != nil {
		return l.first.Load(), err
	}
	l.walMu.Lock()
	defer l.walMu.Unlock()
	segs := l.segs.list()
	k, keep := frontCut(segs, min(upTo, l.written.Load()), l.first.Load())
	if k < 1 {
		return l.first.Load(), nil
	}
	removed := l.sizeOf(segs[:k])
	if err := l.withTidwallLocked(func(w *wal.Log) error { return w.TruncateFront(keep) }); err != nil {
		err = fmt.Errorf("truncate front to %d: %w", keep, err)
		l.fail(err)
		return l.first.Load(), err
	}
	l.segs.replaceFront(segs[k], keep)
	removed -= l.sizeOf([]uint64{keep})
	l.bytes.Add(-removed)
	l.first.Store(keep)
	return keep, SyncDir(l.dir)
}

// frontCut plans TruncateFront: k is the segment that will begin the log
// once the ones before it are gone, keep the index the log will start at
// (the last record of segment k-1). k < 1 means there is nothing to drop.
func frontCut(segs []uint64, limit, first uint64) (k int, keep uint64) {
	k = -1
	for i, s := range segs {
		if s <= limit {
			k = i
		}
	}
	if k < 1 || segs[k]-1 <= first {
		return -1, first
	}
	return k, segs[k] - 1
}

// sizeOf is the bytes on disk of the given segments.
func (l *Log) sizeOf(segs []uint64) int64 {
	var n int64
	for _, s := range segs {
		if fi, err := os.Stat(segmentPath(l.dir, s)); err == nil {
			n += fi.Size()
		}
	}
	return n
}

// Reclaimable is about how many bytes TruncateFront(upTo) would free once
// the log is written up to upTo (the index the next record gets at most):
// the segments it would drop, or 0 when it would drop nothing. It lets an
// idle owner decide whether checkpointing so that it can truncate is worth
// doing.
func (l *Log) Reclaimable(upTo uint64) int64 {
	l.mu.Lock()
	next := l.next
	l.mu.Unlock()
	segs := l.segs.list()
	k, _ := frontCut(segs, min(upTo, next), l.first.Load())
	if k < 1 {
		return 0
	}
	return l.sizeOf(segs[:k])
}

// SegmentStart is the first index of the segment that holds index (or
// would hold it, past the end): the highest cut at or below index that
// TruncateFront honours exactly.
func (l *Log) SegmentStart(index uint64) uint64 {
	start := l.first.Load()
	for _, s := range l.segs.list() {
		if s <= index {
			start = max(start, s)
		}
	}
	return start
}

// TruncateBack drops every record after index: the operator's repair for
// corruption found by Scan. It must not run while records are appended.
func (l *Log) TruncateBack(index uint64) error {
	// walMu before mu, as TruncateFront takes them; the roll and sleep,
	// which hold mu, only try walMu.
	l.walMu.Lock()
	defer l.walMu.Unlock()
	l.mu.Lock()
	defer l.mu.Unlock()
	if index >= l.next-1 {
		return nil
	}
	if err := l.withTidwallLocked(func(w *wal.Log) error { return w.TruncateBack(index) }); err != nil {
		return fmt.Errorf("truncate back to %d: %w", index, err)
	}
	segs, err := listSegments(l.dir)
	if err != nil {
		return err
	}
	l.segs.reset(segs)
	fi, err := os.Stat(segmentPath(l.dir, segs[len(segs)-1]))
	if err != nil {
		return err
	}
	l.next = index + 1
	l.tailFirst, l.tailSize = segs[len(segs)-1], fi.Size()
	l.cycleNext = l.tailSize > int64(l.opts.SegmentSize)
	l.written.Store(index)
	l.durable.Store(index)
	return SyncDir(l.dir)
}

// Close waits for queued records to be written and fsynced, then closes the
// files. Appends after Close fail with ErrClosed.
func (l *Log) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return ErrClosed
	}
	l.closed = true
	l.space.Broadcast()
	l.mu.Unlock()
	select {
	case l.wake <- struct{}{}:
	default:
	}
	l.writer.Wait()
	l.segs.close()
	l.walMu.Lock()
	var err error
	if l.wal != nil {
		err = l.wal.Close()
	}
	l.walMu.Unlock()
	if failed := l.Err(); failed != nil {
		return failed
	}
	return err
}
