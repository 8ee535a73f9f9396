package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"cxlpool/api"
	"cxlpool/appliance"
	"cxlpool/internal/bytesize"
	"cxlpool/internal/lograte"
	"cxlpool/sim"
)

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	st := beginStartup()
	fs := flag.NewFlagSet("cxlpoold", flag.ContinueOnError)
	fs.SetOutput(stderr)
	device := fs.String("device", appliance.DeviceSim, "where the device is: sim (built-in virtual box), tcp://HOST:PORT, unix:PATH, tty:/dev/ttyX, virtio:/dev/vportNpM or usb:VID:PID[?serial=S] (USB needs a build with -tags usb and cgo, as the box image has)")
	data := fs.String("data", "./var", "data directory (SQLite inventory, keys)")
	listen := fs.String("listen", "127.0.0.1:8443", "API listen address")
	plainHTTP := fs.Bool("http", false, "serve the API over plain HTTP instead of TLS (development only)")
	exportListen := fs.String("export-listen", "", "serve exported pool memory to remote racks on this TCP address (empty: off)")
	exportRDMA := addExportRDMAFlag(fs) // export_rdma.go
	kvListen := fs.String("kv-listen", "", "serve the KV-cache store's index protocol to hosts on this TCP address (empty: off)")
	kvSocket := fs.String("kv-socket", "", "serve the KV-cache store's index protocol on this unix socket (empty: off)")
	daxPath := fs.String("dax", "", "DAX device that maps the pool's memory for exports on hardware (the virtual box needs none)")
	logLevel := fs.String("log-level", "info", "log level: debug, info, warn, error")
	startGate := fs.Int("start-gate", -1, "wait for a byte on this file descriptor before opening the data directory or the device (a supervisor preparing the box; -1: no wait)")
	simHeads := fs.Int("sim-heads", 8, "virtual box: number of host heads")
	scfg := sim.DefaultConfig()
	simCap := bytesize.Value(scfg.Capacity)
	fs.Var(&simCap, "sim-capacity", "virtual box: dynamic capacity")
	simBlock := bytesize.Value(scfg.BlockSize)
	fs.Var(&simBlock, "sim-block-size", "virtual box: DC block size")
	addTimeout := fs.Duration("add-timeout", 10*time.Second, "how long a host may take to accept offered capacity")
	releaseTimeout := fs.Duration("release-timeout", 10*time.Second, "how long a host may take to release before the release is forced")
	chmuLoc := fs.String("chmu", "", "telemetry on a real device: its CHMU register block, PATH[@OFFSET] of a PCI BAR resource file or pci:BDF (empty: telemetry off; the virtual box has its own)")
	external := sim.ExternalHosts{}
	fs.Var(&external, "external-host", "virtual box: hand head LD to an external host process (cxlhost): LD=unix:PATH; repeatable or comma separated")
	simWorkload := fs.String("sim-workload", appliance.SimWorkloadMixed, "virtual box: the workload hosts run once they hold capacity: none, mixed, zipf, hotset or kvcache")
	fleetFlags, aggFlags := addFleetFlags(fs), addAggregatorFlags(fs) // fleet.go
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
		return fmt.Errorf("--log-level: %w", err)
	}
	var handler slog.Handler = slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level})
	if level > slog.LevelDebug {
		// A failure that repeats (a device link that drops as soon as
		// it is up, a flood of refused connections) writes its first
		// lines and then a count, not a line per occurrence; debug
		// logging shows every step.
		handler = lograte.New(handler, lograte.Options{})
	}
	log := slog.New(handler)
	workload, err := appliance.ParseSimWorkload(*simWorkload)
	if err != nil {
		return fmt.Errorf("--sim-workload: %w", err)
	}
	if *chmuLoc != "" {
		if _, err := appliance.ParseCHMU(*chmuLoc); err != nil {
			return fmt.Errorf("--chmu: %w", err)
		}
	}

	scheme := "https"
	if *plainHTTP {
		scheme = "http"
	}
	apiURL := scheme + "://" + *listen + "/redfish/v1"
	fleetCfg, err := fleetFlags.config(apiURL)
	if err != nil {
		return err
	}
	aggCfg, err := aggFlags.config(apiURL)
	if err != nil {
		return err
	}

	scfg.Heads = *simHeads
	scfg.Capacity, scfg.BlockSize = uint64(simCap), uint64(simBlock)

	st.phase("flags")
	if *startGate >= 0 {
		if err := waitStartGate(*startGate); err != nil {
			return err
		}
		st.phase("gate")
	}
	app, err := appliance.Open(ctx, appliance.Config{
		Device: *device, DataDir: *data, Listen: *listen, Sim: scfg, Logger: log,
		AddTimeout: *addTimeout, ReleaseTimeout: *releaseTimeout,
		ExportListen: *exportListen, DAXPath: *daxPath, ExportRDMA: *exportRDMA,
		KVListen: *kvListen, KVSocket: *kvSocket,
		CHMU: *chmuLoc, SimWorkload: workload, Fleet: fleetCfg,
	})
	if err != nil {
		return err
	}
	defer app.Close()
	if len(external) > 0 { // before Start: no grant may reach a built-in host of those heads
		if app.Box == nil {
			return errors.New("--external-host needs the built-in virtual box (--device sim)")
		}
		hctx, hcancel := context.WithCancel(ctx)
		wait, err := app.Box.ServeExternalHosts(hctx, external)
		if err != nil {
			hcancel()
			return fmt.Errorf("--external-host: %w", err)
		}
		defer func() {
			hcancel()
			wait()
		}()
		fmt.Fprintf(stdout, "cxlpoold: external hosts %s\n", external)
	}
	fmt.Fprintf(stdout, "cxlpoold: connecting to device %s\n", *device)
	st.phase("open") // the ledger and the device link
	// Start (the device's discovery, reconcile, the board controller) runs
	// while the API server is built, unless Start makes something the API
	// takes: telemetry (the virtual box's CHMU, --chmu) or the export
	// listener. The one waits on the device link, the other on the CPU.
	overlap := *device != appliance.DeviceSim && *chmuLoc == "" && *exportListen == ""
	started := startAsync(ctx, app)
	// Start returns before the deferred Close.
	defer started()
	var fev fleetEvents
	var tel api.Telemetry // a nil *appliance.Telemetry must stay a nil interface
	var exportAddr net.Addr
	if !overlap {
		if err := started(); err != nil {
			return err
		}
		st.phase("discovery") // the device, reconcile, the board controller, telemetry
		fev.started(app)
		if app.Telemetry != nil {
			tel = app.Telemetry
		}
		exportAddr = app.ExportAddr
	}
	acfg := api.Config{
		Manager: app.Manager, Device: app.Device, DataDir: *data, Logger: log.With("component", "api"),
		AdminPassword: os.Getenv("CXLPOOL_ADMIN_PASSWORD"), Out: stdout, FirmwareVersion: version,
		Exports: app.Exports, ExportAddr: exportAddr,
		KV:          app.KV,
		KVEvents:    app.SubscribeKVEvents,
		Telemetry:   tel,
		History:     app.History, // appliance/history.go: history and alerts
		Board:       app.Board,
		HostReports: app.HostReports, // what host agents report; a release waits while they say in use
		LocalCXL:    localCXL(),      // image.go
		// The check after reconcile; violations become an event.
		StartCheck: app.StartCheck,
		OnEvent:    fev.publish, // fleet.go
	}
	if fleetCfg.Enabled {
		acfg.Fleet = fleetView{app} // fleet.go
	}
	if upd := imageUpdater(log); upd != nil {
		acfg.Update, acfg.Reboot = upd, reboot
	}
	acfg.SetTime = imageClock() // image.go: only the image owns its clock
	// network_linux.go: the image owns its network and time service too.
	acfg.Network = imageNetwork(ctx, log)
	srv, err := api.New(acfg)
	if err != nil {
		return err
	}
	st.phase("api") // accounts, routes
	defer srv.Close()
	if overlap {
		if err := started(); err != nil {
			return err
		}
		st.phase("discovery") // what is left of it
		fev.started(app)
	}
	// Bound before the banner: whoever waits for "Redfish API at" (a
	// supervisor, a test) may connect at once.
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return fmt.Errorf("cxlpoold: API: listen on %s: %w", *listen, err)
	}
	for _, l := range appliance.Summary(app.Manager.Box(), filepath.Join(*data, appliance.LedgerFile)) {
		fmt.Fprintln(stdout, "cxlpoold:", l)
	}
	if exportAddr != nil {
		fmt.Fprintf(stdout, "cxlpoold: exports to remote racks on tcp://%s\n", exportAddr)
	}
	if app.Fleet != nil {
		fmt.Fprintf(stdout, "cxlpoold: fleet plane: box %s on NATS %s\n", app.Fleet.Service.Box(), app.Fleet.URLs())
	}
	if app.Telemetry != nil {
		fmt.Fprintf(stdout, "cxlpoold: telemetry at %s://%s/redfish/v1/TelemetryService, frame stream ws%s://%s%s (sim workload: %s)\n",
			scheme, *listen, strings.TrimPrefix(scheme, "http"), *listen, api.TelemetryStreamURI, workload)
	}
	fmt.Fprintf(stdout, "cxlpoold: Redfish API at %s://%s/redfish/v1 (credentials: %s); Ctrl-C stops\n",
		scheme, *listen, srv.CredentialsNote())
	if !*plainHTTP {
		fmt.Fprintf(stdout, "cxlpoold: TLS certificate %s\n", srv.CertPath())
	}
	st.done(log)
	registerAggregator(ctx, aggCfg, log.With("component", "fleet")) // fleet.go
	// On a stop the KV store's last block events reach the fleet plane and
	// the API's event streams before the API closes them.
	serveCtx, stopServing := context.WithCancel(context.WithoutCancel(ctx))
	defer stopServing()
	go func() {
		select {
		case <-ctx.Done():
		case <-serveCtx.Done():
			return
		}
		qctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if err := app.QuiesceKV(qctx); err != nil {
			log.Warn("kv: events not all delivered before the stop", "err", err)
		}
		cancel()
		stopServing()
	}()
	if err := srv.ServeListener(serveCtx, ln, *plainHTTP); err != nil && ctx.Err() == nil {
		return err
	}
	fmt.Fprintln(stdout, "cxlpoold: stopping")
	app.Manager.Wait()
	return nil
}

// version is the build's version, set with -ldflags "-X main.version=...".
var version = "dev"
