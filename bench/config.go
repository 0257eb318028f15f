package bench

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Clients and receive modes.
const (
	ClientSDK  = "sdk"  // the official Go SDK, azservicebus
	ClientAMQP = "amqp" // a plain AMQP 1.0 peer, go-amqp

	ModePeekLock         = "peeklock" // lock, then complete
	ModeReceiveAndDelete = "rad"      // the broker deletes on delivery
)

// The Service Bus emulator's key, which walbus serve also accepts: the
// SDK client uses it when --url names no user.
const (
	emulatorKeyName = "RootManageSharedAccessKey"
	emulatorKey     = "SAS_KEY_VALUE"
)

// Config is one bench run.
type Config struct {
	// URL is amqp://[user:pass@]host[:port]; the amqp client authenticates
	// with SASL PLAIN as user, or ANONYMOUS with no user.
	URL string
	// ConnString is a Service Bus connection string. Exactly one of URL
	// and ConnString is used; the other is derived from it.
	ConnString string
	Client     string // ClientSDK or ClientAMQP
	// Queue is the queue to send to and receive from; Topic, the topic to
	// send to, whose Subscriptions each get Receivers receivers. One of
	// the two is set, unless the amqp client has an Address.
	Queue         string
	Topic         string
	Subscriptions []string
	// Address overrides Queue as the AMQP node address (amqp client only),
	// for brokers that name queues differently: "/queue/NAME" on
	// RabbitMQ 4, "/amq/queue/NAME" on RabbitMQ 3. With ReceiveAddresses
	// it is only where senders send.
	Address string
	// ReceiveAddresses (amqp client only) are the nodes receivers attach
	// to, Receivers receivers on each: the queues behind a fan-out that
	// Address names, such as a RabbitMQ fanout exchange's.
	ReceiveAddresses []string

	Mode      string // ModePeekLock or ModeReceiveAndDelete
	Size      int    // body bytes per message
	Senders   int
	Receivers int // on each subscription or receive address
	// Batch is messages per send (SDK message batch) and, unless
	// ReceiveBatch says otherwise, the most messages per SDK receive call.
	Batch        int
	ReceiveBatch int // 0: Batch
	// InFlight is each sender's concurrent sends, each receiver's
	// concurrent completions, and an amqp receiver's link credit.
	InFlight int
	Warmup   time.Duration // run before measuring
	Duration time.Duration // the measured window
	Rate     float64       // total messages a second over all senders; 0 is unpaced
	// BrokerPID is the broker process to watch; 0 looks for the process
	// listening on the target port on this host.
	BrokerPID int
	JSON      bool // output format; Run ignores it
}

// DefaultConfig is the configuration before flags.
func DefaultConfig() Config {
	return Config{
		URL:       "amqp://127.0.0.1:5672",
		Mode:      ModePeekLock,
		Size:      1024,
		Senders:   1,
		Receivers: 1,
		Batch:     1,
		InFlight:  1,
		Warmup:    time.Second,
		Duration:  10 * time.Second,
	}
}

// maxSize bounds --size: Service Bus premium's largest message.
const maxSize = 100 << 20

