# cxlpool — see README.md. Every target works on a fresh machine with Go and gcc.
GO      ?= go
DATA    ?= ./var
LISTEN  ?= 127.0.0.1:8443
EXPORT_LISTEN ?= 127.0.0.1:7700
BIN     := bin
STATICCHECK_VERSION := v0.8.2

.PHONY: all build run test check bench fuzz clean

all: build

build:
	CGO_ENABLED=0 $(GO) build -o $(BIN)/ ./cmd/...

# The daemon on the built-in simulated box; data (SQLite inventory, keys) under $(DATA).
run: build
	$(BIN)/cxlpoold --device sim --data $(DATA) --listen $(LISTEN) --export-listen $(EXPORT_LISTEN)

# Every test, with the race detector.
test:
	$(GO) test -race -count=1 ./...

# Lint as policy: gofmt, go vet, staticcheck.
check:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt wants to change:"; echo "$$out"; exit 1; fi
	CGO_ENABLED=0 $(GO) vet ./...
	$(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) ./...

# Benchmarks: each figure is reported beside its baseline from the same run.
bench:
	$(GO) test -run='^$$' -bench=. -benchmem -count=1 ./... | tee bench.txt

# A short pass of every fuzz target (FUZZTIME each).
FUZZTIME ?= 5s
fuzz:
	@for pkg in $$($(GO) list ./...); do \
	  for f in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz'); do \
	    echo "== $$pkg $$f"; $(GO) test -run='^$$' -fuzz="^$$f$$" -fuzztime=$(FUZZTIME) $$pkg || exit 1; \
	  done; \
	done

clean:
	rm -rf $(BIN) bench.txt
