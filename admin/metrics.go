package admin

import (
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/walbus/walbus/amqpserver/transport"
	"github.com/walbus/walbus/broker"
)

// Metrics is walbus's Prometheus instrumentation, on a private registry.
// Hooks (ObserveCommit, ObserveSnapshot) are fed by the broker; per-entity
// gauges and counters are read from the broker at scrape time.
type Metrics struct {
	reg *prometheus.Registry

	commit   prometheus.Histogram
	fsync    prometheus.Histogram
	records  prometheus.Histogram
	snapshot prometheus.Histogram
	wait     prometheus.Histogram
	recovery *prometheus.GaugeVec

	broker atomic.Pointer[broker.Broker]
	amqp   atomic.Pointer[statsSource]
}

// statsSource is what the AMQP server reports about open connections.
type statsSource struct{ stats func() transport.Stats }

// NewMetrics creates the metrics and their registry.
func NewMetrics() *Metrics {
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		commit: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "walbus_group_commit_duration_seconds",
			Help:    "Time to write and (when it did) fsync one group commit.",
			Buckets: prometheus.ExponentialBuckets(50e-6, 2, 16)}),
		fsync: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "walbus_fsync_duration_seconds",
			Help:    "Time of one fsync of a log segment.",
			Buckets: prometheus.ExponentialBuckets(50e-6, 2, 16)}),
		records: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "walbus_group_commit_records",
			Help:    "Records written by one group commit.",
			Buckets: prometheus.ExponentialBuckets(1, 2, 14)}),
		snapshot: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "walbus_snapshot_duration_seconds",
			Help:    "Time to compress, write and fsync one snapshot.",
			Buckets: prometheus.ExponentialBuckets(1e-3, 2, 16)}),
		wait: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "walbus_message_wait_seconds",
			Help: "Time from a message's enqueue (or due time, if scheduled) to its first delivery, " +
				"the fsync before it could go included; dead-letter queues not counted.",
			Buckets: oneTwoFive(100e-6, 22)}),
		recovery: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "walbus_recovery_duration_seconds",
			Help: "Time the last start took to recover the entity from its snapshot and log."}, []string{"entity"}),
	}
	m.reg.MustRegister(m.commit, m.fsync, m.records, m.snapshot, m.wait, m.recovery, entityCollector{m},
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// oneTwoFive returns n bucket bounds from start on, in steps of 1, 2, 5
// times a power of ten (start 1e-4: 0.1 ms, 0.2, 0.5, 1, 2, 5 ms, ...): a
// latency objective such as "under 2 ms" is a bound.
func oneTwoFive(start float64, n int) []float64 {
	bounds := make([]float64, n)
	for i := range bounds {
		bounds[i] = start * []float64{1, 2, 5}[i%3] * math.Pow(10, float64(i/3))
	}
	return bounds
}

// Registry is where the metrics are registered.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// ObserveCommit records one group commit of an entity log, or an fsync
// outside one (no records: the --sync interval timer's).
func (m *Metrics) ObserveCommit(_ string, s broker.CommitStats) {
	if s.Synced {
		m.fsync.Observe(s.Sync.Seconds())
	}
	if s.Records > 0 {
		m.commit.Observe((s.Write + s.Sync).Seconds())
		m.records.Observe(float64(s.Records))
	}
}

// ObserveSnapshot records one snapshot.
func (m *Metrics) ObserveSnapshot(s broker.SnapshotStats) {
	if s.Err == nil {
		m.snapshot.Observe(s.Took.Seconds())
	}
}

// ObserveFirstDelivery records how long a message waited in its queue
// before its first delivery.
func (m *Metrics) ObserveFirstDelivery(_ string, wait time.Duration) {
	m.wait.Observe(max(wait, 0).Seconds())
}

// ObserveRecovery records what the broker's start took per entity.
func (m *Metrics) ObserveRecovery(rec broker.Recovery) {
	for _, e := range rec.Entities {
		m.recovery.WithLabelValues(e.Name).Set(e.Took.Seconds())
	}
}

// SetBroker makes the broker's entities visible to scrapes.
func (m *Metrics) SetBroker(b *broker.Broker) { m.broker.Store(b) }

// SetAdmission makes the listeners' admission counts visible to scrapes:
// pending connections, refusals by limit, handshake timeouts.
func (m *Metrics) SetAdmission(a *transport.Admission) {
	m.reg.MustRegister(admissionCollector{a})
}

var (
	descPending = prometheus.NewDesc("walbus_connections_pending",
		"Connections accepted and not yet authorized (AMQP) or sent a request line (HTTP).", nil, nil)
	descRefused = prometheus.NewDesc("walbus_connections_refused_total",
		"Connections closed at accept because a limit was reached, by limit.", []string{"limit"}, nil)
	descHandshakeTimeouts = prometheus.NewDesc("walbus_handshake_timeouts_total",
		"Pending connections closed by --handshake-timeout.", nil, nil)
)

type admissionCollector struct{ a *transport.Admission }

func (c admissionCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descPending
	ch <- descRefused
	ch <- descHandshakeTimeouts
}

func (c admissionCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.a.Stats()
	ch <- prometheus.MustNewConstMetric(descPending, prometheus.GaugeValue, float64(st.Pending))
	for i, n := range st.Refused {
		ch <- prometheus.MustNewConstMetric(descRefused, prometheus.CounterValue, float64(n), transport.LimitNames[i])
	}
	ch <- prometheus.MustNewConstMetric(descHandshakeTimeouts, prometheus.CounterValue, float64(st.TimedOut))
}

// SetConnections makes the AMQP server's open connections, sessions and
// links visible to scrapes.
func (m *Metrics) SetConnections(stats func() transport.Stats) {
	m.amqp.Store(&statsSource{stats: stats})
}

var (
	descMessages = prometheus.NewDesc("walbus_queue_messages",
		"Messages in a queue or its dead-letter subqueue, by state.", []string{"entity", "subqueue", "state"}, nil)
	descLogBytes = prometheus.NewDesc("walbus_entity_log_bytes",
		"Bytes of the entity's log segments and compaction archives on disk.", []string{"entity"}, nil)
	descSent = prometheus.NewDesc("walbus_messages_sent_total",
		"Messages stored (enqueued or scheduled).", []string{"entity"}, nil)
	descDelivered = prometheus.NewDesc("walbus_messages_delivered_total",
		"Messages handed to receivers (locked, or received and deleted).", []string{"entity"}, nil)
	descCompleted = prometheus.NewDesc("walbus_messages_completed_total",
		"Messages completed.", []string{"entity"}, nil)
	descAbandoned = prometheus.NewDesc("walbus_messages_abandoned_total",
		"Messages abandoned.", []string{"entity"}, nil)
	descDeadLettered = prometheus.NewDesc("walbus_messages_dead_lettered_total",
		"Messages dead-lettered, by reason (the broker's own reasons, or client).", []string{"entity", "reason"}, nil)
	descExpired = prometheus.NewDesc("walbus_messages_expired_total",
		"Messages dropped when their time to live ran out.", []string{"entity"}, nil)
	descDeleted = prometheus.NewDesc("walbus_messages_deleted_total",
		"Messages removed unread by batch deletes (purges).", []string{"entity"}, nil)
	descLockLost = prometheus.NewDesc("walbus_lock_lost_total",
		"Settlements and lock renewals refused because the lock was gone.", []string{"entity"}, nil)
	descLockExpired = prometheus.NewDesc("walbus_locks_expired_total",
		"Message locks that ran out.", []string{"entity"}, nil)
	subLabels       = []string{"entity", "subscription"}
	descSubMessages = prometheus.NewDesc("walbus_subscription_messages",
		"Messages in a topic's subscription or its dead-letter subqueues, by state.",
		[]string{"entity", "subscription", "subqueue", "state"}, nil)
	descSubEnqueued = prometheus.NewDesc("walbus_subscription_enqueued_total",
		"Messages a subscription's rules gave it (each rule action's copy counts).", subLabels, nil)
	descSubDelivered = prometheus.NewDesc("walbus_subscription_delivered_total",
		"Messages of a subscription handed to receivers.", subLabels, nil)
	descSubCompleted = prometheus.NewDesc("walbus_subscription_completed_total",
		"Messages of a subscription completed.", subLabels, nil)
	descSubAbandoned = prometheus.NewDesc("walbus_subscription_abandoned_total",
		"Messages of a subscription abandoned.", subLabels, nil)
	descSubDeadLettered = prometheus.NewDesc("walbus_subscription_dead_lettered_total",
		"Messages moved to a subscription's dead-letter queue (its filters' failures included).", subLabels, nil)
	descSubExpired = prometheus.NewDesc("walbus_subscription_expired_total",
		"Messages of a subscription dropped when their time to live ran out.", subLabels, nil)
	descDiskFree        = prometheus.NewDesc("walbus_disk_free_bytes", "Free bytes in the data directory's file system, at the last check.", nil, nil)
	descDiskReserve     = prometheus.NewDesc("walbus_disk_reserve_bytes", "The emergency disk reserve's size (--disk-reserve).", nil, nil)
	descDiskReserveHeld = prometheus.NewDesc("walbus_disk_reserve_held", "1 while the reserve file is in place, 0 once given back.", nil, nil)
	descDiskLow         = prometheus.NewDesc("walbus_disk_low", "1 while new messages are refused for lack of disk space.", nil, nil)
	descConns           = prometheus.NewDesc("walbus_connections_open", "Open AMQP connections.", nil, nil)
	descSessions        = prometheus.NewDesc("walbus_sessions_open", "Open AMQP sessions.", nil, nil)
	descLinks           = prometheus.NewDesc("walbus_links_open", "Attached AMQP links.", nil, nil)
)

// entityCollector reads every entity at scrape time.
type entityCollector struct{ m *Metrics }

func (c entityCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descMessages, descLogBytes, descSent, descDelivered, descCompleted,
		descAbandoned, descDeadLettered, descExpired, descDeleted, descLockLost, descLockExpired, descConns, descSessions, descLinks,
		descDiskFree, descDiskReserve, descDiskReserveHeld, descDiskLow,
		descSubMessages, descSubEnqueued, descSubDelivered, descSubCompleted, descSubAbandoned, descSubDeadLettered, descSubExpired} {
		ch <- d
	}
}