const usageText = `Usage: walbus bench [flags]

Drives a queue, or a topic and its subscriptions, with senders and
receivers for a while and reports send and receive throughput, end-to-end
latency, the CPU and memory the broker and this client spent per message,
and the bytes the broker wrote to disk per message. Works against walbus, the Service Bus emulator or
Service Bus (--client sdk), and against any AMQP 1.0 broker, RabbitMQ's
AMQP 1.0 support for one (--client amqp). The queue, topic and
subscriptions must exist.
'walbus bench floor --help' describes the do-nothing broker to compare with.

Target:
  --url URL            amqp://[user:pass@]host[:port] (default amqp://127.0.0.1:5672)
  --conn-string STR    a Service Bus connection string instead of --url, e.g.
                       "Endpoint=sb://localhost;SharedAccessKeyName=K;SharedAccessKey=V;UseDevelopmentEmulator=true"
  --client sdk|amqp    sdk: the official Go SDK (azservicebus); amqp: plain go-amqp.
                       Default: amqp when --url is given, sdk otherwise. The sdk
                       client reads the key name and key from --url's user and
                       password (default the emulator's); the amqp client logs in
                       with SASL PLAIN as --url's user, or ANONYMOUS without one
  --queue NAME         the queue (required, unless --topic, or --address
                       with the amqp client)
  --topic NAME         a topic instead of a queue: senders send to it, and
                       --receivers receivers receive from each subscription
  --subscriptions N|a,b,c
                       with --topic: subscriptions s1 to sN, or those listed
  --address ADDR       amqp client: the node address, overriding --queue
                       (RabbitMQ 4: /queue/NAME, RabbitMQ 3: /amq/queue/NAME)
  --receive-addresses a,b,c
                       amqp client: receive from these nodes, --receivers
                       receivers on each, while senders send to --address or
                       --queue; e.g. the queues bound to a fanout exchange
                       (RabbitMQ 3: --address /exchange/X --receive-addresses
                       /amq/queue/Q1,/amq/queue/Q2)

Load:
  --size BYTES         message body size (default 1024)
  --senders N          sending connections (default 1; 0 receives what the
                       queue or subscriptions hold)
  --receivers N        receiving connections (default 1; 0 sends only), on
                       each subscription or receive address
  --batch B            sdk: messages per SendMessageBatch (1: SendMessage) and
                       most messages per ReceiveMessages (default 1)
  --receive-batch B    sdk: most messages per ReceiveMessages, if not --batch
  --in-flight K        sends in flight per sender, completions in flight per
                       receiver, and link credit per amqp receiver (default 1)
  --rate R             total send rate in messages/s, spread evenly over the
                       senders (default 0: as fast as --in-flight allows)
  --mode peeklock|rad  receive with peek-lock and complete (default), or
                       receive-and-delete

Time:
  --warmup D           run this long before measuring (default 1s)
  --duration D         the measured window (default 10s)

Report:
  --broker-pid PID     broker process to measure CPU, RSS and disk writes of
                       (Linux); by default the process listening on the
                       target port, if it runs on this host as this user
  --json               print a JSON object instead of a table

With a topic, or receive addresses, every copy a receiver gets counts as
received: two subscriptions that each get every message receive twice what
was sent. Disk writes are the broker's write_bytes in /proc/PID/io over the
window: what it sent to storage, in pages, not counting the file system's
journal.

Latency is end to end: from the time a message was due to be sent (with
--rate, its scheduled time, so a sender that falls behind shows up as
latency) to its arrival at a receiver, for the messages that arrive after
the warm-up. The send latency is one send call, start to acknowledgement.
On Linux the report also says how busy the whole machine's CPUs were in
the window: latency measured on a machine near its CPU limit is mostly
time spent waiting for a CPU, by the client as much as by the broker.
Ctrl-C ends the run early and reports the window so far. The exit status
is 1 if sends or receives failed in the measured window (or more than a few
times during warm-up), 2 for bad flags.
`

// ParseArgs parses walbus bench's flags into a checked Config. On --help
// it writes the usage to out and returns flag.ErrHelp; on a bad flag it
// writes the problem to out and returns an error.
func ParseArgs(args []string, out io.Writer) (Config, error) {
	cfg := DefaultConfig()
	fs := flag.NewFlagSet("walbus bench", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&cfg.URL, "url", cfg.URL, "")
	fs.StringVar(&cfg.ConnString, "conn-string", "", "")
	fs.StringVar(&cfg.Client, "client", "", "")
	fs.StringVar(&cfg.Queue, "queue", "", "")
	fs.StringVar(&cfg.Topic, "topic", "", "")
	fs.Func("subscriptions", "", func(v string) (err error) {
		cfg.Subscriptions, err = parseSubscriptions(v)
		return err
	})
	fs.StringVar(&cfg.Address, "address", "", "")
	fs.Func("receive-addresses", "", func(v string) (err error) {
		cfg.ReceiveAddresses, err = parseList(v)
		return err
	})
	fs.IntVar(&cfg.Size, "size", cfg.Size, "")
	fs.IntVar(&cfg.Senders, "senders", cfg.Senders, "")
	fs.IntVar(&cfg.Receivers, "receivers", cfg.Receivers, "")
	fs.IntVar(&cfg.Batch, "batch", cfg.Batch, "")
	fs.IntVar(&cfg.ReceiveBatch, "receive-batch", 0, "")
	fs.IntVar(&cfg.InFlight, "in-flight", cfg.InFlight, "")
	fs.Float64Var(&cfg.Rate, "rate", 0, "")
	fs.StringVar(&cfg.Mode, "mode", cfg.Mode, "")
	fs.DurationVar(&cfg.Warmup, "warmup", cfg.Warmup, "")
	fs.DurationVar(&cfg.Duration, "duration", cfg.Duration, "")
	fs.IntVar(&cfg.BrokerPID, "broker-pid", 0, "")
	fs.BoolVar(&cfg.JSON, "json", false, "")
	err := fs.Parse(args)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(out, usageText)
		return Config{}, err
	}
	if err == nil && fs.NArg() > 0 {
		err = fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if err == nil {
		urlSet := false
		fs.Visit(func(f *flag.Flag) { urlSet = urlSet || f.Name == "url" })
		err = cfg.resolve(urlSet)
	}
	if err != nil {
		fmt.Fprintf(out, "walbus bench: %v\nRun 'walbus bench --help' for the flags.\n", err)
		return Config{}, err
	}
	return cfg, nil
}

