package main

import (
	"cmp"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"syscall"
	"time"

	"github.com/walbus/walbus/admin"
	"github.com/walbus/walbus/admin/emuconfig"
	"github.com/walbus/walbus/amqpserver"
	"github.com/walbus/walbus/amqpserver/sas"
	"github.com/walbus/walbus/amqpserver/transport"
	"github.com/walbus/walbus/broker"
	"github.com/walbus/walbus/log"
	"github.com/walbus/walbus/tools"
)

// The emulator's defaults, so its connection strings work unchanged.
const (
	defaultKeyName = "RootManageSharedAccessKey"
	defaultKey     = "SAS_KEY_VALUE"
)

// serveOptions are the serve command's flags.
type serveOptions struct {
	data, amqpAddr, amqpsAddr, httpAddr, tlsCert, tlsKey, config string
	sync, logLevel, logFormat, keysFile                          string
	syncInterval                                                 time.Duration
	keys                                                         keyFlags
	noDefaultKey, httpTLS, pprof, repair, testClock              bool
	limits                                                       transport.Config
	admission                                                    transport.AdmissionLimits
	maxFrameSize, maxMessageSize                                 int
	segmentSize, cacheSize, compactBytes, snapshotEvery          int
	autoDeleteScale                                              int
	diskReserve                                                  int
	memoryBudget                                                 int
	procs                                                        int // 0: the runtime's default
	authTimeout                                                  time.Duration
	sessionWait                                                  time.Duration
	shutdownTimeout, idleCheckpoint                              time.Duration
	cluster                                                      clusterOptions
}

// keyFlags collects repeated --key NAME=VALUE[:Rights] flags.
type keyFlags []sas.Key

func (k *keyFlags) String() string { return fmt.Sprint(len(*k), " keys") }

func (k *keyFlags) Set(s string) error {
	name, rest, ok := strings.Cut(s, "=")
	if !ok || name == "" || rest == "" {
		return errors.New("want NAME=KEY or NAME=KEY:Rights (rights: Send, Listen, Manage, comma separated)")
	}
	value, rightsText, hasRights := strings.Cut(rest, ":")
	rights := sas.Manage
	if hasRights {
		r, err := sas.ParseRights(rightsText)
		if err != nil {
			return err
		}
		rights = r
	}
	*k = append(*k, sas.Key{Name: name, Value: value, Rights: rights})
	return nil
}

