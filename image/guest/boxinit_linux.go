package guest

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/u-root/u-root/pkg/kmodule"

	"cxlpool/fabric/linuxcxl"
	"cxlpool/image/disk"
	"cxlpool/image/update"
)

// Paths inside the image.
const (
	ConfigPath    = "/etc/cxlpool/boxinit.conf"
	ModulesList   = "/etc/cxlpool/modules"
	DaemonPath    = "/bin/cxlpoold"
	DataMount     = "/data"
	DataConfig    = "cxlpool.conf"
	VirtioPortDir = "/dev/virtio-ports"
)

// Init runs the box's start-up. Out is the console.
type Init struct {
	Out io.Writer
	// daemonUp starts what waits for the daemon to answer: the modules
	// it does not need and the console shell.
	daemonUp func()
	// probe loads a kernel module and its dependencies (u-root's
	// kmodule.Prober, shared by every stage so each module loads once).
	probe func(name string) error
}

func (in *Init) printf(format string, args ...any) {
	fmt.Fprintf(in.Out, "[%8.3f] cxlpool: "+format+"\n", append([]any{uptime().Seconds()}, args...)...)
}

// stamped copies a program's output to the console line by line, each
// line prefixed with the time since boot like the kernel's messages.
func (in *Init) stamped() (io.WriteCloser, func()) {
	pr, pw := io.Pipe()
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			fmt.Fprintf(in.Out, "[%8.3f] %s\n", uptime().Seconds(), sc.Text())
		}
		_, _ = io.Copy(io.Discard, pr)
	}()
	return pw, func() { pw.Close(); <-done }
}

// uptime is the time since the kernel started, from /proc/uptime.
func uptime() time.Duration {
	b, err := os.ReadFile("/proc/uptime")
	if err != nil {
		return 0
	}
	var s float64
	fmt.Sscanf(string(b), "%f", &s)
	return time.Duration(s * float64(time.Second))
}

// loadConfig reads the three configuration layers (the data partition's
// only when it is mounted).
func loadConfig() (Config, error) {
	var c Config
	if err := c.LoadFile(ConfigPath); err != nil {
		return c, err
	}
	if err := c.LoadFile(filepath.Join(DataMount, DataConfig)); err != nil {
		return c, err
	}
	cl, _ := os.ReadFile("/proc/cmdline")
	return c, c.ParseCmdline(string(cl))
}

