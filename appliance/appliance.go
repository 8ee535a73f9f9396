// Package appliance assembles the daemon: it connects to the device (the
// built-in virtual box or a real link), opens the SQLite ledger in the data
// directory and runs the capacity Manager over them, then starts the
// rooms' services around it (exports: rdma.Service; hot pages:
// hmu/telemetry), whose logic lives in those rooms, and board management
// (board.go). cmd/cxlpoold is a thin main around it; tests use it to run
// whole daemons.
package appliance

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"cxlpool/bmc/usblink"
	"cxlpool/dcd"
	"cxlpool/dcd/sqlite"
	"cxlpool/fabric"
	"cxlpool/fabric/cci"
	"cxlpool/fabric/fm"
	"cxlpool/fabric/serial"
	"cxlpool/history"
	"cxlpool/host/report"
	"cxlpool/internal/bytesize"
	"cxlpool/kv"
	"cxlpool/rdma"
	"cxlpool/rdma/dax"
	exportstore "cxlpool/rdma/sqlite"
	"cxlpool/rdma/tcp"
	"cxlpool/sim"
)

// DeviceSim names the built-in virtual box as the device.
const DeviceSim = "sim"

// LedgerFile is the SQLite inventory's name inside the data directory.
const LedgerFile = "inventory.db"

// Config describes one daemon.
type Config struct {
	// Device is where the device is: "sim" (in-process virtual box),
	// tcp://HOST:PORT, unix:PATH or tty:/dev/ttyX.
	Device string
	// DataDir holds the SQLite inventory and keys; created 0700.
	DataDir string
	// Listen is the API's address (served by the API once it is built in).
	Listen string
	// Sim configures the in-process virtual box when Device is "sim".
	Sim    sim.Config
	FM     fm.Config
	Logger *slog.Logger
	Clock  func() time.Time
	// AddTimeout and ReleaseTimeout bound how long hosts may take to
	// answer (see dcd.Config).
	AddTimeout, ReleaseTimeout time.Duration
	// Synchronous is the ledger's SQLite durability level ("FULL").
	Synchronous string
	// ExportListen is where remote racks reach exported pool memory
	// (one-sided READ/WRITE over TCP); empty disables the export server.
	ExportListen string
	// DAXPath maps the pool for exports on hardware (a /dev/daxX.Y
	// device); the virtual box's memory is mapped directly.
	DAXPath string
	// ExportRDMA serves exports over RDMA verbs beside TCP (export_rdma.go):
	// off (or empty), auto, or a device name.
	ExportRDMA string
	// Board configures board management (board.go).
	Board BoardConfig
	// CHMU locates a real device's hotness monitoring unit for telemetry
	// (hmu/telemetry): PATH[@OFFSET] of its PCI BAR resource file, or
	// pci:BDF. Empty with a real device: telemetry is off. The virtual
	// box's CHMU is built in.
	CHMU string
	// SimWorkload is the synthetic workload the virtual box's hosts run
	// once they hold capacity: none (or empty), mixed, zipf, hotset or
	// kvcache.
	SimWorkload string
	// Telemetry tunes the telemetry pipeline.
	Telemetry TelemetryConfig
	// KVListen and KVSocket are where hosts' KV clients reach the KV
	// index (kv/wire, TCP and a unix socket); empty: not served.
	KVListen, KVSocket string
	// Fleet joins the fleet plane (fleet.go); off in the zero Config.
	Fleet FleetConfig
	// HostReportTTL is how long a host agent's report stays fresh
	// (host/report's default, 30 s, if zero).
	HostReportTTL time.Duration
}

