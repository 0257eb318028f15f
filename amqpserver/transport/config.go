package transport

import (
	"log/slog"
	"time"

	"github.com/walbus/walbus/amqpserver/encoding"
	"github.com/walbus/walbus/amqpserver/frames"
)

// SASL mechanisms the engine understands (AMQP 1.0 §5.3.3, RFC 4505,
// RFC 4616). MSSBCBS is Microsoft's "a CBS token will follow" mechanism and
// is treated like ANONYMOUS.
const (
	MechanismAnonymous = "ANONYMOUS"
	MechanismPlain     = "PLAIN"
	MechanismMSSBCBS   = "MSSBCBS"
)

// Limits and defaults. The frame and message bounds come from the brief
// and the Service Bus tiers (docs/compatibility.md §2, "Limits").
const (
	DefaultMaxConnections     = 10000
	DefaultMaxSessions        = 1024
	DefaultMaxLinksPerSession = 1024
	DefaultMaxFrameSize       = 256 << 10
	DefaultMaxMessageSize     = 1 << 20
	MaxMessageSizeLimit       = 100 << 20
	DefaultLinkCredit         = 1000
	DefaultIdleTimeout        = 60 * time.Second
	DefaultHandshakeTimeout   = 30 * time.Second
	DefaultWriteTimeout       = 30 * time.Second
	DefaultCloseTimeout       = 5 * time.Second
	DefaultContainerID        = "walbus"
)

// Config holds the server's limits. The zero value of every field means
// its default; Server applies them once with withDefaults.
type Config struct {
	// MaxConnections bounds concurrently open connections. A connection
	// beyond it completes the handshake and is then closed with
	// amqp:resource-limit-exceeded, so clients see a reason.
	MaxConnections int
	// MaxSessions bounds the sessions of one connection, at least 2; open
	// advertises channel-max = MaxSessions-1, never 0 (docs/compatibility.md
	// §2: go-amqp takes the minimum and each SDK client needs several).
	MaxSessions int
	// MaxLinksPerSession bounds the links of one session; begin
	// advertises handle-max = MaxLinksPerSession-1.
	MaxLinksPerSession int
	// MaxFrameSize is the largest frame accepted and sent, at least 512
	// (AMQP 1.0 §2.7.1).
	MaxFrameSize uint32
	// MaxMessageSize is the largest incoming message, after multi-frame
	// reassembly, and the default max-message-size of attach replies. It
	// is capped at MaxMessageSizeLimit.
	MaxMessageSize uint64
	// LinkCredit is the default number of deliveries a peer sender may
	// have outstanding at the handler per link (Reply.Credit overrides).
	LinkCredit uint32
	// IdleTimeout is how long a silent peer is tolerated; open advertises
	// half of it (§2.4.5). Negative disables it.
	IdleTimeout time.Duration
	// HandshakeTimeout bounds the time from accept to the peer's open.
	HandshakeTimeout time.Duration
	// WriteTimeout bounds one socket write; a peer that does not read for
	// that long is dropped.
	WriteTimeout time.Duration
	// CloseTimeout bounds the wait for the peer's close after ours (§2.4.3).
	CloseTimeout time.Duration
	// AllowNoSASL accepts a plain AMQP protocol header without a SASL
	// layer (rhea does this for SharedAccessSignature-only connection
	// strings, docs/compatibility.md §2). The connection's Identity is nil.
	AllowNoSASL bool
	// SASLMechanisms lists the offered mechanisms, most preferred first;
	// nil offers ANONYMOUS, PLAIN and MSSBCBS. Unknown names are dropped.
	SASLMechanisms []string
	// ContainerID is sent in open; go-amqp refuses an open without one.
	ContainerID string
	// Properties are sent in open.
	Properties encoding.Map
	// Logger receives connection-level diagnostics; nil uses slog.Default.
	Logger *slog.Logger
}

// withDefaults returns cfg with every zero field set to its default and
// every out-of-range field clamped.
func (cfg Config) withDefaults() Config {
	if cfg.MaxConnections <= 0 {
		cfg.MaxConnections = DefaultMaxConnections
	}
	cfg.MaxSessions = clampInt(cfg.MaxSessions, DefaultMaxSessions, 2, 1<<16)
	cfg.MaxLinksPerSession = clampInt(cfg.MaxLinksPerSession, DefaultMaxLinksPerSession, 1, 1<<20)
	if cfg.MaxFrameSize == 0 {
		cfg.MaxFrameSize = DefaultMaxFrameSize
	}
	cfg.MaxFrameSize = max(cfg.MaxFrameSize, frames.MinMaxFrameSize)
	if cfg.MaxMessageSize == 0 {
		cfg.MaxMessageSize = DefaultMaxMessageSize
	}
	cfg.MaxMessageSize = min(cfg.MaxMessageSize, MaxMessageSizeLimit)
	if cfg.LinkCredit == 0 {
		cfg.LinkCredit = DefaultLinkCredit
	}
	cfg.IdleTimeout = durationOr(cfg.IdleTimeout, DefaultIdleTimeout)
	cfg.HandshakeTimeout = durationOr(cfg.HandshakeTimeout, DefaultHandshakeTimeout)
	cfg.WriteTimeout = durationOr(cfg.WriteTimeout, DefaultWriteTimeout)
	cfg.CloseTimeout = durationOr(cfg.CloseTimeout, DefaultCloseTimeout)
	if cfg.SASLMechanisms == nil {
		cfg.SASLMechanisms = []string{MechanismAnonymous, MechanismPlain, MechanismMSSBCBS}
	}
	known := make([]string, 0, len(cfg.SASLMechanisms))
	for _, m := range cfg.SASLMechanisms {
		if m == MechanismAnonymous || m == MechanismPlain || m == MechanismMSSBCBS {
			known = append(known, m)
		}
	}
	cfg.SASLMechanisms = known
	if cfg.ContainerID == "" {
		cfg.ContainerID = DefaultContainerID
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return cfg
}

func clampInt(v, def, lo, hi int) int {
	if v == 0 {
		v = def
	}
	return min(max(v, lo), hi)
}

// durationOr maps zero to def and negative to "disabled" (0).
func durationOr(d, def time.Duration) time.Duration {
	switch {
	case d == 0:
		return def
	case d < 0:
		return 0
	}
	return d
}

// offers reports whether mechanism is among the configured ones.
func (cfg *Config) offers(mechanism string) bool {
	for _, m := range cfg.SASLMechanisms {
		if m == mechanism {
			return true
		}
	}
	return false
}