func serveFlags(o *serveOptions) *flag.FlagSet {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.StringVar(&o.data, "data", "./data", "data directory")
	fs.StringVar(&o.amqpAddr, "amqp", "127.0.0.1:5672", "AMQP listen address (plain TCP, as the emulator); empty to disable")
	fs.StringVar(&o.amqpsAddr, "amqps", "", "AMQP over TLS listen address, e.g. 127.0.0.1:5671 (needs --tls-cert and --tls-key; it serves HTTPS too)")
	fs.StringVar(&o.tlsCert, "tls-cert", "", "TLS certificate file (PEM), for --amqps and HTTPS")
	fs.StringVar(&o.tlsKey, "tls-key", "", "TLS private key file (PEM)")
	fs.StringVar(&o.httpAddr, "http", "127.0.0.1:5300", "HTTP listen address for /health, /metrics and the administration API (every listener serves AMQP and HTTP alike); empty to disable")
	fs.BoolVar(&o.pprof, "pprof", false, "also serve Go's profiler at /debug/pprof/ on --http (for performance work)")
	fs.BoolVar(&o.testClock, "test-clock", false, "run on a clock tests can move ahead: POST /$test/clock?advance=24h (a Manage key from other than loopback)")
	fs.BoolVar(&o.repair, "repair", false, "start even if a log's last segment is damaged, cutting it at the damage: the records from there on are lost (walbus verify shows what they are)")
	fs.BoolVar(&o.httpTLS, "http-tls", false, "insist on --tls-cert and --tls-key for --http (with a certificate every listener takes TLS anyway)")
	fs.StringVar(&o.config, "config", "", "emulator Config.json: entities to create if they do not exist")
	fs.StringVar(&o.sync, "sync", "always", "fsync policy: always (nothing acknowledged before fsync), interval, or none (unsafe)")
	fs.DurationVar(&o.syncInterval, "sync-interval", 10*time.Millisecond, "longest wait between fsyncs with --sync interval, and for lock records (whose loss means only a redelivery) with --sync always")
	fs.StringVar(&o.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	fs.StringVar(&o.logFormat, "log-format", "text", "log format: text or json")
	fs.StringVar(&o.keysFile, "keys", "", `JSON file of extra SAS keys: [{"name": "...", "key": "...", "rights": "Send,Listen"}]`)
	fs.Var(&o.keys, "key", "an extra SAS key, NAME=KEY or NAME=KEY:Rights (repeatable)")
	fs.BoolVar(&o.noDefaultKey, "no-default-key", false, "do not accept the emulator's default key "+defaultKeyName)
	o.maxFrameSize, o.maxMessageSize = 256<<10, 1<<20
	fs.IntVar(&o.limits.MaxConnections, "max-connections", 10000, "most AMQP connections at once")
	fs.DurationVar(&o.admission.HandshakeTimeout, "handshake-timeout", 10*time.Second, "close a connection not authorized this long after it was accepted (AMQP: a CBS token or SASL PLAIN; HTTP: its request line)")
	fs.IntVar(&o.admission.MaxPending, "max-pending-connections", 1000, "most connections accepted and not yet authorized, on all listeners; 0 no limit")
	fs.IntVar(&o.admission.MaxPendingPerAddress, "max-pending-per-address", 100, "most connections from one source address not yet authorized; 0 no limit")
	fs.IntVar(&o.admission.MaxPerAddress, "max-connections-per-address", 2000, "most connections from one source address, authorized or not; 0 no limit")
	fs.IntVar(&o.limits.MaxSessions, "max-sessions", 1024, "most sessions per connection (channel-max + 1)")
	fs.IntVar(&o.limits.MaxLinksPerSession, "max-links", 1024, "most links per session (handle-max + 1)")
	fs.Var(byteSize{&o.maxFrameSize}, "max-frame-size", "largest AMQP frame, e.g. 256KiB")
	o.segmentSize, o.cacheSize, o.compactBytes = log.DefaultSegmentSize, 8<<20, 64<<20
	fs.Var(byteSize{&o.cacheSize}, "cache-size", "each queue's own cap on recent messages kept in memory, e.g. 8MiB (older ones are read from the log); 0 none but --memory-budget")
	o.memoryBudget = defaultMemoryBudget()
	fs.Var(byteSize{&o.memoryBudget}, "memory-budget", "recent messages kept in memory by all queues together, e.g. 512MiB (least recently used go first, each queue's next deliveries last); the Go runtime's memory limit is set from it (GOMEMLIMIT wins) so that resident memory stays under twice it plus 256MiB; 0 no budget and no limit; default a quarter of the machine's memory, at most 512MiB")
	fs.Var(byteSize{&o.segmentSize}, "segment-size", "size at which a log segment file is closed and the next begins, e.g. 4MiB")
	o.diskReserve = broker.DefaultDiskReserve
	fs.Var(byteSize{&o.diskReserve}, "disk-reserve", "emergency disk space kept in a file in --data: when free space falls under it, or a write fails for space, the file goes, new messages are refused and receives, settlements and deletes go on; at three times it free again the file comes back and sends are taken; 0 no reserve")
	fs.Var(byteSize{&o.compactBytes}, "compact-bytes", "compact an entity's log while serving once its old messages (dead-lettered, deferred, held by an unread subscription) keep at least this much log that would otherwise go, and twice what they take: they move to an archive and the log is cut; 0 never")
	fs.IntVar(&o.autoDeleteScale, "test-auto-delete-scale", 1, "for tests only: divide every AutoDeleteOnIdle by this, so that Service Bus's 5-minute minimum takes seconds")
	fs.IntVar(&o.snapshotEvery, "snapshot-every", 200_000, "events between an entity's snapshots (one is also taken after 256MiB of log)")
	fs.Var(byteSize{&o.maxMessageSize}, "max-message-size", "largest message a link carries, e.g. 1MiB (up to 100MiB; entities may be lower)")
	fs.DurationVar(&o.limits.IdleTimeout, "idle-timeout", 60*time.Second, "close connections silent this long (half is advertised)")
	fs.DurationVar(&o.authTimeout, "auth-timeout", 20*time.Second, "close connections that authorise nothing within this time")
	fs.DurationVar(&o.sessionWait, "session-wait", time.Minute, "how long a receiver for the next available session waits for one when its client names no com.microsoft:timeout (the Python SDK 7.8 names none)")
	fs.DurationVar(&o.idleCheckpoint, "idle-checkpoint", 10*time.Second, "after this long without activity, a queue whose log holds records it no longer needs snapshots itself so that they can be deleted, and once the whole broker is that quiet it returns the memory it freed to the system; 0 never")
	fs.DurationVar(&o.shutdownTimeout, "shutdown-timeout", 30*time.Second, "longest graceful shutdown before exiting anyway")
	o.cluster.flags(fs)
	fs.Var(procsFlag{&o.procs}, "procs", "GOMAXPROCS for the broker, over the environment's: a number, or auto (one while the broker uses well under a core of CPU, the runtime's default when it needs more: less CPU per message, slower at moderate fixed rates); default the runtime's choice")
	return fs
}

// serveUsage prints the serve command's help.
func serveUsage(w io.Writer) {
	fs := serveFlags(&serveOptions{})
	fs.SetOutput(w)
	fmt.Fprint(w, `Usage: walbus serve [flags]

Runs the broker: AMQP 1.0 for the Azure Service Bus SDKs, HTTP for /health
and /metrics. Every flag can also be set with an environment variable:
WALBUS_ and the flag name in capitals with - as _, e.g. WALBUS_MAX_FRAME_SIZE.

Connect with the emulator's connection string:
  Endpoint=sb://127.0.0.1:5672;SharedAccessKeyName=RootManageSharedAccessKey;SharedAccessKey=SAS_KEY_VALUE;UseDevelopmentEmulator=true

Flags:
`)
	fs.PrintDefaults()
}

// byteSize is a flag of a size like 256KiB, 1MiB or 4096.
type byteSize struct{ v *int }

func (b byteSize) String() string {
	if b.v == nil {
		return ""
	}
	for _, u := range []struct {
		suffix string
		size   int
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if *b.v >= u.size && *b.v%u.size == 0 {
			return fmt.Sprint(*b.v/u.size, u.suffix)
		}
	}
	return fmt.Sprint(*b.v)
}

func (b byteSize) Set(s string) error {
	n, err := parseSize(s)
	if err != nil {
		return err
	}
	*b.v = n
	return nil
}

func parseSize(s string) (int, error) {
	orig := s
	units := []struct {
		suffix string
		mult   int
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}, {"GB", 1e9}, {"MB", 1e6}, {"KB", 1e3}, {"B", 1}}
	mult := 1
	for _, u := range units {
		if strings.HasSuffix(s, u.suffix) {
			s, mult = strings.TrimSuffix(s, u.suffix), u.mult
			break
		}
	}
	var n int
	if _, err := fmt.Sscanf(s, "%d", &n); err != nil || n < 0 || fmt.Sprint(n) != s {
		return 0, fmt.Errorf("not a size: want a number of bytes, optionally with KiB, MiB or GiB")
	}
	if n > math.MaxInt/mult {
		return 0, fmt.Errorf("not a size: %q is too large", orig)
	}
	return n * mult, nil
}