// Appliance is a running daemon's parts.
type Appliance struct {
	cfg     Config
	Box     *sim.Box // the in-process virtual box, nil for a real device
	Device  fabric.Device
	Ledger  *sqlite.Ledger
	Manager *dcd.Manager
	// HostReports is what the host agents last said about their memory.
	HostReports *report.Store
	// Exports serves pool memory to remote racks; nil when the pool's
	// memory cannot be mapped here (a real device without DAXPath).
	Exports *rdma.Service
	// ExportAddr is the export server's address once started.
	ExportAddr net.Addr
	// Board is board management: sensors, fans, PSUs, head power (board.go).
	Board *Board
	// Telemetry is the CHMU pipeline (hmu/telemetry, started in telemetry.go); nil when the device
	// has no CHMU the daemon can reach.
	Telemetry *Telemetry
	// History keeps the box's downsampled history and alerts (history.go);
	// nil if its store could not be opened.
	History *history.Service
	// Fleet is the fleet plane once started (fleet.go); nil when off.
	Fleet   *Fleet
	kvHeat  kvHeat      // the KV store's eviction reads Telemetry's heat through it
	kvSrv   *kv.Server  // the KV protocol servers (QuiesceKV stops them first)
	kvEv    kvEvents    // the KV index's block events, to the fleet plane and subscribers (kv.go)
	check   *startCheck // consistency.go
	closers []func() error

	// KV is the KV-cache store's namespaces and index (kv.go); KVAddr the
	// index's TCP address once served.
	KV     *kv.Service
	KVAddr net.Addr
}

// Open connects to the device and opens the ledger. On error nothing is
// left open.
func Open(ctx context.Context, cfg Config) (a *Appliance, err error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	if cfg.Device == "" {
		cfg.Device = DeviceSim
	}
	if cfg.DataDir == "" {
		return nil, errors.New("appliance: a data directory is required")
	}
	app := &Appliance{cfg: cfg, check: &startCheck{done: make(chan struct{})}}
	a = app
	defer func() {
		// The error returns set a to nil: close through app.
		if err != nil {
			app.Close()
		}
	}()
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("appliance: data directory: %w", err)
	}
	// The device link first: its discovery starts at once and runs while
	// the ledger opens (see earlyDiscovery).
	fcfg := cfg.FM
	if fcfg.Logger == nil {
		fcfg.Logger = cfg.Logger.With("component", "fm")
	}
	if fcfg.Clock == nil {
		fcfg.Clock = cfg.Clock
	}
	a.prepareBoard(&fcfg)
	var dev fabric.Device
	if cfg.Device == DeviceSim {
		rw, err := a.startSim(ctx)
		if err != nil {
			return nil, err
		}
		link := serial.NewLink(rw, serial.LinkConfig{Logger: cfg.Logger})
		if dev, err = fm.Open(ctx, link, fcfg); err != nil {
			link.Close()
			return nil, fmt.Errorf("appliance: virtual box: %w", err)
		}
	} else {
		// A real link can drop and come back: keep redialing it.
		dial := func(ctx context.Context) (io.ReadWriteCloser, error) { return dialDevice(ctx, cfg.Device, cfg.Logger) }
		if dev, err = openRedial(ctx, dial, fcfg, cfg.Logger.With("component", "link"), redialConfig{Now: cfg.Clock}); err != nil {
			return nil, fmt.Errorf("appliance: device %s: %w", cfg.Device, err)
		}
	}
	a.Device = dev
	a.closers = append(a.closers, dev.Close)
	early := discoverEarly(ctx, dev)

	led, err := sqlite.Open(ctx, filepath.Join(cfg.DataDir, LedgerFile), sqlite.Options{
		Logger: cfg.Logger, Clock: cfg.Clock, Synchronous: cfg.Synchronous})
	if err != nil {
		return nil, fmt.Errorf("appliance: %w", err)
	}
	a.Ledger = led
	// Closed last: after the device and the virtual box.
	a.closers = append([]func() error{led.Close}, a.closers...)

	if err := a.openExports(); err != nil {
		return nil, err
	}
	dcfg := dcd.Config{Ledger: led, Device: early, Logger: cfg.Logger.With("component", "dcd"),
		Clock: cfg.Clock, AddTimeout: cfg.AddTimeout, ReleaseTimeout: cfg.ReleaseTimeout}
	if a.Exports != nil {
		dcfg.Guard = a.Exports
	}
	// What host agents report (host/report): a release waits while a
	// host's agent says its memory is in use. The API writes and shows it.
	a.HostReports = report.New(report.Config{Clock: cfg.Clock, TTL: cfg.HostReportTTL})
	dcfg.InUse = func(h dcd.HostID, tag cci.Tag) bool { return a.HostReports.InUse(uint16(h), tag.String()) }
	mgr, err := dcd.NewManager(dcfg)
	if err != nil {
		return nil, err
	}
	a.Manager = mgr
	if err := a.openKV(); err != nil {
		return nil, err
	}
	return a, nil
}

