# cxlpool — see README.md. Every target works on a fresh machine with Go and gcc,
# except test-usb (libusb-1.0 headers and pkg-config; make image installs them).
GO      ?= go
DATA    ?= ./var
LISTEN  ?= 127.0.0.1:8443
EXPORT_LISTEN ?= 127.0.0.1:7700
# The virtual box's hosts run this workload once they hold capacity, so the
# telemetry shows something live: none, mixed, zipf, hotset or kvcache.
SIM_WORKLOAD ?= mixed
# Heads handed to host agents (cxlhost), any of the 8, comma separated, e.g.
# EXTERNAL_HOSTS=0=unix:$(PWD)/var/host0.sock,3=unix:$(PWD)/var/host3.sock; then per head N:
#   CXLHOST_PASSWORD=... bin/cxlhost --box https://$(LISTEN) --ca var/tls/cert.pem --user hN \
#       --device vbox:unix:$(PWD)/var/hostN.sock --listen $(PWD)/var/cxlhostN.sock
# (hN: a HostUser account bound to HostN, poolctl accounts add hN --role HostUser --system HostN).
EXTERNAL_HOSTS ?=
BIN     := bin
STATICCHECK_VERSION := v0.8.2

.PHONY: all build run test test-usb attack check bench fuzz clean image flash vmtest vmtest-uefi vmtest-host vmtest-rdma vmtest-rdma-image

all: build

build:
	CGO_ENABLED=0 $(GO) build -o $(BIN)/ ./cmd/...

# The daemon on the built-in simulated box; data (SQLite inventory, keys) under $(DATA).
run: build
	$(BIN)/cxlpoold --device sim --data $(DATA) --listen $(LISTEN) --export-listen $(EXPORT_LISTEN) --sim-workload $(SIM_WORKLOAD) $(if $(EXTERNAL_HOSTS),--external-host $(EXTERNAL_HOSTS))

# Every test, with the race detector. The default build leaves out the
# USB device link (bmc/usblink behind the usb build tag), so only libc is
# needed beside Go and gcc. The api package's tests under -race take
# minutes and, on a busy 2-core machine, more than go test's default
# 10-minute limit per package.
TEST_TIMEOUT ?= 30m
test:
	$(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) ./...

# The attack suite (README "Under attack"): every TestAttack of every
# package, loopback only, bounded in count and time; each logs what it
# tried and what held.
attack:
	$(GO) test -count=1 -run '^TestAttack' -v ./...

# The USB device link built and tested too (-tags usb: gousb, cgo and
# libusb-1.0; Debian: apt-get install libusb-1.0-0-dev pkg-config): every
# package vetted with the tag, the daemon linked with libusb, and the
# tests that reach gousb (bmc/usblink; the appliance dialing usb:).
# make test ran the rest, which the tag does not change.
test-usb:
	@pkg-config --exists libusb-1.0 || { echo "test-usb needs libusb-1.0 through pkg-config (apt-get install libusb-1.0-0-dev pkg-config)"; exit 1; }
	$(GO) vet -tags usb ./...
	$(GO) build -tags usb -o /dev/null ./cmd/cxlpoold
	$(GO) test -race -count=1 -tags usb ./bmc/usblink/
	$(GO) test -race -count=1 -tags usb -run '^TestUnreachableDevice$$' ./appliance/

# Lint as policy: gofmt, go vet, staticcheck; the usb-tagged code too
# where libusb-1.0 is installed (CI), with a note where it is not.
check:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt wants to change:"; echo "$$out"; exit 1; fi
	CGO_ENABLED=0 $(GO) vet ./...
	$(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) ./...
	@if pkg-config --exists libusb-1.0 2>/dev/null; then \
	  echo "$(GO) vet -tags usb ./... && staticcheck -tags usb ./bmc/usblink/"; $(GO) vet -tags usb ./... && \
	  $(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) -tags usb ./bmc/usblink/; \
	else echo "check: no libusb-1.0 (pkg-config): the usb-tagged code (bmc/usblink/gousb.go) is not vetted here; make test-usb and CI do"; fi