// Main is the box's start-up: it prepares the box and supervises
// cxlpoold, starting the operator's shell on the console once the daemon
// answers (or after ten seconds); it returns only when ctx ends. u-root's
// init would end (and the kernel panic) if its uinit and shells all
// returned, so this process stays for the box's life.
func (in *Init) Main(ctx context.Context) error {
	cfg, err := loadConfig()
	if err != nil {
		in.printf("configuration: %v (using what parsed)", err)
	}
	if cfg.Bare {
		in.printf("bare boot at %.2fs: console shell only", uptime().Seconds())
		in.shell(ctx)
		return nil
	}
	in.printf("init at %.2fs", uptime().Seconds())
	if p, err := kmodule.NewProber(kmodule.ProbeOpts{}); err != nil {
		in.printf("modules: %v", err)
	} else {
		in.probe = func(name string) error { return p.Probe(name, "") }
	}
	// The daemon starts now and waits at its gate until the data
	// partition is mounted (see StartDaemon). It runs with the settings
	// known so far; if the data partition's change its arguments, it is
	// withdrawn and started again.
	early, err := in.StartDaemon(ctx, cfg, true)
	if err != nil {
		in.printf("%v", err)
	}
	// The disk, network and device link come first; the daemon does not
	// wait for the rest (CXL memory devices, USB serial, other NICs).
	stage := func(st int) func(string) bool { return func(name string) bool { return ModuleStage(name) == st } }
	usb := in.startUSBLink(ctx, cfg)
	in.loadModules(ModulesList, "early", stage(StageEarly))
	// What the daemon's start does not need waits until the daemon
	// answers (or a while): the other modules, whose probing would
	// compete with that start for the CPU under emulation, and the
	// console shell, a second Go program starting up.
	up := make(chan struct{})
	in.daemonUp = sync.OnceFunc(func() { close(up) })
	afterStart := func(limit time.Duration) bool {
		select {
		case <-up:
		case <-time.After(limit):
		case <-ctx.Done():
			return false
		}
		return true
	}
	go func() {
		if afterStart(30 * time.Second) {
			in.loadModules(ModulesList, "late", stage(StageLate))
			in.reportCXL()
		}
	}()
	go func() {
		if afterStart(10 * time.Second) {
			in.shell(ctx)
		}
	}()
	// The daemon binds the wildcard address: it need not wait for the
	// interface's configuration. The network's settings are the owner's
	// (net.* in the data partition's cxlpool.conf): it is configured
	// once that is read.
	netCfg := make(chan Config, 1)
	netLoaded := make(chan struct{})
	go func() {
		in.loadModules(ModulesList, "network", stage(StageNet))
		close(netLoaded)
		var c Config
		select {
		case c = <-netCfg:
		case <-ctx.Done():
			return
		}
		if err := in.network(ctx, c); err != nil && ctx.Err() == nil {
			in.printf("network: %v", err)
		}
	}()
	if err := in.mountData(ctx, cfg); err != nil {
		in.printf("data partition: %v; the daemon keeps its data in memory until this is fixed", err)
		_ = os.MkdirAll(DataMount, 0o700)
	}
	if cfg2, err := loadConfig(); err == nil {
		cfg = cfg2
	} else {
		in.printf("configuration: %v", err)
	}
	netCfg <- cfg
	// The RDMA device, when there is to be one, before the daemon's
	// start: its export server opens the device then.
	rdmaDone := make(chan struct{})
	if cfg.WantsRDMA() {
		go func() {
			defer close(rdmaDone)
			select {
			case <-netLoaded:
			case <-ctx.Done():
				return
			}
			if err := in.setupRDMA(ctx, cfg); err != nil {
				in.printf("rdma: %v (exports over TCP only)", err)
			}
		}()
	} else {
		close(rdmaDone)
	}
	if strings.HasPrefix(cfg.Device, "virtio:") {
		if err := waitVirtioPort(ctx, strings.TrimPrefix(cfg.Device, "virtio:"), 10*time.Second); err != nil {
			in.printf("device link: %v", err)
		}
	}
	if usb = usb.forDevice(ctx, in, cfg); usb != nil {
		if err := <-usb.done; err != nil {
			in.printf("device link: %v", err)
		}
	}
	if !entropyReady() {
		// Without a hardware RNG (RDRAND, virtio-rng) the kernel seeds its
		// pool from timer jitter, which under emulation takes about a
		// second: the daemon's first random numbers (SQLite, TLS,
		// passwords) would wait for it.
		in.printf("random pool not initialised yet: the daemon waits for it (no hardware RNG?)")
	}
	<-rdmaDone
	if early != nil && !early.Runs(cfg) {
		in.printf("the data partition's settings change the daemon's: starting it again")
		early.Withdraw()
		early = nil
	}
	in.printf("ready at %.2fs", uptime().Seconds())
	go in.updatePort(ctx, cfg)
	return in.Supervise(ctx, cfg, early)
}

// shell keeps an operator shell on the console, restarting it when it
// exits (as getty would).
func (in *Init) shell(ctx context.Context) {
	for delay := time.Second; ctx.Err() == nil; delay = min(2*delay, time.Minute) {
		tty, err := os.OpenFile("/dev/console", os.O_RDWR, 0)
		if err != nil {
			in.printf("console shell: %v", err)
			return
		}
		cmd := exec.CommandContext(ctx, "/bin/defaultsh")
		cmd.Stdin, cmd.Stdout, cmd.Stderr = tty, tty, tty
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
		start := time.Now()
		err = cmd.Run()
		tty.Close()
		if time.Since(start) > time.Minute {
			delay = time.Second
		}
		select {
		case <-ctx.Done():
		case <-time.After(delay):
		}
		_ = err
	}
}

// Module stages: what the daemon needs before it starts (the virtio disk
// and console, ext4 and the crc32c it asks the crypto API for), the NICs
// (loaded while the daemon starts: it binds the wildcard address), and
// the rest (CXL memory devices, USB serial, accelerated crc32c), loaded
// once the daemon answers so that under emulation their probing does not
// compete with its start; soft-RoCE's only when the box serves exports
// over it (rdma.go).
const (
	StageEarly = iota
	StageNet
	StageLate
	StageRDMA
)

// ModuleStage returns the stage a module loads in.
func ModuleStage(name string) int {
	switch name {
	case "virtio", "virtio_ring", "virtio_pci_legacy_dev", "virtio_pci_modern_dev", "virtio_pci",
		"virtio_blk", "virtio_console", "crc32c_generic", "crc16", "mbcache", "jbd2", "ext4":
		return StageEarly
	case "failover", "net_failover", "virtio_net", "e1000e":
		return StageNet
	}
	if slices.Contains(rxeModules, name) {
		return StageRDMA // only when configured (rdma.go)
	}
	return StageLate
}

