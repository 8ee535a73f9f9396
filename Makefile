# cxlpool — see README.md. Every target works on a fresh machine with Go and gcc.
GO      ?= go
DATA    ?= ./var
LISTEN  ?= 127.0.0.1:8443
EXPORT_LISTEN ?= 127.0.0.1:7700
# The virtual box's hosts run this workload once they hold capacity, so the
# telemetry shows something live: none, mixed, zipf, hotset or kvcache.
SIM_WORKLOAD ?= mixed
# Heads handed to host agents (cxlhost), e.g. EXTERNAL_HOSTS=3=unix:$(PWD)/var/host3.sock
EXTERNAL_HOSTS ?=
BIN     := bin
STATICCHECK_VERSION := v0.8.2

.PHONY: all build run test check bench fuzz clean image flash vmtest

all: build

build:
	CGO_ENABLED=0 $(GO) build -o $(BIN)/ ./cmd/...

# The daemon on the built-in simulated box; data (SQLite inventory, keys) under $(DATA).
run: build
	$(BIN)/cxlpoold --device sim --data $(DATA) --listen $(LISTEN) --export-listen $(EXPORT_LISTEN) --sim-workload $(SIM_WORKLOAD) $(if $(EXTERNAL_HOSTS),--external-host $(EXTERNAL_HOSTS))

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
	bash rdma/bench-redis.sh || echo "no redis-server: the rdma benchmark skips its Redis baseline"
	$(GO) test -run='^$$' -bench=. -benchmem -count=1 ./... | tee bench.txt

# A short pass of every fuzz target (FUZZTIME each).
FUZZTIME ?= 5s
fuzz:
	@for pkg in $$($(GO) list ./...); do \
	  for f in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz'); do \
	    echo "== $$pkg $$f"; $(GO) test -run='^$$' -fuzz="^$$f$$" -fuzztime=$(FUZZTIME) $$pkg || exit 1; \
	  done; \
	done

# The box image (image/README.md): u-root initramfs + Debian kernel, signed
# bundle and A/B disk under $(IMAGE_OUT). Installs linux-image-amd64 if
# missing (root). IMAGE_SIGNING_KEY names the signing key; without it a
# development key is generated in image/.keys/.
IMAGE_OUT     ?= $(BIN)/image
IMAGE_VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
IMAGE_SECURITY_VERSION ?= 1
image:
	$(GO) run ./image/cmd/mkimage -out $(IMAGE_OUT) -version $(IMAGE_VERSION) -security-version $(IMAGE_SECURITY_VERSION)

# Write a built disk image to DEVICE (a disk or a file) after checking its
# signature; refuses mounted and system disks.
IMAGE ?= $(IMAGE_OUT)/disk.img
flash:
	@test -n "$(DEVICE)" || { echo "usage: make flash IMAGE=bin/image/disk.img DEVICE=/dev/sdX"; exit 2; }
	$(GO) run ./image/cmd/flash -image $(IMAGE) -device $(DEVICE) -keys $(IMAGE_OUT)/signing.pub

# Boot the image under QEMU (TCG) with emulated CXL memory and the virtual
# box on the host; installs qemu-system-x86 and the kernel if missing.
vmtest: image
	CXLPOOL_VMTEST=1 CXLPOOL_IMAGE_DIR=$(abspath $(IMAGE_OUT)) $(GO) test -count=1 -v -timeout 30m ./image/vmtest/

clean:
	rm -rf $(BIN) bench.txt
