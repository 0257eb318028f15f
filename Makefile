# walbus: a durable Azure Service Bus compatible broker.
GO        ?= go
BIN       := bin/walbus
FUZZTIME  ?= 10s
# How long each new input is minimised: Go's default (60s) would spend a
# short run minimising its first finds instead of fuzzing.
FUZZMINIMIZE ?= 1s
PKGS      := ./...

.PHONY: all build run test vet staticcheck fmt-check unit full-size test-js test-py test-console console-picture conformance bench bench-go fuzz crash clean

all: build

build:
	$(GO) build -o $(BIN) ./cmd/walbus

# Builds and starts a broker with the defaults (data in ./data).
run: build
	./$(BIN) serve

# Everything CI runs.
test: vet staticcheck fmt-check unit full-size test-js test-py test-console conformance

vet:
	$(GO) vet $(PKGS)

# staticcheck, pinned in go.mod's tool block (honnef.co/go/tools).
staticcheck:
	$(GO) tool staticcheck $(PKGS)

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

unit:
	$(GO) test -race -count=1 -timeout 20m $(PKGS)

# The JavaScript SDK (@azure/service-bus, pinned in the lock file) against a
# real walbus serve; needs Node.js 20+ and npm. The tests mostly wait (locks,
# TTLs, schedules), so files run side by side.
JS_DIR := amqpserver/testdata/jssdk
test-js: build
	cd $(JS_DIR) && npm ci --no-audit --no-fund --loglevel=error && \
		WALBUS_BIN=$(abspath $(BIN)) node --test --test-concurrency=6

# The Python SDK (azure-servicebus 7.8 on uAMQP: Debian's python3-azure and
# python3-uamqp, which run on Debian's /usr/bin/python3) against real walbus
# serve processes over TLS; the modules run side by side.
PY_DIR := amqpserver/testdata/pysdk
PYTHON ?= /usr/bin/python3
test-py: build
	WALBUS_BIN=$(abspath $(BIN)) $(PYTHON) $(PY_DIR)/run.py

# The web console in headless Chromium (Debian's chromium, /usr/bin/chromium),
# driven by playwright-core (pinned in the lock file) against a real walbus
# serve; screenshots of every step go to artifacts/console.
CONSOLE_E2E := admin/console/e2e
test-console:
	cd $(CONSOLE_E2E) && npm ci --no-audit --no-fund --loglevel=error
	WALBUS_CONSOLE_E2E=$(abspath $(CONSOLE_E2E)) WALBUS_ARTIFACTS=$(abspath artifacts/console) \
		$(GO) test -count=1 -timeout 10m -run '^TestConsoleInBrowser$$' ./cmd/walbus

# Makes the README's picture of the console again (docs/console.png), from a
# walbus under live traffic (about 70 s).
console-picture:
	cd $(CONSOLE_E2E) && npm ci --no-audit --no-fund --loglevel=error
	WALBUS_CONSOLE_E2E=$(abspath $(CONSOLE_E2E)) WALBUS_CONSOLE_SCREENSHOT=$(abspath docs/console.png) \
		$(GO) test -count=1 -timeout 10m -run '^TestConsoleReadmePicture$$' ./cmd/walbus

# The official Go SDK's own live tests (azservicebus and its admin package,
# at the version go.mod pins) against two real walbus serve processes, a
# Standard and a Premium namespace, in a network namespace that has only
# loopback (needs unshare, mount and ip). The tests that cannot pass here are
# listed, with the reason, in $(GOSDK_DIR)/skipped.txt.
GOSDK_DIR := amqpserver/testdata/gosdk
conformance: build
	cd $(GOSDK_DIR) && $(GO) run . --walbus $(abspath $(BIN))

# Tests that run scaled down under the race detector, at full size.
full-size:
	$(GO) test -count=1 -timeout 10m -run '^(TestCompactMillionMessagesOnePercentDeferred|TestCompactTopicWithASlowSubscription)$$' ./tools/compaction
	$(GO) test -count=1 -timeout 10m -run '^TestCompactionFollowsWhatIsHeld$$' ./broker
	WALBUS_FULL_SIZE=1 $(GO) test -count=1 -timeout 10m -run '^TestMemoryBudgetAcrossQueues$$' ./cmd/walbus
	WALBUS_SIM_SEEDS=2000 $(GO) test -count=1 -timeout 10m -run '^TestSimulatedGroup$$' ./broker/replica
	WALBUS_SIM_SEEDS=300 $(GO) test -count=1 -timeout 10m -run '^TestSimulatedGroupOnDisk$$' ./broker/replica
	WALBUS_SIM_SEEDS=600 $(GO) test -count=1 -timeout 10m -run '^TestReplicatedAgainstModel$$' ./projection
	WALBUS_NEMESIS_ROUNDS=8 $(GO) test -count=1 -timeout 10m -run '^TestClusterNemesis$$' ./cmd/walbus

# A short standard set of walbus bench runs (SDK and go-amqp sends, a paced send and
# receive, a drain) against a fresh walbus serve --sync always, and the paced ones again against
# the plain and durable floors (walbus bench floor), as one table: under two minutes.
# BENCH_FLAGS="--duration 10s" measures longer.
bench: build
	$(GO) run ./bench/cmd/standard --walbus $(BIN) $(BENCH_FLAGS)

# The Go micro-benchmarks (testing.B) of every package.
bench-go:
	$(GO) test -run '^$$' -bench . -benchmem -count 1 -timeout 30m $(PKGS)

# A short run of every fuzz target (FUZZTIME each).
fuzz:
	@set -e; for pkg in $$($(GO) list $(PKGS)); do \
		for target in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz' || true); do \
			echo "== $$pkg $$target"; \
			$(GO) test -run '^$$' -fuzz "^$$target$$" -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINIMIZE) $$pkg; \
		done; \
	done

# The long crash tests (the harness, and the random workload of every kind of
# state change): many rounds of SIGKILL under load (a few minutes).
# WALBUS_CRASH_SEED=n repeats a run's choices.
CRASH_ROUNDS  ?= 25
CRASH_SECONDS ?= 3
crash:
	WALBUS_CRASH_ROUNDS=$(CRASH_ROUNDS) WALBUS_CRASH_SECONDS=$(CRASH_SECONDS) \
		$(GO) test -count=1 -timeout 60m -run '^(TestCrashHarness|TestCrashRandomWorkload)$$' -v ./cmd/walbus

clean:
	rm -rf bin