// parseServe reads the serve flags, then WALBUS_* variables for flags not
// given on the command line. Errors are the user's: exit status 2.
func parseServe(args []string) (*serveOptions, error) {
	o := &serveOptions{}
	fs := serveFlags(o)
	fs.SetOutput(io.Discard) // errors are reported once, by the caller
	fs.Usage = func() {}
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	var envErr error
	fs.VisitAll(func(f *flag.Flag) {
		env := "WALBUS_" + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
		if v, ok := os.LookupEnv(env); ok && !set[f.Name] && envErr == nil {
			if err := fs.Set(f.Name, v); err != nil {
				envErr = fmt.Errorf("invalid value %q for %s: %v", v, env, err)
			}
		}
	})
	if envErr != nil {
		return nil, envErr
	}
	if _, err := log.ParseSyncPolicy(o.sync); err != nil {
		return nil, err
	}
	if _, err := parseLevel(o.logLevel); err != nil {
		return nil, err
	}
	if o.logFormat != "text" && o.logFormat != "json" {
		return nil, fmt.Errorf("unknown log format %q (want text or json)", o.logFormat)
	}
	if (o.amqpsAddr != "" || o.httpTLS) && (o.tlsCert == "" || o.tlsKey == "") {
		return nil, errors.New("--amqps and --http-tls need --tls-cert and --tls-key")
	}
	if o.maxMessageSize > 100<<20 || o.maxMessageSize < 1 {
		return nil, errors.New("--max-message-size is 1 byte to 100MiB")
	}
	if o.idleCheckpoint < 0 {
		return nil, errors.New("--idle-checkpoint cannot be negative")
	}
	if o.sessionWait <= 0 {
		return nil, errors.New("--session-wait must be positive")
	}
	if o.cacheSize < 0 {
		return nil, errors.New("--cache-size cannot be negative")
	}
	if o.compactBytes < 0 {
		return nil, errors.New("--compact-bytes cannot be negative")
	}
	if o.snapshotEvery < 1 {
		return nil, errors.New("--snapshot-every must be positive")
	}
	if o.segmentSize < 4<<10 || o.segmentSize > 1<<30 {
		return nil, errors.New("--segment-size is 4KiB to 1GiB")
	}
	if o.maxFrameSize < 512 || o.maxFrameSize > 1<<30 {
		return nil, errors.New("--max-frame-size is 512 bytes to 1GiB")
	}
	o.limits.MaxFrameSize, o.limits.MaxMessageSize = uint32(o.maxFrameSize), uint64(o.maxMessageSize)
	return o, nil
}