func (c entityCollector) Collect(ch chan<- prometheus.Metric) {
	if src := c.m.amqp.Load(); src != nil {
		s := src.stats()
		ch <- prometheus.MustNewConstMetric(descConns, prometheus.GaugeValue, float64(s.Connections))
		ch <- prometheus.MustNewConstMetric(descSessions, prometheus.GaugeValue, float64(s.Sessions))
		ch <- prometheus.MustNewConstMetric(descLinks, prometheus.GaugeValue, float64(s.Links))
	}
	b := c.m.broker.Load()
	if b == nil {
		return
	}
	d := b.Disk()
	ch <- prometheus.MustNewConstMetric(descDiskFree, prometheus.GaugeValue, float64(d.Free))
	ch <- prometheus.MustNewConstMetric(descDiskReserve, prometheus.GaugeValue, float64(d.Reserve))
	ch <- prometheus.MustNewConstMetric(descDiskReserveHeld, prometheus.GaugeValue, boolValue(d.ReserveHeld))
	ch <- prometheus.MustNewConstMetric(descDiskLow, prometheus.GaugeValue, boolValue(d.Low))
	entities := b.Entities()
	var wg sync.WaitGroup
	for _, e := range entities {
		wg.Add(1)
		go func() { // entities answer in parallel; each asks its own actor
			defer wg.Done()
			collectEntity(ch, e)
		}()
	}
	wg.Wait()
}

