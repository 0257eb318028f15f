package main

import (
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
)

// What the crash tests (TestCrashHarness, TestCrashRandomWorkload) share:
// their knobs, the record of kills, and the checks on one message's
// deliveries in the broker's order.

// lockDuration is the LockDuration of the crash tests' queues: locks held
// at a kill run out soon after the restart.
const lockDuration = 2 * time.Second

// clockMargin allows for the millisecond rounding of the broker's times
// (locked-until) when they are compared with the test's clock.
const clockMargin = 10 * time.Millisecond

// crashRounds reads WALBUS_CRASH_ROUNDS (how many kills) and
// WALBUS_CRASH_SECONDS (about how long between two), which `make crash`
// sets for a long run.
func crashRounds(defRounds int) (int, time.Duration) {
	return envInt("WALBUS_CRASH_ROUNDS", defRounds), time.Duration(envInt("WALBUS_CRASH_SECONDS", 1)) * time.Second
}

// crashSeed is WALBUS_CRASH_SEED, or one from the clock; it is logged so
// that a failing run's choices (workload and kill times) can be repeated.
func crashSeed(t *testing.T) uint64 {
	t.Helper()
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv("WALBUS_CRASH_SEED"); v != "" {
		var err error
		if seed, err = strconv.ParseUint(v, 10, 64); err != nil {
			t.Fatalf("WALBUS_CRASH_SEED=%q: %v", v, err)
		}
	}
	t.Logf("seed %d (WALBUS_CRASH_SEED=%d draws the same choices again)", seed, seed)
	return seed
}

// crashClient is an SDK client of p that gives up on a dead broker soon,
// so that the test's operations stay short around a kill.
func crashClient(t *testing.T, p *proc) *azservicebus.Client {
	t.Helper()
	client, err := azservicebus.NewClientFromConnectionString(p.connString(), &azservicebus.ClientOptions{
		RetryOptions: azservicebus.RetryOptions{MaxRetries: 2, RetryDelay: 50 * time.Millisecond, MaxRetryDelay: 200 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	return client
}

// killLog records when walbus was killed. An operation whose call spans a
// kill has an unknown outcome: the broker may have done it and lost only
// the reply, and the SDK may have done it again after the restart.
type killLog struct {
	mu    sync.Mutex
	kills [][2]time.Time // each kill happened between the two times
}

func (k *killLog) add(before, after time.Time) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.kills = append(k.kills, [2]time.Time{before, after})
}

// spanned counts the kills between start and end (a zero end: a call
// still in progress).
func (k *killLog) spanned(start, end time.Time) int {
	k.mu.Lock()
	defer k.mu.Unlock()
	if end.IsZero() {
		end = time.Now()
	}
	n := 0
	for _, kill := range k.kills {
		if !start.After(kill[1]) && !end.Before(kill[0]) {
			n++
		}
	}
	return n
}

func (k *killLog) count() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.kills)
}

// brokerDelivery is one delivery of one copy of a message.
type brokerDelivery struct {
	at    time.Time // when the broker made it (for a lock, its locked-until less the lock duration)
	count uint32
}

// sortDeliveries puts ds in the broker's order.
func sortDeliveries(ds []brokerDelivery) {
	slices.SortStableFunc(ds, func(a, b brokerDelivery) int { return a.at.Compare(b.at) })
}

// countWentBack returns the first delivery of ds (in the broker's order)
// whose delivery count is below the one before it.
func countWentBack(ds []brokerDelivery) (int, bool) {
	for i := 1; i < len(ds); i++ {
		if ds[i].count < ds[i-1].count {
			return i, true
		}
	}
	return 0, false
}

// deliveredAfter returns the last delivery of ds (in the broker's order)
// if the broker made it after t.
func deliveredAfter(ds []brokerDelivery, t time.Time) (brokerDelivery, bool) {
	if len(ds) == 0 {
		return brokerDelivery{}, false
	}
	last := ds[len(ds)-1]
	return last, last.at.After(t.Add(clockMargin))
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}