func parseLevel(s string) (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(s)); err != nil {
		return 0, fmt.Errorf("unknown log level %q (want debug, info, warn or error)", s)
	}
	return l, nil
}

// loadKeys assembles the SAS keys, in this order: the default (unless
// refused), the keys file and --key flags.
func loadKeys(o *serveOptions) ([]sas.Key, error) {
	var all []sas.Key
	if !o.noDefaultKey {
		all = append(all, sas.Key{Name: defaultKeyName, Value: defaultKey, Rights: sas.Manage})
	}
	if o.keysFile != "" {
		b, err := os.ReadFile(o.keysFile)
		if err != nil {
			return nil, err
		}
		var entries []struct{ Name, Key, Rights string }
		if err := json.Unmarshal(b, &entries); err != nil {
			return nil, fmt.Errorf("%s: %w", o.keysFile, err)
		}
		for _, en := range entries {
			rights, err := sas.ParseRights(en.Rights)
			if err != nil {
				return nil, fmt.Errorf("%s: key %q: %w", o.keysFile, en.Name, err)
			}
			all = append(all, sas.Key{Name: en.Name, Value: en.Key, Rights: rights})
		}
	}
	all = append(all, o.keys...)
	if len(all) == 0 {
		return nil, errors.New("no keys: give --key or --keys, or allow the default key")
	}
	return all, nil
}

// relayKey is the key a cluster's node passes links on to an entity's
// leader with (amqpserver.Config.RelayKey): the first of keys that has
// Manage rights, as every node is given the same keys.
func relayKey(keys []sas.Key) (sas.Key, bool) {
	for _, k := range keys {
		if k.Rights.Has(sas.Manage) {
			return k, true
		}
	}
	return sas.Key{}, false
}