// dialDevice opens the byte stream to a real device: a socket, a tty or a
// virtio port (fabric/serial), or an FTDI-compatible USB serial bridge
// (usb:VID:PID…, bmc/usblink; needs a build with -tags usb and cgo,
// others answer usblink.ErrNoUSB).
func dialDevice(ctx context.Context, addr string, log *slog.Logger) (io.ReadWriteCloser, error) {
	if strings.HasPrefix(addr, "usb:") {
		ucfg, err := usblink.ParseAddr(addr)
		if err != nil {
			return nil, err
		}
		ucfg.Logger = log.With("component", "usb")
		return usblink.Open(ucfg)
	}
	return serial.Dial(ctx, addr)
}

// startSim starts the in-process virtual box and returns the byte stream
// that carries DSP0253 frames to it: one end of an in-memory pipe
// (sim.Pipe) whose other end the box serves, so the daemon speaks exactly
// the bytes it would speak to hardware, without a system call per message.
func (a *Appliance) startSim(ctx context.Context) (io.ReadWriteCloser, error) {
	scfg := a.cfg.Sim
	if scfg.Logger == nil {
		scfg.Logger = a.cfg.Logger.With("component", "sim")
	}
	box, err := sim.New(scfg)
	if err != nil {
		return nil, fmt.Errorf("appliance: virtual box: %w", err)
	}
	a.Box = box
	a.closers = append(a.closers, box.Close)
	ours, theirs := sim.Pipe()
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := box.ServeConn(sctx, theirs); err != nil && sctx.Err() == nil {
			a.cfg.Logger.Debug("virtual box link ended", "err", err)
		}
	}()
	a.closers = append(a.closers, func() error { cancel(); theirs.Close(); <-done; return nil })
	return ours, nil
}

// openExports maps the pool's memory and creates the export service.
func (a *Appliance) openExports() error {
	var mem interface {
		rdma.Memory
		Close() error
	}
	switch {
	case a.Box != nil:
		m, err := rdma.MapFile(a.Box.DRAM().File(), 0, a.Box.DRAM().Size())
		if err != nil {
			return fmt.Errorf("appliance: map the virtual box's memory: %w", err)
		}
		mem = m
	case a.cfg.DAXPath != "":
		m, err := dax.Open(dax.Config{Path: a.cfg.DAXPath})
		if err != nil {
			return fmt.Errorf("appliance: %w", err)
		}
		mem = m
	default:
		a.cfg.Logger.Info("exports disabled: no DAX device given for the pool's memory")
		return nil
	}
	// Exports outlive restarts (Service.Restore says which come back).
	st, err := exportstore.Open(context.Background(), filepath.Join(a.cfg.DataDir, exportstore.File),
		exportstore.Options{Logger: a.cfg.Logger, Clock: a.cfg.Clock})
	if err != nil {
		mem.Close()
		return fmt.Errorf("appliance: %w", err)
	}
	rcfg := rdma.Config{Ledger: a.Ledger, Memory: mem, Logger: a.cfg.Logger.With("component", "rdma"),
		Clock: a.cfg.Clock, Store: st}
	if a.Box != nil {
		rcfg.CountAccess = a.Box.CountAccess // the virtual box's CHMU sees exported traffic
	}
	svc, err := rdma.NewService(rcfg)
	if err != nil {
		mem.Close()
		st.Close()
		return fmt.Errorf("appliance: %w", err)
	}
	a.Exports = svc
	// Closers run in reverse: revoke every export (keeping the records),
	// unmap, close the store.
	a.closers = append(a.closers, st.Close, mem.Close, func() error { return svc.Close(context.Background()) })
	return nil
}

