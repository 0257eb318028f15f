package bench

import (
	"bytes"
	"errors"
	"flag"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestParseArgsDefaults(t *testing.T) {
	cfg, err := ParseArgs([]string{"--queue", "q"}, new(bytes.Buffer))
	if err != nil {
		t.Fatal(err)
	}
	want := DefaultConfig()
	want.Queue, want.Client = "q", ClientSDK
	if !reflect.DeepEqual(cfg, want) {
		t.Fatalf("got %+v\nwant %+v", cfg, want)
	}
	// The SDK finds walbus serve (or the emulator) with its default key.
	if got := cfg.sdkConnString(); got != "Endpoint=sb://127.0.0.1:5672;SharedAccessKeyName=RootManageSharedAccessKey;SharedAccessKey=SAS_KEY_VALUE;UseDevelopmentEmulator=true" {
		t.Fatalf("conn string %q", got)
	}
}

func TestParseArgsHelp(t *testing.T) {
	for _, arg := range []string{"-h", "--help", "-help"} {
		var out bytes.Buffer
		if _, err := ParseArgs([]string{arg}, &out); !errors.Is(err, flag.ErrHelp) {
			t.Fatalf("%s: %v", arg, err)
		}
		for _, f := range []string{"--url", "--conn-string", "--client", "--queue", "--topic", "--subscriptions", "--address",
			"--receive-addresses", "--size", "--senders",
			"--receivers", "--batch", "--receive-batch", "--in-flight", "--rate", "--mode", "--warmup", "--duration", "--broker-pid", "--json"} {
			if !strings.Contains(out.String(), f+" ") {
				t.Errorf("help does not describe %s", f)
			}
		}
	}
}

func TestParseArgsAccepts(t *testing.T) {
	for _, tc := range []struct {
		args  []string
		check func(Config) bool
	}{
		{[]string{"--queue", "q", "--url", "amqp://guest:guest@rabbit:5673"},
			func(c Config) bool { return c.Client == ClientAMQP && c.amqpURL() == "amqp://guest:guest@rabbit:5673" }},
		{[]string{"--url", "amqp://rabbit", "--address", "/queue/q"},
			func(c Config) bool { return c.address() == "/queue/q" && c.target().port == 5672 }},
		{[]string{"--queue", "q", "--client", "sdk", "--url", "amqp://k:v@h:1234"},
			func(c Config) bool {
				return c.sdkConnString() == "Endpoint=sb://h:1234;SharedAccessKeyName=k;SharedAccessKey=v;UseDevelopmentEmulator=true"
			}},
		{[]string{"--queue", "q", "--client", "amqp", "--conn-string", "Endpoint=sb://localhost;SharedAccessKeyName=K;SharedAccessKey=a=b;UseDevelopmentEmulator=true"},
			func(c Config) bool { return c.amqpURL() == "amqp://K:a=b@localhost:5672" }},
		{[]string{"--queue", "q", "--conn-string", "Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKeyName=K;SharedAccessKey=V"},
			func(c Config) bool { t := c.target(); return c.Client == ClientSDK && t.tls && t.port == 5671 }},
		{[]string{"--queue", "q", "--senders", "64", "--in-flight", "1", "--receivers", "0", "--rate", "5000",
			"--duration", "5s", "--warmup", "0", "--mode", "rad", "--batch", "100", "--receive-batch", "20", "--size", "0", "--json", "--broker-pid", "7"},
			func(c Config) bool {
				return c.Senders == 64 && c.Receivers == 0 && c.Rate == 5000 && c.Duration == 5*time.Second &&
					c.Warmup == 0 && c.Mode == ModeReceiveAndDelete && c.Batch == 100 && c.receiveBatch() == 20 && c.Size == 0 && c.JSON && c.BrokerPID == 7
			}},
		// A topic: senders send to it, receivers to each subscription,
		// whose amqp address is the topic's path.
		{[]string{"--topic", "t", "--subscriptions", "3", "--receivers", "2"},
			func(c Config) bool {
				return c.Client == ClientSDK && c.entity() == "t" && c.Queue == "" && c.Receivers == 2 &&
					slices.Equal(c.Subscriptions, []string{"s1", "s2", "s3"}) &&
					slices.Equal(c.receiveGroups(), []string{"s1", "s2", "s3"}) &&
					slices.Equal(c.receiveSources(), []string{"s1", "s2", "s3"})
			}},
		{[]string{"--url", "amqp://h", "--topic", "t", "--subscriptions", " audit, billing "},
			func(c Config) bool {
				return c.Client == ClientAMQP && c.address() == "t" &&
					slices.Equal(c.receiveGroups(), []string{"audit", "billing"}) &&
					slices.Equal(c.receiveSources(), []string{"t/Subscriptions/audit", "t/Subscriptions/billing"})
			}},
		// A fan-out: senders to --address, receivers to each receive address.
		{[]string{"--url", "amqp://guest:guest@h:5673", "--address", "/exchange/bench-fan",
			"--receive-addresses", "/amq/queue/bench-fan-1,/amq/queue/bench-fan-2"},
			func(c Config) bool {
				want := []string{"/amq/queue/bench-fan-1", "/amq/queue/bench-fan-2"}
				return c.address() == "/exchange/bench-fan" &&
					slices.Equal(c.receiveGroups(), want) && slices.Equal(c.receiveSources(), want)
			}},
		// A queue: one group of receivers, named by no list.
		{[]string{"--queue", "q"},
			func(c Config) bool {
				return c.receiveGroups() == nil && slices.Equal(c.receiveSources(), []string{"q"})
			}},
		{[]string{"--url", "amqp://h", "--queue", "q", "--address", "/amq/queue/q"},
			func(c Config) bool {
				return c.receiveGroups() == nil && slices.Equal(c.receiveSources(), []string{"/amq/queue/q"})
			}},
	} {
		cfg, err := ParseArgs(tc.args, new(bytes.Buffer))
		if err != nil {
			t.Errorf("%q: %v", tc.args, err)
			continue
		}
		if !tc.check(cfg) {
			t.Errorf("%q: %+v", tc.args, cfg)
		}
	}
}

// Bad flags are refused with the reason, never half-run.
func TestParseArgsRefuses(t *testing.T) {
	for _, tc := range []struct {
		args []string
		why  string
	}{
		{[]string{}, "--queue or --topic is required"},
		{[]string{"--queue", "q", "--nope"}, "not defined"},
		{[]string{"--queue", "q", "extra"}, "unexpected argument"},
		{[]string{"--queue", "q", "--size", "-1"}, "--size"},
		{[]string{"--queue", "q", "--size", "x"}, "invalid value"},
		{[]string{"--queue", "q", "--senders", "0", "--receivers", "0"}, "nothing to do"},
		{[]string{"--queue", "q", "--senders", "-2"}, "negative"},
		{[]string{"--queue", "q", "--batch", "0"}, "--batch"},
		{[]string{"--queue", "q", "--in-flight", "0"}, "--in-flight"},
		{[]string{"--queue", "q", "--duration", "0s"}, "--duration"},
		{[]string{"--queue", "q", "--warmup", "-1s"}, "--warmup"},
		{[]string{"--queue", "q", "--rate", "-5"}, "--rate"},
		{[]string{"--queue", "q", "--rate", "5", "--senders", "0"}, "--rate needs senders"},
		{[]string{"--queue", "q", "--mode", "receive"}, "--mode"},
		{[]string{"--queue", "q", "--client", "jms"}, "--client"},
		{[]string{"--queue", "q", "--client", "amqp", "--batch", "10"}, "are for --client sdk"},
		{[]string{"--queue", "q", "--client", "amqp", "--receive-batch", "10"}, "are for --client sdk"},
		{[]string{"--queue", "q", "--receive-batch", "-1"}, "--receive-batch"},
		{[]string{"--address", "/queue/q"}, "--queue or --topic is required"},
		{[]string{"--queue", "q", "--client", "sdk", "--address", "/queue/q"}, "--address is for --client amqp"},
		{[]string{"--queue", "q", "--url", "http://h"}, "--url"},
		{[]string{"--queue", "q", "--url", "amqp://"}, "no host"},
		{[]string{"--queue", "q", "--url", "amqp://h", "--conn-string", "Endpoint=sb://h"}, "not both"},
		{[]string{"--queue", "q", "--conn-string", "SharedAccessKeyName=K"}, "no Endpoint"},
		{[]string{"--queue", "q", "--conn-string", "Endpoint=https://h"}, "want sb://host"},
		{[]string{"--queue", "q", "--conn-string", "Endpoint"}, "not key=value"},
		{[]string{"--queue", "q", "--broker-pid", "-1"}, "--broker-pid"},
		{[]string{"--queue", "q", "--topic", "t", "--subscriptions", "2"}, "not both"},
		{[]string{"--topic", "t"}, "--topic needs --subscriptions"},
		{[]string{"--queue", "q", "--subscriptions", "2"}, "--subscriptions is for --topic"},
		{[]string{"--topic", "t", "--subscriptions", "0"}, "want 1 to"},
		{[]string{"--topic", "t", "--subscriptions", "-3"}, "want 1 to"},
		{[]string{"--topic", "t", "--subscriptions", "a,,b"}, "empty name"},
		{[]string{"--topic", "t", "--subscriptions", "a,b,a"}, `"a" twice`},
		{[]string{"--topic", "t", "--subscriptions", ""}, "empty name"},
		{[]string{"--url", "amqp://h", "--topic", "t", "--subscriptions", "2", "--address", "/exchange/x"}, "with --topic, senders send to the topic"},
		{[]string{"--queue", "q", "--receive-addresses", "a,b"}, "--receive-addresses is for --client amqp"},
		{[]string{"--url", "amqp://h", "--topic", "t", "--subscriptions", "2", "--receive-addresses", "a,b"}, "with --topic, receivers receive from --subscriptions"},
		{[]string{"--url", "amqp://h", "--address", "/exchange/x", "--receive-addresses", "a, a"}, `"a" twice`},
		{[]string{"--url", "amqp://h", "--receive-addresses", "a,b"}, "--queue or --topic is required"},
	} {
		var out bytes.Buffer
		_, err := ParseArgs(tc.args, &out)
		if err == nil || errors.Is(err, flag.ErrHelp) {
			t.Errorf("%q: accepted (%v)", tc.args, err)
			continue
		}
		if !strings.Contains(out.String(), tc.why) || !strings.Contains(out.String(), "walbus bench --help") {
			t.Errorf("%q: message %q, want it to mention %q and --help", tc.args, out.String(), tc.why)
		}
	}
}