func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// serve runs the broker until SIGINT or SIGTERM. A second signal exits at
// once: the log is the truth, so that is still safe.
func serve(args []string) int {
	o, err := parseServe(args)
	if errors.Is(err, flag.ErrHelp) {
		serveUsage(os.Stdout)
		return 0
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "walbus serve: %v\nRun 'walbus serve --help' for the flags.\n", err)
		return 2
	}
	tuneGC()
	memLimit := limitMemory(o.memoryBudget)
	level, _ := parseLevel(o.logLevel)
	var handler slog.Handler = slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level})
	if o.logFormat == "json" {
		handler = slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: level})
	}
	logger := slog.New(handler)
	keyList, err := loadKeys(o)
	var keys sas.Keys
	if err == nil {
		keys, err = sas.NewKeys(keyList...)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "walbus serve:", err)
		return 2
	}
	if !o.noDefaultKey {
		for _, addr := range []string{o.amqpAddr, o.amqpsAddr} {
			if addr != "" && !isLoopback(addr) {
				logger.Warn("the emulator's default key is accepted on a non-loopback address; anyone who can reach it can use the broker",
					"addr", addr, "key", defaultKeyName)
			}
		}
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	health := &admin.Health{}
	metrics := admin.NewMetrics()
	tlsCfg, err := serverTLS(o)
	if err != nil {
		logger.Error("cannot load the TLS certificate", "err", err)
		return 1
	}
	// Every listener serves AMQP and HTTP (the administration API, /health,
	// /metrics), over TLS too when walbus has a certificate: the Go admin
	// client dials https:// on the AMQP endpoint's own port.
	var api, ws admin.Later
	httpHandler := admin.Handler(health, metrics, &api)
	httpHandler = withWebSockets(httpHandler, &ws)
	if o.pprof {
		httpHandler = withProfiler(httpHandler)
	}
	// One admission for every listener: the pending limit is the broker's.
	o.admission.Flags = [...]string{transport.LimitPending: "--max-pending-connections",
		transport.LimitPendingPerAddress: "--max-pending-per-address", transport.LimitPerAddress: "--max-connections-per-address"}
	adm := transport.NewAdmission(o.admission, logger)
	metrics.SetAdmission(adm)
	o.limits.HandshakeTimeout = o.admission.HandshakeTimeout
	httpSrv := &http.Server{Handler: httpHandler, ReadHeaderTimeout: cmp.Or(o.admission.HandshakeTimeout, 10*time.Second),
		ConnContext: admin.ConnContext}
	var splits []*transport.Split
	defer func() {
		for _, sp := range splits {
			sp.Close()
		}
	}()
	var httpBound string // the address --http listens at, its port chosen if --http named 0
	if o.httpAddr != "" {
		ln, err := net.Listen("tcp", o.httpAddr)
		if err != nil {
			logger.Error("cannot listen for HTTP", "addr", o.httpAddr, "err", err)
			return 1
		}
		sp := transport.NewSplit(ln, tlsCfg, adm, logger)
		splits = append(splits, sp)
		go httpSrv.Serve(sp.HTTP())
		httpBound = ln.Addr().String()
		logger.Info("listening", "http", ln.Addr().String())
	}

	// The AMQP listeners are bound before the cluster starts, which
	// advertises the address they took; they are served once the broker
	// is open.
	httpSplits := splits // the HTTP listener serves AMQP too
	more, err := listenAMQP(o, tlsCfg, adm, logger)
	if err != nil {
		logger.Error("cannot listen for AMQP", "err", err)
		return 1
	}
	splits = append(splits, more...)

	var cluster *clusterNode
	var brokerCluster *broker.Cluster
	if o.cluster.on() {
		cfg, err := o.cluster.resolve()
		if err != nil {
			fmt.Fprintf(os.Stderr, "walbus serve: %v\n", err)
			return 2
		}
		if err := cfg.learn(o.data, logger); err != nil {
			logger.Error("cannot read the nodes added to the cluster", "err", err)
			return 1
		}
		self := advertised{HTTP: cfg.httpURL(o.httpAddr, httpBound, tlsCfg != nil)}
		if len(more) > 0 { // --amqp's, or else --amqps's
			self.AMQP = cfg.amqpURL(cmp.Or(o.amqpAddr, o.amqpsAddr), more[0].AMQP().Addr().String(), tlsCfg != nil)
		}
		if cluster, brokerCluster, err = startCluster(cfg, o.cluster.tick, self, logger); err != nil {
			logger.Error("cannot start the cluster's transport", "err", err)
			return 1
		}
		cluster.dir, brokerCluster.Join = o.data, o.cluster.join
		brokerCluster.OnPeer = cluster.onPeer
		brokerCluster.BalanceEvery = o.cluster.balance
		if o.cluster.balance <= 0 {
			brokerCluster.BalanceEvery = -1
		}
		defer cluster.transport.Close()
		metrics.SetRaftCounters(brokerCluster.Counters)
	}
	policy, _ := log.ParseSyncPolicy(o.sync)
	var release memoryReleaser
	var clock broker.Clock
	if o.testClock {
		clock = broker.NewOffsetClock()
		logger.Warn("the test clock is on: POST /$test/clock moves the broker's time ahead (for tests only)")
	}
	b, rec, err := broker.Open(broker.Options{Clock: clock, Dir: o.data, Sync: policy, SyncInterval: o.syncInterval, SegmentSize: o.segmentSize, CacheBytes: cmp.Or(int64(o.cacheSize), -1), Logger: logger,
		Repair: o.repair, IdleCheckpoint: cmp.Or(o.idleCheckpoint, -1), CompactBytes: cmp.Or(int64(o.compactBytes), -1),
		SnapshotEvery: o.snapshotEvery, AutoDeleteScale: o.autoDeleteScale, DiskReserve: int64(o.diskReserve),
		MemoryBudget: int64(o.memoryBudget), NewBracket: amqpserver.NewBracket, FilterMessage: amqpserver.FilterMessage,
		OnCommit: func(entity string, s log.CommitStats) {
			release.touch()
			metrics.ObserveCommit(entity, s)
		},
		OnSnapshot: metrics.ObserveSnapshot, OnFirstDelivery: metrics.ObserveFirstDelivery, Cluster: brokerCluster})
	if err != nil {
		logger.Error("cannot start", "err", err)
		fileLimitHint(logger, err)
		if errors.Is(err, log.ErrCorrupt) {
			logger.Error("a log is damaged where records follow: `walbus verify --data " + o.data + "` shows what reads back; " +
				"`walbus serve --repair` starts by cutting the log at the damage, losing the records from there on")
		}
		return 1
	}
	metrics.ObserveRecovery(rec)
	metrics.SetBroker(b)
	if cluster != nil {
		cluster.broker.Store(b)
		health.SetCluster(func() admin.ClusterStatus { return cluster.status(b) })
	}
	metrics.SetCacheStats(b.CacheStats)
	health.SetDegraded(func() string {
		if d := b.Disk(); d.Low {
			return "disk low: new messages are refused (" + d.Reason + ")"
		}
		return ""
	})
	logger.Info("recovered", "entities", len(rec.Entities), "took", rec.Took, "data", o.data, "sync", policy.String())
	logger.Info("memory budget", "budget", byteSize{&o.memoryBudget}.String(), "go_memory_limit", memoryLimitText(memLimit))
	if o.config != "" && cluster != nil {
		if _, err := emuconfig.Load(o.config); err != nil {
			logger.Error("bad config", "err", err)
			b.Close()
			return 2
		}
		go applyClusterConfig(ctx, b, o.config, o.limits.MaxMessageSize, logger)
	} else if o.config != "" {
		if err := applyConfig(b, o.config, o.limits.MaxMessageSize, logger); err != nil {
			logger.Error("bad config", "err", err)
			fileLimitHint(logger, err)
			b.Close()
			return 2
		}
	}

	amqpCfg := amqpserver.Config{Keys: keys, Logger: logger, AuthTimeout: o.authTimeout,
		SessionWait: o.sessionWait, Transport: withNoSASL(o.limits)}
	if cluster != nil {
		if key, ok := relayKey(keyList); ok {
			amqpCfg.Leader, amqpCfg.RelayKey = cluster.amqpAddr, key
		} else {
			logger.Warn("no key has Manage rights: AMQP clients must connect to the node that leads their entity")
		}
	}
	srv := amqpserver.New(b, amqpCfg)
	metrics.SetConnections(srv.Stats)
	adminAPI := admin.NewAPI(b, keys, int(o.limits.MaxMessageSize), logger)
	if cluster != nil {
		adminAPI.Cluster = cluster
		adminAPI.Forward = cluster.nodeURL
		adminAPI.Node = cluster.cfg.node
	}
	adminAPI.Audit = func(entity string, seq uint64) (any, error) {
		// The live log, read as walbus audit reads a stopped one.
		return tools.Audit(o.data, entity, tools.AuditOptions{Seq: seq})
	}
	api.Set(adminAPI)
	ws.Set(transport.WebSocketHandler(srv.ServeConn, logger))
	for _, sp := range httpSplits {
		go srv.Serve(sp.AMQP()) // AMQP on the HTTP listener
	}
	for _, sp := range more {
		go srv.Serve(sp.AMQP())
		go httpSrv.Serve(sp.HTTP())
	}
	health.SetEntities(b.EntityCount) // a cluster's, and the API's, come and go
	health.Ready(len(b.Entities()))
	tuneProcs(ctx, o.procs, logger)
	if o.idleCheckpoint > 0 {
		go release.run(ctx, o.idleCheckpoint, debug.FreeOSMemory)
	}

	<-ctx.Done()
	stop() // a second signal now ends the process at once
	go func() {
		second := make(chan os.Signal, 1)
		signal.Notify(second, os.Interrupt, syscall.SIGTERM)
		<-second
		logger.Warn("second signal: exiting now")
		os.Exit(1)
	}()
	logger.Info("shutting down")
	health.Stopping()
	for _, sp := range splits {
		sp.Close()
	}
	shutdown, cancel := context.WithTimeout(context.Background(), o.shutdownTimeout)
	defer cancel()
	srv.Shutdown(shutdown)
	done := make(chan error, 1)
	go func() { done <- b.Close() }()
	select {
	case err := <-done:
		if err != nil {
			logger.Error("shutdown", "err", err)
			return 1
		}
	case <-shutdown.Done():
		logger.Error("shutdown took too long; exiting (the log keeps everything acknowledged)")
		return 1
	}
	httpSrv.Shutdown(shutdown)
	logger.Info("stopped")
	return 0
}