// Start discovers the device, reconciles the ledger with it, starts
// following device events until ctx ends, opens the export server and
// joins the fleet plane.
func (a *Appliance) Start(ctx context.Context) (err error) {
	defer func() {
		if err == nil {
			err = a.startFleet(ctx) // fleet.go: last, the record names the export server
		}
	}()
	// The board controller is discovered while the Manager discovers the
	// device: both are round trips on the one device link, which carries
	// them side by side (each is a tenth of a second of the box's boot
	// under emulation).
	bctx, cancel := context.WithCancel(ctx)
	defer cancel()
	board := make(chan error, 1)
	go func() { board <- a.Board.discover(bctx, a) }()
	if err := a.Manager.Start(ctx); err != nil {
		cancel()
		<-board
		return fmt.Errorf("appliance: %w", err)
	}
	a.startBoard(ctx, <-board)
	if err := a.startTelemetry(ctx); err != nil {
		return err
	}
	if err := a.startKV(ctx); err != nil {
		return err
	}
	a.startHistory(ctx) // after telemetry and KV: it reads them
	if a.Exports == nil {
		a.checkAtStart(ctx)
		return nil
	}
	changes, unsubscribe := a.Manager.Subscribe(256)
	// The ledger now agrees with the device: bring back the exports whose
	// capacity the same grant held all along, before anyone can connect.
	// A failure leaves the others' records for the next start.
	if _, err := a.Exports.Restore(ctx); err != nil {
		a.cfg.Logger.Warn("restoring exports", "err", err)
	}
	// An exported KV namespace's chunk whose export did not come back is
	// exported again with the namespace's token.
	if err := a.KV.ExportMissing(ctx); err != nil {
		a.cfg.Logger.Warn("kv: exporting namespace chunks again", "err", err)
	}
	go a.Exports.Run(ctx, changes)
	a.closers = append(a.closers, func() error { unsubscribe(); return nil })
	a.checkAtStart(ctx) // after Restore: the exports are checked too
	if a.cfg.ExportListen == "" {
		return nil
	}
	ln, err := net.Listen("tcp", a.cfg.ExportListen)
	if err != nil {
		return fmt.Errorf("appliance: export server: %w", err)
	}
	exts, closeVerbs, err := a.exportVerbs()
	if err != nil {
		ln.Close()
		return err
	}
	srv, err := tcp.NewServer(tcp.Config{Auth: a.Exports, Extensions: exts, Logger: a.cfg.Logger.With("component", "rdma-tcp")})
	if err != nil {
		ln.Close()
		closeVerbs()
		return fmt.Errorf("appliance: export server: %w", err)
	}
	a.closers = append(a.closers, closeVerbs) // after the server has closed
	a.ExportAddr = ln.Addr()
	go srv.Serve(ln)
	a.closers = append(a.closers, srv.Close)
	return nil
}

// Close stops everything Open started, in reverse order, after the KV
// store's last events have reached the fleet plane and subscribers
// (QuiesceKV).
func (a *Appliance) Close() error {
	if a.KV != nil && a.closers != nil {
		ctx, cancel := context.WithTimeout(context.Background(), kvQuiesceWait)
		if err := a.QuiesceKV(ctx); err != nil {
			a.cfg.Logger.Warn("kv: events not all delivered before the stop", "err", err)
		}
		cancel()
	}
	var errs []error
	for i := len(a.closers) - 1; i >= 0; i-- {
		errs = append(errs, a.closers[i]())
	}
	a.closers = nil
	return errors.Join(errs...)
}

// Summary describes the box for people, one line per fact.
func Summary(box fabric.Box, ledgerPath string) []string {
	up := 0
	for _, h := range box.Heads {
		if h.LinkUp {
			up++
		}
	}
	lines := []string{
		fmt.Sprintf("device: serial %#016x, firmware %q, %d heads (%d links up)", box.Identity.Serial,
			box.Identity.FirmwareRevision, len(box.Heads), up),
		fmt.Sprintf("dynamic capacity: %s in %d regions", bytesize.Format(box.TotalDynamic), len(box.Regions)),
	}
	for _, r := range box.Regions {
		share := "not sharable"
		if r.Sharable {
			share = "sharable"
		}
		lines = append(lines, fmt.Sprintf("  region %d: %s at DPA %#x, block %s, %s, sanitize on release %v",
			r.Index, bytesize.Format(r.Length), r.Base, bytesize.Format(r.BlockSize), share, r.SanitizeOnRelease))
	}
	lines = append(lines, "ledger: "+ledgerPath)
	return lines
}