// resolve fills in the client and the derived target, then checks cfg.
// urlSet says --url was given, not defaulted.
func (c *Config) resolve(urlSet bool) error {
	if urlSet && c.ConnString != "" {
		return errors.New("give --url or --conn-string, not both")
	}
	if c.Client == "" {
		c.Client = ClientSDK
		if urlSet {
			c.Client = ClientAMQP
		}
	}
	return c.Validate()
}

// Validate checks the settings and that they make sense together.
func (c *Config) Validate() error {
	switch {
	case c.Client != ClientSDK && c.Client != ClientAMQP:
		return fmt.Errorf("--client %q: want sdk or amqp", c.Client)
	case c.Mode != ModePeekLock && c.Mode != ModeReceiveAndDelete:
		return fmt.Errorf("--mode %q: want peeklock or rad", c.Mode)
	case c.Queue != "" && c.Topic != "":
		return errors.New("give --queue or --topic, not both")
	case c.Queue == "" && c.Topic == "" && (c.Address == "" || c.Client != ClientAMQP):
		return errors.New("--queue or --topic is required")
	case c.Topic != "" && len(c.Subscriptions) == 0:
		return errors.New("--topic needs --subscriptions: a number, or the names")
	case c.Topic == "" && len(c.Subscriptions) > 0:
		return errors.New("--subscriptions is for --topic")
	case c.Address != "" && c.Client != ClientAMQP:
		return errors.New("--address is for --client amqp; the SDK addresses queues by name")
	case c.Address != "" && c.Topic != "":
		return errors.New("--address is for a queue or another broker's node; with --topic, senders send to the topic")
	case len(c.ReceiveAddresses) > 0 && c.Client != ClientAMQP:
		return errors.New("--receive-addresses is for --client amqp")
	case len(c.ReceiveAddresses) > 0 && c.Topic != "":
		return errors.New("--receive-addresses is for --queue or --address; with --topic, receivers receive from --subscriptions")
	case c.Size < 0 || c.Size > maxSize:
		return fmt.Errorf("--size %d out of range [0, %d]", c.Size, maxSize)
	case c.Senders < 0 || c.Receivers < 0:
		return errors.New("--senders and --receivers cannot be negative")
	case c.Senders == 0 && c.Receivers == 0:
		return errors.New("nothing to do: --senders and --receivers are both 0")
	case c.Batch < 1:
		return fmt.Errorf("--batch %d: want at least 1", c.Batch)
	case c.ReceiveBatch < 0:
		return fmt.Errorf("--receive-batch %d cannot be negative", c.ReceiveBatch)
	case (c.Batch > 1 || c.ReceiveBatch > 1) && c.Client == ClientAMQP:
		return errors.New("--batch and --receive-batch are for --client sdk; a plain AMQP peer moves one message per transfer (raise --in-flight instead)")
	case c.InFlight < 1:
		return fmt.Errorf("--in-flight %d: want at least 1", c.InFlight)
	case c.Rate < 0:
		return fmt.Errorf("--rate %v cannot be negative", c.Rate)
	case c.Rate > 0 && c.Senders == 0:
		return errors.New("--rate needs senders")
	case c.Duration <= 0:
		return fmt.Errorf("--duration %v: want a positive duration", c.Duration)
	case c.Warmup < 0:
		return fmt.Errorf("--warmup %v cannot be negative", c.Warmup)
	case c.BrokerPID < 0:
		return fmt.Errorf("--broker-pid %d cannot be negative", c.BrokerPID)
	}
	if err := checkNames(c.Subscriptions); err != nil {
		return fmt.Errorf("--subscriptions: %w", err)
	}
	if err := checkNames(c.ReceiveAddresses); err != nil {
		return fmt.Errorf("--receive-addresses: %w", err)
	}
	if c.ConnString != "" {
		if _, err := parseConnString(c.ConnString); err != nil {
			return fmt.Errorf("--conn-string: %w", err)
		}
		return nil
	}
	if _, err := parseURL(c.URL); err != nil {
		return fmt.Errorf("--url: %w", err)
	}
	return nil
}

