# walbus: a durable Azure Service Bus compatible broker.
GO        ?= go
BIN       := bin/walbus
FUZZTIME  ?= 10s
PKGS      := ./...

.PHONY: all build run test vet fmt-check unit full-size bench fuzz crash clean

all: build

build:
	$(GO) build -o $(BIN) ./cmd/walbus

# Builds and starts a broker with the defaults (data in ./data).
run: build
	./$(BIN) serve

# Everything CI runs.
test: vet fmt-check unit full-size

vet:
	$(GO) vet $(PKGS)

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

unit:
	$(GO) test -race -count=1 -timeout 20m $(PKGS)

# Tests that run scaled down under the race detector, at full size.
full-size:
	$(GO) test -count=1 -timeout 10m -run '^TestCompactMillionMessagesOnePercentDeferred$$' ./tools/compaction

bench:
	$(GO) test -run '^$$' -bench . -benchmem -count 1 -timeout 30m $(PKGS)

# A short run of every fuzz target (FUZZTIME each).
fuzz:
	@set -e; for pkg in $$($(GO) list $(PKGS)); do \
		for target in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz' || true); do \
			echo "== $$pkg $$target"; \
			$(GO) test -run '^$$' -fuzz "^$$target$$" -fuzztime $(FUZZTIME) $$pkg; \
		done; \
	done

# The long crash harness: many rounds of SIGKILL under load (a few minutes).
CRASH_ROUNDS  ?= 25
CRASH_SECONDS ?= 3
crash:
	WALBUS_CRASH_ROUNDS=$(CRASH_ROUNDS) WALBUS_CRASH_SECONDS=$(CRASH_SECONDS) \
		$(GO) test -count=1 -timeout 60m -run '^TestCrashHarness$$' -v ./cmd/walbus

clean:
	rm -rf bin