// withWebSockets serves AMQP over WebSockets at transport.WebSocketPath
// with ws, and everything else with next.
func withWebSockets(next, ws http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// uAMQP (the Python SDK 7.8) asks for the path with a trailing slash.
		if strings.TrimSuffix(r.URL.Path, "/") == transport.WebSocketPath {
			ws.ServeHTTP(w, r)
			return
		}
		next.ServeHTTP(w, r)
	})
}

func withNoSASL(c transport.Config) transport.Config {
	// A JS client given only a SharedAccessSignature skips SASL
	// (docs/compatibility.md §2); it authorises through $cbs like the others.
	c.AllowNoSASL = true
	return c
}

// listenAMQP listens on the AMQP addresses: --amqp, where clients start in
// plain TCP (TLS is taken too when walbus has a certificate), and --amqps.
func listenAMQP(o *serveOptions, tlsCfg *tls.Config, adm *transport.Admission, logger *slog.Logger) ([]*transport.Split, error) {
	var splits []*transport.Split
	for _, l := range []struct{ name, addr string }{{"amqp", o.amqpAddr}, {"amqps", o.amqpsAddr}} {
		if l.addr == "" {
			continue
		}
		ln, err := net.Listen("tcp", l.addr)
		if err != nil {
			for _, sp := range splits {
				sp.Close()
			}
			return nil, err
		}
		splits = append(splits, transport.NewSplit(ln, tlsCfg, adm, logger))
		logger.Info("listening", l.name, ln.Addr().String())
	}
	return splits, nil
}

// fileLimitHint explains an error that ran out of file descriptors: each
// entity keeps its open log segment, and each connection its socket, so
// many queues need a higher limit than a shell's usual 1024.
func fileLimitHint(logger *slog.Logger, err error) {
	if !errors.Is(err, syscall.EMFILE) && !errors.Is(err, syscall.ENFILE) {
		return
	}
	var lim syscall.Rlimit
	_ = syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim)
	logger.Error("out of file descriptors: walbus keeps one file open for each queue and one for each connection; "+
		"raise the limit (ulimit -n, or LimitNOFILE= in a systemd unit)", "limit", lim.Cur)
}
