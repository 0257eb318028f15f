package log

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/walbus/walbus/log/event"
)

const crashDirEnv = "WALBUS_LOG_CRASH_DIR"

// selfChecking builds a message whose bytes prove their own integrity: an
// 8-byte seed followed by bytes derived from it.
func selfChecking(seed uint64) []byte {
	n := 16 + int(seed%900)
	b := binary.BigEndian.AppendUint64(make([]byte, 0, 8+n), seed)
	for i := range n {
		b = append(b, byte(seed>>(i%8*8))+byte(i))
	}
	return b
}

func intact(msg []byte) bool {
	if len(msg) < 8 {
		return false
	}
	want := selfChecking(binary.BigEndian.Uint64(msg))
	return string(want) == string(msg)
}

// TestCrashChild is the child process of TestKillNineLosesNothingAcknowledged:
// it appends groups from several goroutines under SyncAlways and prints the
// last index of each group once it is acknowledged.
func TestCrashChild(t *testing.T) {
	dir := os.Getenv(crashDirEnv)
	if dir == "" {
		return // only meaningful as a child process
	}
	l, _, err := Open(dir, Options{SegmentSize: 256 << 10})
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	var out sync.Mutex
	var wg sync.WaitGroup
	for p := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(os.Getpid()), uint64(p)))
			for g := 0; ; g++ {
				size := 1 + rng.IntN(3)
				id := fmt.Sprintf("%d-%d-%d", os.Getpid(), p, g)
				evs := make([]event.Event, size)
				for k := range evs {
					evs[k] = event.Event{Type: event.Enqueued, Time: time.Now().UnixNano(),
						MessageID: fmt.Sprintf("%s/%d/%d", id, size, k), Message: selfChecking(rng.Uint64())}
				}
				done := make(chan error, 1)
				if _, err := l.Append(evs, func(err error) { done <- err }); err != nil {
					return
				}
				if err := <-done; err != nil {
					return
				}
				out.Lock()
				fmt.Printf("ack %d %d\n", evs[0].Index, evs[size-1].Index)
				out.Unlock()
			}
		}()
	}
	wg.Wait()
}

func TestKillNineLosesNothingAcknowledged(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns child processes")
	}
	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(7, 7))
	acked := map[uint64]bool{}
	var repaired int
	for round := range 6 {
		cmd := exec.Command(os.Args[0], "-test.run=^TestCrashChild$", "-test.count=1")
		cmd.Env = append(os.Environ(), crashDirEnv+"="+dir)
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		lines := make(chan string, 1024)
		go func() {
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				lines <- sc.Text()
			}
			close(lines)
		}()
		// The kill comes a random while after the first acknowledgement, so
		// a child slow to start (a loaded machine, the race detector) is
		// still killed under load; one that acknowledges nothing fails.
		killAfter := time.Duration(100+rng.IntN(400)) * time.Millisecond
		var kill <-chan time.Time
		noAck := time.After(time.Minute)
		roundAcks := 0
	read:
		for {
			select {
			case line, ok := <-lines:
				if !ok {
					break read
				}
				f := strings.Fields(line)
				if len(f) != 3 || f[0] != "ack" {
					t.Fatalf("child said %q", line)
				}
				from, _ := strconv.ParseUint(f[1], 10, 64)
				to, _ := strconv.ParseUint(f[2], 10, 64)
				for i := from; i <= to; i++ {
					acked[i] = true
				}
				roundAcks++
				if roundAcks == 1 {
					kill = time.After(killAfter)
				}
			case <-kill:
				cmd.Process.Signal(syscall.SIGKILL)
				kill = nil
			case <-noAck:
				if roundAcks == 0 {
					cmd.Process.Signal(syscall.SIGKILL)
				}
				noAck = nil
			}
		}
		cmd.Wait()
		if roundAcks == 0 {
			t.Fatalf("round %d: child acknowledged nothing", round)
		}

		// Reopen as the broker would and check every acknowledged index.
		l, rep, err := Open(dir, Options{SegmentSize: 256 << 10})
		if err != nil {
			t.Fatalf("round %d: reopen: %v", round, err)
		}
		if rep.Repair.Bytes > 0 {
			repaired++
			if acked[rep.Repair.FromIndex] {
				t.Fatalf("round %d: repair dropped acknowledged index %d", round, rep.Repair.FromIndex)
			}
		}
		present := map[uint64]bool{}
		groups := map[string]int{}
		sizes := map[string]int{}
		err = l.Scan(1, func(e *event.Event) error {
			if !intact(e.Message) {
				return fmt.Errorf("index %d: message damaged", e.Index)
			}
			present[e.Index] = true
			parts := strings.Split(e.MessageID, "/")
			groups[parts[0]]++
			sizes[parts[0]], _ = strconv.Atoi(parts[1])
			return nil
		})
		l.Close()
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		for i := range acked {
			if !present[i] {
				t.Fatalf("round %d: acknowledged index %d lost", round, i)
			}
		}
		for id, n := range groups {
			if n != sizes[id] {
				t.Fatalf("round %d: group %s has %d of %d records", round, id, n, sizes[id])
			}
		}
		t.Logf("round %d: %d acknowledged so far, %d records on disk, tail repair: %s", round, len(acked), len(present), rep.Repair)
	}
	t.Logf("%d of 6 restarts repaired a torn tail", repaired)
}