// maxSubscriptions bounds --subscriptions N: each gets its own receivers,
// each receiver its own connection.
const maxSubscriptions = 2000

// parseSubscriptions reads --subscriptions: a count N, for s1 to sN, or a
// comma-separated list of names.
func parseSubscriptions(v string) ([]string, error) {
	n, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil {
		return parseList(v)
	}
	if n < 1 || n > maxSubscriptions {
		return nil, fmt.Errorf("%d subscriptions: want 1 to %d", n, maxSubscriptions)
	}
	names := make([]string, n)
	for i := range names {
		names[i] = "s" + strconv.Itoa(i+1)
	}
	return names, nil
}

// parseList splits a comma-separated list, trimming spaces around items.
func parseList(v string) ([]string, error) {
	var items []string
	for item := range strings.SplitSeq(v, ",") {
		items = append(items, strings.TrimSpace(item))
	}
	return items, checkNames(items)
}

// checkNames refuses empty and repeated names: each is a group of
// receivers of its own, counted apart.
func checkNames(names []string) error {
	seen := make(map[string]bool, len(names))
	for _, name := range names {
		switch {
		case name == "":
			return errors.New("an empty name")
		case seen[name]:
			return fmt.Errorf("%q twice", name)
		}
		seen[name] = true
	}
	return nil
}

// target is where and as whom to connect, whichever flag said it.
type target struct {
	tls      bool
	host     string
	port     int
	user     string // key name
	password string // key
}

func parseURL(s string) (target, error) {
	u, err := url.Parse(s)
	if err != nil {
		return target{}, err
	}
	var t target
	switch u.Scheme {
	case "amqp":
		t.port = 5672
	case "amqps":
		t.tls, t.port = true, 5671
	default:
		return target{}, fmt.Errorf("%q: want an amqp:// or amqps:// URL", s)
	}
	if u.Hostname() == "" {
		return target{}, fmt.Errorf("%q: no host", s)
	}
	t.host = u.Hostname()
	if p := u.Port(); p != "" {
		if t.port, err = strconv.Atoi(p); err != nil {
			return target{}, fmt.Errorf("%q: port %q", s, p)
		}
	}
	if u.User != nil {
		t.user = u.User.Username()
		t.password, _ = u.User.Password()
	}
	return t, nil
}