// subqueues are the queues of a group (a queue's, or a subscription's) as
// the subqueue label names them.
var subqueues = []struct {
	offset uint32
	label  string
}{{0, "active"}, {1, "deadletter"}, {2, "transferdeadletter"}}

// states are a queue's message counts as the state label names them.
func states(c broker.Counts) map[string]uint64 {
	return map[string]uint64{"available": c.Available, "locked": c.Locked, "deferred": c.Deferred, "scheduled": c.Scheduled}
}

// collectSubscriptions reports each subscription of topic e.
func collectSubscriptions(ch chan<- prometheus.Metric, e *broker.Entity) {
	subs, err := e.Subscriptions()
	if err != nil {
		return
	}
	name := e.Name()
	for _, sub := range subs {
		for _, sq := range subqueues {
			c, err := e.Counts(sub.Queue + sq.offset)
			if err != nil {
				return
			}
			for state, n := range states(c) {
				ch <- prometheus.MustNewConstMetric(descSubMessages, prometheus.GaugeValue, float64(n), name, sub.Name, sq.label, state)
			}
		}
		s := e.SubscriptionStats(sub.Queue)
		for d, v := range map[*prometheus.Desc]uint64{descSubEnqueued: s.Enqueued, descSubDelivered: s.Delivered,
			descSubCompleted: s.Completed, descSubAbandoned: s.Abandoned, descSubDeadLettered: s.DeadLettered, descSubExpired: s.Expired} {
			ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), name, sub.Name)
		}
	}
}

func collectEntity(ch chan<- prometheus.Metric, e *broker.Entity) {
	name := e.Name()
	if e.IsTopic() {
		collectSubscriptions(ch, e)
	}
	for _, sub := range []struct {
		queue uint32
		label string
	}{{broker.MainQueue, "active"}, {broker.DeadLetterQueue, "deadletter"}, {broker.TransferDeadLetterQueue, "transferdeadletter"}} {
		c, err := e.Counts(sub.queue)
		if err != nil {
			return
		}
		for state, n := range map[string]uint64{"available": c.Available, "locked": c.Locked,
			"deferred": c.Deferred, "scheduled": c.Scheduled} {
			ch <- prometheus.MustNewConstMetric(descMessages, prometheus.GaugeValue, float64(n), name, sub.label, state)
		}
	}
	ch <- prometheus.MustNewConstMetric(descLogBytes, prometheus.GaugeValue, float64(e.Bytes()), name)
	s := e.Stats()
	for d, v := range map[*prometheus.Desc]uint64{descSent: s.Sent, descDelivered: s.Delivered, descCompleted: s.Completed,
		descAbandoned: s.Abandoned, descExpired: s.Expired, descDeleted: s.Deleted, descLockLost: s.LockLost, descLockExpired: s.LockExpired} {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), name)
	}
	for reason, v := range s.DeadLettered {
		ch <- prometheus.MustNewConstMetric(descDeadLettered, prometheus.CounterValue, float64(v), name, reason)
	}
}

func boolValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