// loadModules loads one stage's modules (see ProbeConcurrently) and says
// how it went on the console.
func (in *Init) loadModules(list, stage string, want func(name string) bool) {
	start := time.Now()
	names, err := ReadModuleList(list, want)
	if err != nil {
		in.printf("modules: %v", err)
	}
	probe := in.probe
	if probe == nil {
		probe = func(string) error { return errNoProber }
	}
	line, errs := ModuleSummary(ProbeConcurrently(names, runtime.NumCPU(), probe), time.Since(start))
	for _, e := range errs {
		in.printf("module: %v", e)
	}
	in.printf("%s: %s", stage, line)
}

// network configures the interface: by DHCP (net.dhcp; it then keeps
// the lease for the box's life) or with the static address, and the
// resolver.
func (in *Init) network(ctx context.Context, cfg Config) error {
	if cfg.NetIface == "" {
		return nil
	}
	if cfg.NetDHCP {
		return in.dhcp(ctx, cfg)
	}
	if cfg.NetAddress == "" {
		return nil
	}
	if err := waitPath(ctx, "/sys/class/net/"+cfg.NetIface, 10*time.Second); err != nil {
		return err
	}
	if err := configureInterface(cfg.NetIface, cfg.NetAddress, cfg.NetGateway); err != nil {
		return err
	}
	in.printf("network: %s %s via %s", cfg.NetIface, cfg.NetAddress, cfg.NetGateway)
	return in.writeResolver(ResolvConf, cfg.NameServers, nil, nil, "")
}

