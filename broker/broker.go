// Package broker is walbus's runtime shell around the pure projection: one
// actor goroutine per entity sequences its commands, appends the events
// through group commit, applies them, and releases effects (acknowledgements,
// deliveries, timers) once the log says they are durable. The namespace log
// records which entities exist.
//
// Callbacks given to the broker (ReceiverOptions.Deliver and Lost, the done
// functions of sends, settlements and session grants) run on an entity's
// actor or on its log's writer: they must not block, and must not wait for
// the entity (a post to it from there can block on its own full queue).
// docs/architecture.md#threading-contract has the whole contract.
package broker

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	mrand "math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/walbus/walbus/broker/layout"
	"github.com/walbus/walbus/log"
	"github.com/walbus/walbus/log/event"
	"github.com/walbus/walbus/projection"
	"github.com/walbus/walbus/snapshot"
)

// Options configure a Broker.
type Options struct {
	Dir          string
	Sync         log.SyncPolicy
	SyncInterval time.Duration
	SegmentSize  int
	// Repair lets recovery cut a log at damage in its last segment instead
	// of refusing to start.
	Repair bool
	Clock  Clock
	Logger *slog.Logger
	// A snapshot is taken after SnapshotEvery events or SnapshotBytes of
	// log since the last one, whichever comes first.
	SnapshotEvery int
	SnapshotBytes int64
	// FinalSnapshotMin is the fewest events since an entity's last
	// snapshot for which a graceful Close writes one (default 16): a
	// restart replays fewer faster than it reads a snapshot, and a stop of
	// thousands of entities created a moment ago writes none.
	FinalSnapshotMin int
	// IdleCheckpoint is how long an entity goes without an event before it
	// looks at its log: if segments there are kept only for the older of
	// its two snapshots, it writes a checkpoint followed by a snapshot (up
	// to twice), and the log is cut to what its state still needs. Default
	// 10 s; negative: never.
	IdleCheckpoint time.Duration
	// AutoDeleteScan is how often the broker looks for entities idle for
	// their AutoDeleteOnIdle (autodelete.go). Default 30 s.
	AutoDeleteScan time.Duration
	// AutoDeleteScale divides every AutoDeleteOnIdle when it is checked:
	// tests only, so that Service Bus's 5-minute minimum takes seconds.
	AutoDeleteScale int
	// CompactBytes is the least a compaction of an entity's log must free
	// (see compact.go): after a snapshot, when the segments truncation had
	// to keep for a few old messages hold at least this much and twice what
	// those messages take, they are moved to an archive and the segments
	// dropped. Default 64 MiB; negative: never.
	CompactBytes int64
	// CacheBytes is each entity's own cap on the message records it keeps
	// in memory (default 8 MiB; negative: none but MemoryBudget): messages
	// delivered soon after they were sent are served from it, older ones are
	// read from the log.
	CacheBytes int64
	// MemoryBudget caps the records all entities keep in memory together
	// (budget.go): the least recently used go first, an entity's next
	// deliveries last. 0: no cap but each entity's CacheBytes.
	MemoryBudget int64
	// Seed, if not 0, makes lock tokens reproducible (tests only).
	Seed uint64
	// Cluster, if set, makes each entity's log its member of the entity's
	// Raft group (cluster.go, docs/cluster.md).
	Cluster *Cluster
	// OnCommit, if set, is told about every group commit of every entity
	// log (metrics). It runs on the log's writer goroutine.
	OnCommit func(entity string, s log.CommitStats)
	// NewBracket, if set, gives each entity a bracket that its actor opens
	// around every run of work and its log's writer around every group
	// commit's callbacks (log.Options.Bracket): the Deliver and done
	// callbacks of one run happen inside it, so their output can be
	// gathered and written when it closes. See Entity.Bracket.
	NewBracket func() log.Bracket
	// OnSnapshot, if set, is told about every snapshot written.
	OnSnapshot func(SnapshotStats)
	// OnFirstDelivery, if set, is told how long each message waited in its
	// queue: from its enqueue (or, scheduled, its due time) to its first
	// delivery, the fsync before it could go included. Dead-letter queues
	// and messages received by sequence number are not counted. It runs on
	// the entity's actor and must not block.
	OnFirstDelivery func(entity string, wait time.Duration)
	// FilterMessage, if set, reads what a topic's rules see of a message
	// (its system and application properties) from the bare message a
	// client sent; the protocol layer supplies it. Without it, or when it
	// fails, rules see only the MessageId and SessionId.
	FilterMessage func(body []byte) (*FilterMessage, error)
	// DiskReserve is the size of the emergency reserve kept in Dir (see
	// disk.go; walbus serve's default is DefaultDiskReserve). 0: none, but
	// the disk is still watched, and a write that fails for space still
	// makes it low.
	DiskReserve int64
	// DiskCheck is how often the free space is read. Default 1 s.
	DiskCheck time.Duration
	// DiskFree, if set, reports the free bytes in Dir in place of
	// statfs (tests only).
	DiskFree func() (uint64, error)
	// Fault, if set, is asked before every write and fsync of an entity's
	// log (entity "" is the namespace log): the fault-injection layer for
	// tests. Production leaves it nil.
	Fault func(entity, op string) error
}

