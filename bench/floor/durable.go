package floor

import (
	"encoding/binary"
	"fmt"
	"os"
	"sync"
)

const (
	// appendLimit is where an appending floor's file starts again from
	// empty: a benchmark needs the cost of appending and syncing, not
	// the data.
	appendLimit = 256 << 20
	// ringSize is the file an overwriting floor fills with zeros and
	// then writes over, round and round.
	ringSize = 64 << 20
)

// syncer is the durable floor's group commit: records from every
// connection go to one file, and whatever piled up while the last sync
// ran is written and synced together, as walbus's log writer does. Each
// record's callback runs on the syncer's goroutine once the record is
// durable.
type syncer struct {
	f         *os.File
	overwrite bool
	limit     int64 // appendLimit or ringSize
	at        int64 // the file's size (appending) or the next write's offset (overwriting); run's
	wake      chan struct{}

	mu      sync.Mutex
	buf     []byte
	waiting []func()
	closed  bool
	err     error

	done   chan struct{} // closed when run returns
	failed chan struct{} // closed when a write or sync fails
}

// openSyncer creates or empties the file at path. An appending syncer
// appends and fsyncs, as tidwall/wal does for walbus's log; an overwriting
// one fills limit bytes with zeros first and then writes over them with
// fdatasync, which on ext4 commits no metadata: the cheapest durable write
// this machine has.
func openSyncer(path string, overwrite bool, limit int64) (*syncer, error) {
	flags := os.O_CREATE | os.O_WRONLY | os.O_TRUNC
	if !overwrite {
		flags |= os.O_APPEND
	}
	f, err := os.OpenFile(path, flags, 0o644)
	if err != nil {
		return nil, err
	}
	if overwrite {
		if err := zeroFill(f, limit); err != nil {
			f.Close()
			return nil, fmt.Errorf("floor log: %w", err)
		}
	}
	w := &syncer{f: f, overwrite: overwrite, limit: limit, wake: make(chan struct{}, 1),
		done: make(chan struct{}), failed: make(chan struct{})}
	go w.run()
	return w, nil
}

func zeroFill(f *os.File, size int64) error {
	zeros := make([]byte, min(size, 1<<20))
	for n := int64(0); n < size; n += int64(len(zeros)) {
		if _, err := f.Write(zeros[:min(int64(len(zeros)), size-n)]); err != nil {
			return err
		}
	}
	return f.Sync()
}

// add queues rec, framed by its length, and calls durable once it is on
// disk. After a failed write or sync, and after close, durable is never
// called: nothing is acknowledged that is not durable.
func (w *syncer) add(rec []byte, durable func()) {
	w.mu.Lock()
	if w.closed || w.err != nil {
		w.mu.Unlock()
		return
	}
	w.buf = binary.BigEndian.AppendUint32(w.buf, uint32(len(rec)))
	w.buf = append(w.buf, rec...)
	w.waiting = append(w.waiting, durable)
	w.mu.Unlock()
	w.poke()
}

func (w *syncer) poke() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

func (w *syncer) run() {
	defer close(w.done)
	var buf []byte
	var batch []func()
	for range w.wake {
		w.mu.Lock()
		buf, w.buf = w.buf, buf[:0]
		batch, w.waiting = w.waiting, batch[:0]
		closed := w.closed
		w.mu.Unlock()
		if len(batch) > 0 {
			if err := w.write(buf); err != nil {
				w.mu.Lock()
				w.err = fmt.Errorf("floor log: %w", err)
				w.mu.Unlock()
				close(w.failed)
				return
			}
			for _, durable := range batch {
				durable()
			}
			clear(batch)
		}
		if closed {
			return
		}
	}
}

// write makes buf durable.
func (w *syncer) write(buf []byte) error {
	if w.overwrite {
		for len(buf) > 0 {
			n := min(int64(len(buf)), w.limit-w.at)
			if _, err := w.f.WriteAt(buf[:n], w.at); err != nil {
				return err
			}
			w.at = (w.at + n) % w.limit
			buf = buf[n:]
		}
		return datasync(w.f)
	}
	if w.at+int64(len(buf)) > w.limit {
		if err := w.f.Truncate(0); err != nil {
			return err
		}
		w.at = 0
	}
	if _, err := w.f.Write(buf); err != nil {
		return err
	}
	w.at += int64(len(buf))
	return w.f.Sync()
}

// failure is the error that stopped the syncer, if one did.
func (w *syncer) failure() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

// close makes durable, and answers, what was added before it, then closes
// the file; it returns the first error the file gave.
func (w *syncer) close() error {
	w.mu.Lock()
	w.closed = true
	w.mu.Unlock()
	w.poke()
	<-w.done
	err := w.f.Close()
	if ferr := w.failure(); ferr != nil {
		return ferr
	}
	return err
}