// waitPath polls until path exists: devices appear asynchronously after
// their driver loads, and there is no udev to tell us.
func waitPath(ctx context.Context, path string, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		if _, err := os.Stat(path); err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s did not appear within %v", path, limit)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// mountData finds the data partition by its GPT name and mounts it.
func (in *Init) mountData(ctx context.Context, cfg Config) error {
	if err := waitPath(ctx, cfg.Disk, 10*time.Second); err != nil {
		return err
	}
	f, err := os.Open(cfg.Disk)
	if err != nil {
		return err
	}
	size, _ := f.Seek(0, io.SeekEnd)
	parts, err := disk.ReadTable(f, size)
	f.Close()
	if err != nil {
		return err
	}
	p, err := disk.Find(parts, disk.DataName)
	if err != nil {
		return err
	}
	dev := disk.DevicePath(cfg.Disk, p.Index)
	if err := waitPath(ctx, dev, 10*time.Second); err != nil {
		return err
	}
	if err := os.MkdirAll(DataMount, 0o755); err != nil {
		return err
	}
	// Not synchronous by default: SQLite syncs at commit and the daemon
	// writes its TLS key and certificate through a synced temporary file
	// and a rename, so a power cut leaves them whole; the first start's
	// other files are synced once the daemon answers (syncData). A
	// synchronous mount (data.sync) made every page SQLite writes wait
	// for a journal commit.
	flags, how := uintptr(unix.MS_NOATIME), ""
	if cfg.DataSync {
		flags, how = flags|unix.MS_SYNCHRONOUS, " (sync)"
	}
	if err := unix.Mount(dev, DataMount, "ext4", flags, ""); err != nil {
		return fmt.Errorf("mount %s on %s: %w", dev, DataMount, err)
	}
	in.printf("data partition %s mounted on %s%s", dev, DataMount, how)
	return nil
}

// waitVirtioPort waits for the virtio-serial port behind path
// (/dev/virtio-ports/NAME) and creates that link, as udev would.
func waitVirtioPort(ctx context.Context, path string, limit time.Duration) error {
	dir, name := filepath.Split(path)
	if filepath.Clean(dir) != VirtioPortDir {
		return waitPath(ctx, path, limit)
	}
	deadline := time.Now().Add(limit)
	for {
		ports, _ := filepath.Glob("/sys/class/virtio-ports/*/name")
		for _, p := range ports {
			b, err := os.ReadFile(p)
			if err != nil || strings.TrimSpace(string(b)) != name {
				continue
			}
			dev := filepath.Base(filepath.Dir(p))
			if err := os.MkdirAll(VirtioPortDir, 0o755); err != nil {
				return err
			}
			if err := os.Symlink("../"+dev, path); err != nil && !errors.Is(err, os.ErrExist) {
				return err
			}
			return waitPath(ctx, "/dev/"+dev, limit)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no virtio-serial port named %q within %v", name, limit)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Supervise runs cxlpoold until the box stops: it waits for the API to
// answer, then commits a trial boot and reports the local CXL memory
// devices; it restarts the daemon when it exits. A trial boot whose
// daemon never answers within the health timeout reboots the box, and
// the boot loader returns to the previous slot. first, when not nil, is
// the daemon's first run, started early and waiting at its gate.
func (in *Init) Supervise(ctx context.Context, cfg Config, first *Daemon) error {
	healthy := false
	for attempt := 0; ; attempt++ {
		d := first
		first = nil
		if d == nil {
			var err error
			if d, err = in.StartDaemon(ctx, cfg, false); err != nil {
				return err
			}
		} else {
			d.Open()
		}
		if !healthy {
			if err := waitHealthy(ctx, cfg, d.exited); err != nil {
				in.printf("daemon not healthy: %v", err)
				if in.trial(cfg) {
					in.printf("trial boot of slot %s failed: rebooting to the previous slot", cfg.Slot)
					reboot()
				}
			} else {
				healthy = true
				in.printf("daemon healthy: API up at %.2fs", uptime().Seconds())
				syncData()
				in.commit(cfg)
				if in.daemonUp != nil {
					in.daemonUp()
				}
			}
		}
		err := <-d.exited
		if ctx.Err() != nil {
			return ctx.Err()
		}
		in.printf("cxlpoold exited: %v; restarting", err)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Duration(min(attempt+1, 30)) * time.Second):
		}
	}
}

// Daemon is one run of cxlpoold.
type Daemon struct {
	args   []string
	env    []string
	gate   *os.File // the write end of its start gate, nil once opened
	exited chan error
}

// daemonEnv is the daemon's environment for cfg.
func daemonEnv(cfg Config) []string {
	env := append(os.Environ(), cfg.Env...)
	if cfg.AdminPassword != "" {
		env = append(env, "CXLPOOL_ADMIN_PASSWORD="+cfg.AdminPassword)
	}
	return env
}

// StartDaemon starts cxlpoold for cfg, its output stamped on the console.
// A gated daemon starts up to its --start-gate and waits there, without
// touching its data or device, until Open: the box's init starts it
// while it loads modules and mounts the data partition, so that the
// program's own start (a fifth of a second under emulation) overlaps
// that work.
func (in *Init) StartDaemon(ctx context.Context, cfg Config, gated bool) (*Daemon, error) {
	d := &Daemon{args: cfg.DaemonArgs(), env: daemonEnv(cfg), exited: make(chan error, 1)}
	cmd := exec.CommandContext(ctx, DaemonPath, d.args...)
	var gate *os.File
	if gated {
		r, w, err := os.Pipe()
		if err != nil {
			return nil, fmt.Errorf("guest: start gate: %w", err)
		}
		gate, d.gate = r, w
		cmd.ExtraFiles = []*os.File{r} // descriptor 3
		cmd.Args = append(cmd.Args, "--start-gate", "3")
	}
	out, flush := in.stamped()
	cmd.Stdout, cmd.Stderr, cmd.Env = out, out, d.env
	how := ""
	if gated {
		how = " (waiting for the data partition)"
	}
	in.printf("starting %s %s%s", DaemonPath, strings.Join(d.args, " "), how)
	err := cmd.Start()
	if gate != nil {
		gate.Close()
	}
	if err != nil {
		flush()
		if d.gate != nil {
			d.gate.Close()
		}
		return nil, fmt.Errorf("guest: start daemon: %w", err)
	}
	go func() {
		err := cmd.Wait()
		flush()
		d.exited <- err
	}()
	return d, nil
}

// Runs reports whether d was started for cfg's daemon arguments and
// environment.
func (d *Daemon) Runs(cfg Config) bool {
	return slices.Equal(d.args, cfg.DaemonArgs()) && slices.Equal(d.env, daemonEnv(cfg))
}

// Open lets a gated daemon go on.
func (d *Daemon) Open() {
	if d.gate != nil {
		_, _ = d.gate.Write([]byte{1})
		d.gate.Close()
		d.gate = nil
	}
}

// Withdraw ends a gated daemon that has not been let go: closing its
// gate makes it exit before touching anything.
func (d *Daemon) Withdraw() {
	if d.gate != nil {
		d.gate.Close()
		d.gate = nil
	}
	<-d.exited
}

// waitHealthy polls the API's service root until it answers 200.
func waitHealthy(ctx context.Context, cfg Config, exited <-chan error) error {
	_, port, err := net.SplitHostPort(cfg.Listen)
	if err != nil {
		return err
	}
	addr := net.JoinHostPort("127.0.0.1", port)
	deadline := time.Now().Add(cfg.HealthTimeout)
	for {
		select {
		case err := <-exited:
			return fmt.Errorf("exited before answering: %v", err)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		if probe(addr, !cfg.HTTP) == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no answer from %s within %v", addr, cfg.HealthTimeout)
		}
	}
}

// probe sends GET /redfish/v1 and wants 200. It speaks just enough
// HTTP/1.1 by hand: net/http would add megabytes to the initramfs.
func probe(addr string, useTLS bool) error {
	d := &net.Dialer{Timeout: 2 * time.Second}
	var c net.Conn
	var err error
	if useTLS {
		// The certificate is the box's own self-signed one; this is loopback.
		c, err = tls.DialWithDialer(d, "tcp", addr, &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // loopback health probe
	} else {
		c, err = d.Dial("tcp", addr)
	}
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := io.WriteString(c, "GET /redfish/v1 HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if f := strings.Fields(line); len(f) < 2 || f[1] != "200" {
		return fmt.Errorf("service root answered %q", strings.TrimSpace(line))
	}
	return nil
}

func (in *Init) trial(cfg Config) bool {
	if cfg.Slot == "" {
		return false
	}
	d, err := update.Open(cfg.Disk)
	if err != nil {
		return false
	}
	defer d.Close()
	st, err := d.State()
	return err == nil && st.Trial == cfg.Slot
}

// commit marks the booted slot good once the daemon is healthy.
func (in *Init) commit(cfg Config) {
	if cfg.Slot == "" {
		return
	}
	d, err := update.Open(cfg.Disk)
	if err != nil {
		in.printf("boot control: %v", err)
		return
	}
	defer d.Close()
	ok, err := d.MarkGood(cfg.Slot)
	switch {
	case err != nil:
		in.printf("boot control: commit slot %s: %v", cfg.Slot, err)
	case ok:
		in.printf("slot %s committed: the update is now the active image", cfg.Slot)
	default:
		in.printf("running slot %s (active)", cfg.Slot)
	}
}

// reportCXL prints the local CXL memory devices found by the kernel.
func (in *Init) reportCXL() {
	r := linuxcxl.New(linuxcxl.Options{})
	devs, err := r.List()
	// Devices behind CXL ports may still be probing: give them a moment.
	for i := 0; err == nil && len(devs) == 0 && i < 50; i++ {
		time.Sleep(100 * time.Millisecond)
		devs, err = r.List()
	}
	if err != nil {
		in.printf("local CXL: %v", err)
		return
	}
	for _, d := range devs {
		in.printf("local CXL %s", d.Summary())
	}
	if len(devs) == 0 {
		in.printf("local CXL: no memory devices")
	}
}

// entropyReady reports whether the kernel's random pool is initialised:
// whether getrandom would return at once.
func entropyReady() bool {
	var b [1]byte
	_, err := unix.Getrandom(b[:], unix.GRND_NONBLOCK)
	return err == nil
}

// syncData writes what the daemon's first start left in the page cache
// (the initial password file, settings) to the data partition. The
// partition is not mounted synchronously: SQLite and the TLS key writer
// sync what must survive a power cut themselves, and a synchronous mount
// turned each of SQLite's page writes into a journal commit (a second of
// a first start under emulation).
func syncData() {
	f, err := os.Open(DataMount)
	if err != nil {
		return
	}
	defer f.Close()
	_ = unix.Syncfs(int(f.Fd()))
}

func reboot() {
	unix.Sync()
	_ = unix.Reboot(unix.LINUX_REBOOT_CMD_RESTART)
}

// RunUinit is the box's uinit as a program: u-root's init starts it once
// the root file system is up. It writes to the console itself (init
// hands it a pipe that closes when init's own output ends) and silences
// the standard logger, through which u-root's dhclient logs each DHCP
// packet whole; boxinit says what matters on the console itself.
func RunUinit(ctx context.Context) error {
	var out io.Writer = os.Stdout
	if c, err := os.OpenFile("/dev/console", os.O_WRONLY, 0); err == nil {
		out = c
	}
	log.SetOutput(io.Discard)
	return (&Init{Out: out}).Main(ctx)
}