# Benchmarks: every figure BENCH_COUNT times, each beside its baseline from
# the same run, then the export from outside (bench/outside.sh: the daemon,
# poolctl export bench, raw TCP and Redis in rotating rounds); all of it in
# bench.txt, from which cmd/benchfig writes the README's Measured table
# (median and range, with the date and the load average). About 10 min on
# a quiet machine; BENCH_LONG=1 adds the 100 M-record precision run.
BENCH_COUNT ?= 5
BENCH_LONG ?=
BENCH_ROUND ?= 2s
BENCH_TEST = $(GO) test -run='^$$' -benchmem -count=$(BENCH_COUNT)
bench: SHELL := /bin/bash
bench: .SHELLFLAGS := -o pipefail -c
bench: build
	bash rdma/bench-redis.sh || echo "no redis-server: the Redis baselines are skipped"
	@{ echo "# date: $$(date -u '+%Y-%m-%d %H:%M UTC')"; echo "# commit: $$(git rev-parse --short HEAD 2>/dev/null || echo unknown)"; \
	  echo "# loadavg: $$(cut -d' ' -f1-3 /proc/loadavg) at the start"; } > bench.txt
	$(BENCH_TEST) -bench='^Benchmark(GrantLatency|GrantsParallel8|GrantsParallel8Held)$$' -benchtime=1000x ./appliance/ | tee -a bench.txt
	$(BENCH_TEST) -bench=. -benchtime=0.3s ./dcd/... ./fabric/... ./sim/ | tee -a bench.txt
	$(BENCH_TEST) -bench='^BenchmarkGetChunksVsBareHTTP$$' ./api/ | tee -a bench.txt
	$(BENCH_TEST) -bench='^Benchmark(Add|Ingest|FanOutLag|BytesPerSlot|Collector|CollectorMemory)$$' -benchtime=0.5s ./hmu/... | tee -a bench.txt
	$(if $(BENCH_LONG),$(GO) test -run='^$$' -bench='^BenchmarkZipf100M$$' -benchtime=1x -count=1 ./hmu/topk/ | tee -a bench.txt,@echo "BenchmarkZipf100M (precision, minutes of CPU) left out: BENCH_LONG=1 runs it")
	$(BENCH_TEST) -bench='^BenchmarkLoopback$$' -benchtime=1x ./rdma/ | tee -a bench.txt
	$(BENCH_TEST) -bench='^BenchmarkHosts$$' -benchtime=4x -timeout=60m ./kv/client/ | tee -a bench.txt
	$(BENCH_TEST) -bench='^BenchmarkLookupVsRedis$$' -benchtime=5000x ./kv/client/ | tee -a bench.txt
	$(BENCH_TEST) -bench='^BenchmarkRemoteGet$$' -benchtime=300x ./kv/client/ | tee -a bench.txt
	$(GO) test -run='^$$' -bench='^BenchmarkTraceFetch$$' -benchtime=1x -count=3 -timeout=60m ./kv/client/ | tee -a bench.txt
	bash bench/outside.sh $(BENCH_COUNT) $(BENCH_ROUND) | tee -a bench.txt
	@echo "# loadavg: $$(cut -d' ' -f1-3 /proc/loadavg) at the end" >> bench.txt
	$(BIN)/benchfig table -template bench/measured.md.tmpl -readme README.md bench.txt
	@echo "README.md: Measured table regenerated from bench.txt"

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

# The disk image through UEFI: OVMF (Debian's ovmf) with no boot entries
# boots the loader stage from the EFI system partition (TestUEFI, three
# boots; CI runs it inside make vmtest). Installs ovmf if missing.
vmtest-uefi: image
	@ls /usr/share/OVMF/OVMF_CODE.fd >/dev/null 2>&1 || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq ovmf
	@command -v sbverify >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq sbsigntool
	CXLPOOL_VMTEST=1 CXLPOOL_VMTEST_UEFI=1 CXLPOOL_IMAGE_DIR=$(abspath $(IMAGE_OUT)) $(GO) test -count=1 -v -timeout 20m -run 'TestUEFI$$|TestSecureBoot$$' ./image/vmtest/

# The Linux host backend (host/linux) for real: one QEMU guest (TCG) with an
# emulated CXL Type-3 device and Debian's kernel; about 2 minutes. Installs
# qemu-system-x86 and the kernel if missing (root).
vmtest-host:
	@command -v qemu-system-x86_64 >/dev/null && ls /boot/vmlinuz-* >/dev/null 2>&1 || \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq qemu-system-x86 linux-image-amd64 xz-utils
	CXLPOOL_VMTEST=1 $(GO) test -count=1 -v -timeout 15m ./host/linux/vmtest/

# Exports over RDMA verbs for real: one QEMU guest (TCG) with soft-RoCE
# (rdma_rxe) on both ends of a veth pair, the verbs transport's tests and
# its figures against TCP on the same link (rdma/vmtest). Installs what it
# needs if missing (root).
vmtest-rdma:
	@command -v qemu-system-x86_64 >/dev/null && ls /boot/vmlinuz-* /usr/include/infiniband/verbs.h /etc/libibverbs.d/rxe.driver >/dev/null 2>&1 || \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq qemu-system-x86 linux-image-amd64 xz-utils gcc libibverbs-dev ibverbs-providers
	CXLPOOL_VMTEST=1 $(GO) test -count=1 -v -timeout 15m ./rdma/vmtest/

# The box image itself serving exports over verbs: TestRDMA (make vmtest
# runs it too) boots the image with soft-RoCE on a data NIC and a second
# guest, the remote rack, reaching an export over verbs and TCP.
vmtest-rdma-image: image
	CXLPOOL_VMTEST=1 CXLPOOL_IMAGE_DIR=$(abspath $(IMAGE_OUT)) $(GO) test -count=1 -v -timeout 15m -run 'TestRDMA$$' ./image/vmtest/

clean:
	rm -rf $(BIN) bench.txt