// parseConnString reads the parts of a Service Bus connection string that
// locate and authenticate: Endpoint, SharedAccessKeyName, SharedAccessKey
// and UseDevelopmentEmulator (plain AMQP, default port 5672).
func parseConnString(s string) (target, error) {
	kv := map[string]string{}
	for part := range strings.SplitSeq(s, ";") {
		if strings.TrimSpace(part) == "" {
			continue
		}
		k, v, ok := strings.Cut(part, "=")
		if !ok {
			return target{}, fmt.Errorf("%q is not key=value", part)
		}
		kv[strings.ToLower(strings.TrimSpace(k))] = strings.TrimSpace(v)
	}
	endpoint, ok := kv["endpoint"]
	if !ok {
		return target{}, errors.New("no Endpoint")
	}
	u, err := url.Parse(endpoint)
	if err != nil || u.Scheme != "sb" || u.Hostname() == "" {
		//lint:ignore ST1005 Endpoint is the connection string's key, spelled as users write it
		return target{}, fmt.Errorf("Endpoint %q: want sb://host", endpoint)
	}
	t := target{host: u.Hostname(), tls: true, port: 5671,
		user: kv["sharedaccesskeyname"], password: kv["sharedaccesskey"]}
	if strings.EqualFold(kv["usedevelopmentemulator"], "true") {
		t.tls, t.port = false, 5672
	}
	if p := u.Port(); p != "" {
		if t.port, err = strconv.Atoi(p); err != nil {
			//lint:ignore ST1005 Endpoint is the connection string's key, spelled as users write it
			return target{}, fmt.Errorf("Endpoint %q: port %q", endpoint, p)
		}
	}
	return t, nil
}

// target is where cfg points, from whichever of --url and --conn-string
// it has.
func (c *Config) target() target {
	if c.ConnString != "" {
		t, _ := parseConnString(c.ConnString) // checked by Validate
		return t
	}
	t, _ := parseURL(c.URL)
	return t
}

// sdkConnString is the connection string the SDK client uses: --conn-string
// as given, or one built from --url with the emulator's key by default.
func (c *Config) sdkConnString() string {
	if c.ConnString != "" {
		return c.ConnString
	}
	t := c.target()
	user, password := t.user, t.password
	if user == "" {
		user, password = emulatorKeyName, emulatorKey
	}
	s := fmt.Sprintf("Endpoint=sb://%s;SharedAccessKeyName=%s;SharedAccessKey=%s",
		net.JoinHostPort(t.host, strconv.Itoa(t.port)), user, password)
	if !t.tls {
		s += ";UseDevelopmentEmulator=true"
	}
	return s
}

// amqpURL is the URL the amqp client dials: --url as given, or one built
// from --conn-string's endpoint with its key name and key as user and
// password.
func (c *Config) amqpURL() string {
	if c.ConnString == "" {
		return c.URL
	}
	t := c.target()
	u := url.URL{Scheme: "amqp", Host: net.JoinHostPort(t.host, strconv.Itoa(t.port))}
	if t.tls {
		u.Scheme = "amqps"
	}
	if t.user != "" {
		u.User = url.UserPassword(t.user, t.password)
	}
	return u.String()
}

// receiveBatch is the most messages an SDK receive call asks for.
func (c *Config) receiveBatch() int {
	if c.ReceiveBatch > 0 {
		return c.ReceiveBatch
	}
	return c.Batch
}

// address is the AMQP node the amqp client's senders attach to, and its
// receivers too when there are no receive groups.
func (c *Config) address() string {
	if c.Address != "" {
		return c.Address
	}
	if c.Topic != "" {
		return c.Topic
	}
	return c.Queue
}

// entity is the queue or topic the SDK client sends to.
func (c *Config) entity() string {
	if c.Topic != "" {
		return c.Topic
	}
	return c.Queue
}

// receiveGroups names the groups of --receivers receivers, as the report
// shows them: the subscriptions, or the receive addresses; nil for the one
// queue.
func (c *Config) receiveGroups() []string {
	if len(c.ReceiveAddresses) > 0 {
		return c.ReceiveAddresses
	}
	return c.Subscriptions
}

// receiveSources are where each group's receivers receive from, as the
// client names it: for the amqp client a node address (a subscription's
// is "topic/Subscriptions/name"), for the SDK a queue or subscription
// name. One source, the queue, when there are no groups.
func (c *Config) receiveSources() []string {
	switch {
	case len(c.ReceiveAddresses) > 0:
		return c.ReceiveAddresses
	case c.Topic != "" && c.Client == ClientAMQP:
		sources := make([]string, len(c.Subscriptions))
		for i, s := range c.Subscriptions {
			sources[i] = c.Topic + "/Subscriptions/" + s
		}
		return sources
	case c.Topic != "":
		return c.Subscriptions
	case c.Client == ClientAMQP:
		return []string{c.address()}
	}
	return []string{c.Queue}
}