func (o Options) withDefaults() Options {
	if o.Dir == "" {
		o.Dir = "data"
	}
	if o.Clock == nil {
		o.Clock = SystemClock{}
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if o.SnapshotEvery <= 0 {
		o.SnapshotEvery = 200_000
	}
	if o.SnapshotBytes <= 0 {
		o.SnapshotBytes = 256 << 20
	}
	if o.FinalSnapshotMin <= 0 {
		o.FinalSnapshotMin = 16
	}
	if o.IdleCheckpoint == 0 {
		o.IdleCheckpoint = 10 * time.Second
	}
	if o.AutoDeleteScan <= 0 {
		o.AutoDeleteScan = max(30*time.Second/time.Duration(max(o.AutoDeleteScale, 1)), 50*time.Millisecond)
	}
	if o.CompactBytes == 0 {
		o.CompactBytes = 64 << 20
	}
	if o.CacheBytes == 0 {
		o.CacheBytes = 8 << 20
	}
	if o.DiskCheck <= 0 {
		o.DiskCheck = time.Second
	}
	return o
}

// Broker owns the namespace and its entities.
type Broker struct {
	opts   Options
	clock  Clock
	logger *slog.Logger
	ns     *log.Log     // the namespace log (nil in a cluster)
	nsLast uint64       // the namespace log's last acknowledged record (b.mu)
	meta   *metaGroup   // a cluster's metadata group (nil on a single node)
	lock   *log.DirLock // on the data directory, held until Close

	mu       sync.RWMutex
	entities map[string]*Entity // by lower-case name
	byGroup  sync.Map           // uint64 -> *Entity: by namespace id, for a cluster's peer messages
	closed   bool
	quit     chan struct{}             // closed at shutdown
	idleScan chan struct{}             // asks for an auto-delete scan now (a test clock advance)
	disk     atomic.Pointer[diskGuard] // set once recovery is done
	mem      memoryBudget
}

// Errors about entities.
var (
	ErrEntityNotFound = projection.ErrNotFound
	ErrEntityExists   = projection.ErrExists
	ErrBadName        = errors.New("invalid entity name")
)

// entitySpec is what the namespace log records about an entity.
type entitySpec struct {
	Kind   string            `json:"kind"`
	Config projection.Config `json:"config"`
	// Voters, in a cluster, are the metadata group's voters when the
	// entity was created: they found its group.
	Voters []uint64 `json:"voters,omitempty"`
}

// Recovery reports what Open did.
type Recovery struct {
	Entities []EntityRecovery
	Took     time.Duration
}

// EntityRecovery reports how one entity was rebuilt.
type EntityRecovery struct {
	Name     string
	Snapshot uint64 // index of the snapshot loaded, 0 if none
	Skipped  []snapshot.Skipped
	Replayed int // events replayed after the snapshot
	Repair   log.TailRepair
	Took     time.Duration
}

// maxRecoveryLines is how many entities' recoveries a start logs at info.
const maxRecoveryLines = 20

// Open opens (or creates) the broker in opts.Dir and recovers every entity:
// its newest valid snapshot, then its log after it.
func Open(opts Options) (*Broker, Recovery, error) {
	start := time.Now()
	opts = opts.withDefaults()
	b := &Broker{opts: opts, clock: opts.Clock, logger: opts.Logger, entities: make(map[string]*Entity), quit: make(chan struct{}),
		idleScan: make(chan struct{}, 1)}
	b.initBudget()
	var rec Recovery
	lock, err := log.LockDir(opts.Dir)
	if err != nil {
		return nil, rec, err
	}
	b.lock = lock
	var ns *namespace
	if opts.Cluster != nil {
		ns, err = b.openMeta()
	} else {
		ns, err = b.openNamespace()
	}
	if err != nil {
		lock.Unlock()
		return nil, rec, err
	}
	if c, ok := b.clock.(*OffsetClock); ok {
		c.mu.Lock()
		c.setOffset(ns.advanced)
		c.mu.Unlock()
	} else if ns.advanced != 0 {
		b.logger.Warn("the test clock was advanced before; without --test-clock the broker runs on the real clock, behind its logs",
			"advanced", ns.advanced)
	}
	if err := b.removeOrphans(ns.names); err != nil {
		b.closeNamespace()
		lock.Unlock()
		return nil, rec, err
	}
	ids := ns.ids()
	results := make([]struct {
		e   *Entity
		rec EntityRecovery
		err error
	}, len(ids))
	sideBySide(len(ids), openWorkers, func(i int) {
		r, id := &results[i], ids[i]
		r.e, r.rec, r.err = b.openEntity(ns.names[id], id, ns.specs[id].Config, ns.specs[id].Voters)
	})
	var openErr error
	var summary struct{ snapshots, replayed, repaired, logged int }
	for i, id := range ids {
		r := results[i]
		if r.err != nil {
			openErr = cmp.Or(openErr, r.err)
			continue
		}
		e, er := r.e, r.rec
		rec.Entities = append(rec.Entities, er)
		e.created.Store(ns.times[id][0])
		e.updated.Store(ns.times[id][1])
		b.entities[strings.ToLower(e.name)] = e
		b.byGroup.Store(e.id, e)
		if cfg := e.cfg.Load(); cfg != nil && ignoredForwarding(*cfg) {
			b.logger.Warn("queue requires sessions; its ForwardTo is ignored", "entity", e.name, "forward_to", cfg.ForwardTo)
		}
		if er.Snapshot > 0 {
			summary.snapshots++
		}
		summary.replayed += er.Replayed
		if er.Repair.Bytes > 0 {
			summary.repaired++
		}
		// Entities whose recovery repaired something or replayed more than
		// a graceful stop leaves are logged, the first few at info; the
		// others, and the rest, at debug: a start with thousands of
		// entities takes a few lines.
		level := slog.LevelDebug
		if (er.Replayed >= opts.FinalSnapshotMin || er.Repair.Bytes > 0) && summary.logged < maxRecoveryLines {
			level = slog.LevelInfo
			summary.logged++
		}
		b.logger.Log(context.Background(), level, "entity recovered", "entity", er.Name, "snapshot", er.Snapshot,
			"replayed", er.Replayed, "took", er.Took, "tail_repair", er.Repair.String())
	}
	if openErr != nil {
		b.Close() // the entities that opened
		return nil, rec, openErr
	}
	b.logger.Info("entities recovered", "entities", len(rec.Entities), "from_snapshots", summary.snapshots,
		"records_replayed", summary.replayed, "tails_repaired", summary.repaired)
	// Work that was under way at the crash or shutdown (a dead-letter
	// forward, a transfer) resumes once every entity is open: wake each
	// actor, which first cancels what transactions held and never
	// committed (before any client can reach it).
	for _, e := range b.entities {
		e.post((*Entity).cancelHeld)
	}
	rec.Took = time.Since(start)
	disk := newDiskGuard(b)
	disk.start()
	b.disk.Store(disk)
	go b.runAutoDelete()
	go b.runTrimmer()
	if opts.Cluster != nil {
		go b.runBalancer()
		go b.runMeta()
	}
	return b, rec, nil
}

// removeOrphans deletes entity directories the namespace no longer lists: a
// crash between recording a deletion and removing the files.
func (b *Broker) removeOrphans(live map[uint64]string) error {
	dir := layout.EntitiesDir(b.opts.Dir)
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, ent := range ents {
		id, ok := layout.ParseDirName(ent.Name())
		if !ok || live[id] != "" {
			continue
		}
		b.logger.Info("removing files of a deleted entity", "dir", ent.Name())
		if err := os.RemoveAll(filepath.Join(dir, ent.Name())); err != nil {
			return err
		}
	}
	return nil
}

func (b *Broker) logOptions(entity string, onCommit func(log.CommitStats), onFail func(error), bracket log.Bracket) log.Options {
	o := log.Options{Sync: b.opts.Sync, SyncInterval: b.opts.SyncInterval, SegmentSize: b.opts.SegmentSize,
		Repair: b.opts.Repair, OnCommit: onCommit, OnFail: onFail, Bracket: bracket}
	if b.opts.IdleCheckpoint > 0 {
		// An idle log lets go of its tail before the idle check looks at
		// it, so that the check finds the segment it closed.
		o.IdleRoll = min(2*time.Second, b.opts.IdleCheckpoint/2)
	}
	if b.opts.Fault != nil {
		o.Fault = func(op string) error { return b.opts.Fault(entity, op) }
	}
	return o
}

func (b *Broker) entityDir(id uint64) string {
	return layout.EntityDir(b.opts.Dir, id)
}

// openEntity recovers (or creates) the entity with the given namespace id
// and starts its actor. cfg configures the entity if its own log does not
// yet say it was created. In a cluster, founders found the entity's group
// if it has no log yet (nil: the cluster's Peers; Entity.founders).
func (b *Broker) openEntity(name string, id uint64, cfg projection.Config, founders []uint64) (*Entity, EntityRecovery, error) {
	start := time.Now()
	rec := EntityRecovery{Name: name}
	dir := b.entityDir(id)
	e := &Entity{
		b:         b,
		name:      name,
		id:        id,
		dir:       dir,
		reqs:      make(chan func(*Entity), 256),
		wake:      make(chan struct{}, 1),
		quit:      make(chan struct{}),
		done:      make(chan struct{}),
		cache:     newBodyCache(b.opts.CacheBytes),
		bracket:   noBracket{},
		receivers: make(map[*Receiver]struct{}),
		rng:       mrand.New(mrand.NewChaCha8(b.seed(id))),
		opened:    b.clock.Now().UnixNano(),
	}
	e.active.last.Store(e.opened)
	e.active.since.Store(e.opened)
	if b.opts.NewBracket != nil {
		e.bracket = b.opts.NewBracket()
	}
	if b.opts.Cluster != nil {
		// The group's leader records the creation, once one leads.
		e.raft.cfg = &cfg
		e.raft.founders = founders
	}
	if err := e.load(&rec); err != nil {
		return nil, rec, err
	}
	st := e.st
	e.start()
	if b.opts.Cluster == nil && !st.Created() {
		if err := e.configure(cfg); err != nil {
			e.close(false)
			return nil, rec, err
		}
	}
	rec.Took = time.Since(start)
	return e, rec, nil
}

// seed returns the seed of an entity's lock-token generator.
func (b *Broker) seed(id uint64) [32]byte {
	var s [32]byte
	if b.opts.Seed == 0 {
		rand.Read(s[:])
	} else {
		binary.BigEndian.PutUint64(s[:], b.opts.Seed)
		binary.BigEndian.PutUint64(s[8:], id)
	}
	return s
}

// configure records cfg in the entity's own log and waits until durable.
func (e *Entity) configure(cfg projection.Config) error {
	ch := make(chan error, 1)
	e.do(func(err error) { ch <- err }, func(e *Entity) ([]event.Event, error) {
		return e.decide(projection.Configure{Name: e.name, Config: cfg})
	})
	return <-ch
}

// openNamespace opens a single node's namespace log and reads it.
func (b *Broker) openNamespace() (*namespace, error) {
	l, rep, err := log.Open(layout.NamespaceDir(b.opts.Dir), b.logOptions("", nil, nil, nil))
	if err != nil {
		return nil, fmt.Errorf("open namespace log: %w", err)
	}
	if rep.Repair.Bytes > 0 {
		b.logger.Warn("namespace log tail repaired", "repair", rep.Repair.String())
	}
	b.ns, b.nsLast = l, l.LastIndex()
	ns := newNamespace()
	if err := l.Scan(1, func(ev *event.Event) error { return ns.apply(ev) }); err != nil {
		l.Close()
		return nil, fmt.Errorf("read namespace log: %w", err)
	}
	return ns, nil
}

// closeNamespace closes the namespace log, or the metadata group's
// member.
func (b *Broker) closeNamespace() error {
	if b.meta != nil {
		return b.meta.close()
	}
	return b.ns.Close()
}

// appendNamespace records entity events in the namespace log, as one
// atomic group, and waits until they are durable (committed, in a
// cluster); it sets their indexes and times.
func (b *Broker) appendNamespace(evs []event.Event) error {
	now := b.clock.Now().UnixNano()
	for i := range evs {
		evs[i].Time = now
	}
	if b.meta != nil {
		return b.meta.append(evs)
	}
	if err := b.reopenNamespace(); err != nil {
		return err
	}
	ch := make(chan error, 1)
	if _, err := b.ns.Append(evs, func(err error) { ch <- err }); err != nil {
		b.writeFailed(err)
		return err
	}
	if err := <-ch; err != nil {
		b.writeFailed(err)
		return err
	}
	b.nsLast = evs[len(evs)-1].Index
	return nil
}

func (b *Broker) reopenNamespace() error {
	failed := b.ns.Err()
	if failed == nil {
		return nil
	}
	b.ns.Close()
	ns, _, err := log.Open(layout.NamespaceDir(b.opts.Dir), b.logOptions("", nil, nil, nil))
	if err != nil {
		return fmt.Errorf("%w (reopening the namespace log after %v)", err, failed)
	}
	if ns.LastIndex() > b.nsLast {
		if err := ns.TruncateBack(b.nsLast); err != nil {
			ns.Close()
			return fmt.Errorf("%w (reopening the namespace log after %v)", err, failed)
		}
	}
	b.ns = ns
	b.logger.Info("namespace log reopened", "after", failed)
	return nil
}

// ValidateName checks an entity name against Service Bus's rules: up to 260
// letters, digits, periods, hyphens, underscores and slashes, starting and
// ending with a letter or digit.
func ValidateName(name string) error {
	if name == "" || len(name) > 260 {
		return fmt.Errorf("%w %q: length must be 1 to 260", ErrBadName, name)
	}
	alnum := func(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' }
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !alnum(c) && !strings.ContainsRune("._-/", rune(c)) {
			return fmt.Errorf("%w %q: %q is not allowed", ErrBadName, name, c)
		}
	}
	if !alnum(name[0]) || !alnum(name[len(name)-1]) {
		return fmt.Errorf("%w %q: must start and end with a letter or digit", ErrBadName, name)
	}
	if strings.Contains(name, "//") {
		return fmt.Errorf("%w %q: empty path segment", ErrBadName, name)
	}
	return nil
}

// CreateQueue creates a queue. It fails with ErrEntityExists if an entity of
// that name (compared without case) exists.
func (b *Broker) CreateQueue(name string, cfg projection.Config) (*Entity, error) {
	return b.create(NewEntity{Name: name, Config: cfg})
}

// UpdateQueue changes a queue's config.
func (b *Broker) UpdateQueue(name string, cfg projection.Config) error {
	cfg.Topic = false
	return b.update(name, "queue", cfg)
}

// DeleteEntity deletes an entity and its data.
func (b *Broker) DeleteEntity(name string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	e, ok := b.entities[strings.ToLower(name)]
	if !ok {
		return fmt.Errorf("%w: %s", ErrEntityNotFound, name)
	}
	if err := b.appendNamespace([]event.Event{{Type: event.EntityDeleted, Name: e.name}}); err != nil {
		return err
	}
	delete(b.entities, strings.ToLower(name))
	b.byGroup.Delete(e.id)
	e.close(false)
	b.logger.Info("entity deleted", "entity", e.name)
	return os.RemoveAll(e.dir)
}

// Entity returns the entity called name (compared without case).
func (b *Broker) Entity(name string) (*Entity, error) {
	b.mu.RLock()
	defer b.mu.RUnlock()
	if e, ok := b.entities[strings.ToLower(name)]; ok {
		return e, nil
	}
	return nil, fmt.Errorf("%w: %s", ErrEntityNotFound, name)
}

// EntityCount is how many entities the broker holds.
func (b *Broker) EntityCount() int {
	b.mu.RLock()
	defer b.mu.RUnlock()
	return len(b.entities)
}

// Entities returns every entity, ordered by name.
func (b *Broker) Entities() []*Entity {
	b.mu.RLock()
	defer b.mu.RUnlock()
	out := make([]*Entity, 0, len(b.entities))
	for _, e := range b.entities {
		out = append(out, e)
	}
	slices.SortFunc(out, func(a, b *Entity) int { return strings.Compare(a.name, b.name) })
	return out
}

// Close stops every entity, writing a final snapshot of each, and closes
// the logs.
func (b *Broker) Close() error { return b.shutdown(true) }

// shutdown stops the broker; graceful writes final snapshots.
func (b *Broker) shutdown(graceful bool) error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	b.closed = true
	if b.quit != nil {
		close(b.quit)
	}
	entities := make([]*Entity, 0, len(b.entities))
	for _, e := range b.entities {
		entities = append(entities, e)
	}
	b.mu.Unlock()
	var wg sync.WaitGroup
	errs := make([]error, len(entities))
	for i, e := range entities {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = e.close(graceful)
		}()
	}
	wg.Wait()
	errs = append(errs, b.closeNamespace(), b.lock.Unlock())
	return errors.Join(errs...)
}
