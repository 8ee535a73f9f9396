// Command cxlhost is the host agent: it runs on a host cabled to one head
// of the box, enrolls with the box's Redfish API as that head's System
// (the HostUser account bound to it, `poolctl accounts add h3 --role
// HostUser --system Host3`), and serves `poolctl host attach|detach|list`
// on a local Unix socket (mode 0600). It reports each tag's state to the
// box (accepted, usable, mode, in use, path, size; "release refused: in
// use") on every change and every --heartbeat, so that the box shows what
// the host did with its memory and never forces a release from under a
// running program.
//
//	cxlhost --box https://127.0.0.1:8443 --ca var/tls/cert.pem --user h3 \
//	        --device vbox:unix:/run/cxlsim-host3.sock --listen /run/cxlhost.sock
//
// The password comes from --password-file or CXLHOST_PASSWORD. Device
// backends: the virtual box's external host link (vbox:unix:PATH, see
// `cxlsim --external-host`), or linux (host/linux: /sys/bus/cxl and
// /dev/daxX.Y), which needs --ld because no kernel shows which head the
// link reaches, and whose granted (Dynamic Capacity) attachments need a
// kernel with the Linux DCD series (not merged upstream): on others they
// fail with that reason.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"cxlpool/api/client"
	"cxlpool/host"
	"cxlpool/host/agent"
	"cxlpool/host/linux"
	"cxlpool/host/vbox"
)

// agentPollInitial is the first task-monitor poll interval of attach and
// detach; it doubles from there as the client does.
const agentPollInitial = 5 * time.Millisecond

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout)
	stop()
	if err != nil && !errors.Is(err, flag.ErrHelp) {
		fmt.Fprintln(os.Stderr, "cxlhost:", err)
		os.Exit(1)
	}
}

// run parses args, enrolls and serves until ctx ends. It prints one line
// once the local API is ready.
func run(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("cxlhost", flag.ContinueOnError)
	fs.SetOutput(stdout)
	box := fs.String("box", "https://127.0.0.1:8443", "the box's Redfish API `URL`")
	user := fs.String("user", "", "the HostUser account bound to this host's System (required)")
	passwordFile := fs.String("password-file", "", "read the account's password from `FILE` (else $CXLHOST_PASSWORD)")
	ca := fs.String("ca", "", "trust the box's certificate from PEM `FILE`")
	device := fs.String("device", "", "the host's CXL device: vbox:unix:PATH (a virtual box head, cxlsim --external-host) or linux (required)")
	ld := fs.Int("ld", -1, "with --device linux: the logical device (head) the host's link reaches, which the kernel does not show")
	listen := fs.String("listen", "/run/cxlhost.sock", "local API Unix socket `PATH` for poolctl host")
	level := fs.String("log-level", "info", "log level: debug, info, warn, error")
	heartbeat := fs.Duration("heartbeat", 10*time.Second, "report to the box at least this often (the box shows the host silent after three missed)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(*level)); err != nil {
		return fmt.Errorf("--log-level: %w", err)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lvl}))
	if *user == "" {
		return errors.New("--user is required: the HostUser account of this host's System")
	}
	password := os.Getenv("CXLHOST_PASSWORD")
	if *passwordFile != "" {
		b, err := os.ReadFile(*passwordFile)
		if err != nil {
			return fmt.Errorf("--password-file: %w", err)
		}
		password = strings.TrimRight(string(b), "\r\n")
	}
	if password == "" {
		return errors.New("no password: give --password-file or set CXLHOST_PASSWORD")
	}
	addr, ok := strings.CutPrefix(*device, "vbox:")
	if *device != "linux" && (!ok || !strings.HasPrefix(addr, "unix:")) {
		return fmt.Errorf("--device %q: want vbox:unix:PATH or linux", *device)
	}
	// The agent waits on its own grants: poll their tasks briskly (the
	// client's 100 ms first poll would dominate an attach).
	c, err := client.New(client.Config{Server: *box, User: *user, Password: password, CAFile: *ca, UserAgent: "cxlhost",
		PollInitial: agentPollInitial})
	if err != nil {
		return err
	}
	var be host.Backend
	if *device == "linux" {
		be, err = linux.New(linux.Config{LD: *ld, Logger: log})
	} else {
		be, err = vbox.Dial(ctx, addr, vbox.Config{Logger: log})
	}
	if err != nil {
		return err
	}
	defer be.Close()
	a, err := agent.New(ctx, agent.Config{Backend: be, Box: c, Logger: log, Heartbeat: *heartbeat})
	if err != nil {
		return err
	}
	l, err := agent.Listen(*listen)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "cxlhost: %s (%s) ready on unix:%s\n", a.System(), a.Identity().GCXLID(), *listen)
	return a.Serve(ctx, l)
}
