package guest

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

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
	// lateModules starts loading the modules the daemon does not need.
	lateModules func()
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

// Main is the box's start-up: it prepares the box, starts the operator's
// shell on the console and then supervises cxlpoold; it returns only when
// ctx ends. u-root's init would end (and the kernel panic) if its uinit
// and shells all returned, so this process stays for the box's life.
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
	t := time.Now()
	// The disk, network and device link come first; the daemon does not
	// wait for the rest (CXL memory devices, USB serial, other NICs).
	mods := "/lib/modules/" + kernelRelease()
	stage := func(st int) func(string) bool { return func(name string) bool { return ModuleStage(name) == st } }
	n, errs := LoadModules(ModulesList, mods, stage(StageEarly))
	for _, e := range errs {
		in.printf("module: %v", e)
	}
	in.printf("%d early modules loaded in %v", n, time.Since(t).Round(time.Millisecond))
	// The rest wait until the daemon answers (or a while): under
	// emulation their probing would compete with its start for the CPU.
	late := make(chan struct{})
	in.lateModules = sync.OnceFunc(func() { close(late) })
	go func() {
		select {
		case <-late:
		case <-time.After(30 * time.Second):
		case <-ctx.Done():
			return
		}
		t := time.Now()
		n, errs := LoadModules(ModulesList, mods, stage(StageLate))
		for _, e := range errs {
			in.printf("module: %v", e)
		}
		in.printf("%d more modules loaded in %v", n, time.Since(t).Round(time.Millisecond))
		in.reportCXL()
	}()
	// The daemon binds the wildcard address: it need not wait for the
	// interface's configuration.
	go func() {
		n, errs := LoadModules(ModulesList, mods, stage(StageNet))
		for _, e := range errs {
			in.printf("module: %v", e)
		}
		in.printf("%d network modules loaded", n)
		if err := in.network(ctx, cfg); err != nil {
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
	if strings.HasPrefix(cfg.Device, "virtio:") {
		if err := waitVirtioPort(ctx, strings.TrimPrefix(cfg.Device, "virtio:"), 10*time.Second); err != nil {
			in.printf("device link: %v", err)
		}
	}
	in.printf("ready at %.2fs", uptime().Seconds())
	go in.shell(ctx)
	go in.updatePort(ctx, cfg)
	return in.Supervise(ctx, cfg)
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

func kernelRelease() string {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return ""
	}
	return unix.ByteSliceToString(u.Release[:])
}

// Module stages: what the daemon needs before it starts (the virtio disk
// and console, ext4 and the crc32c it asks the crypto API for), the NICs
// (loaded while the daemon starts: it binds the wildcard address), and
// the rest (CXL memory devices, USB serial, accelerated crc32c), loaded
// once the daemon answers so that under emulation their probing does not
// compete with its start.
const (
	StageEarly = iota
	StageNet
	StageLate
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
	return StageLate
}

// LoadModules loads the modules named in list (one per line, dependencies
// first, as the build wrote them) for which want is true, from dir, whose
// modules.dep gives each module's file. It returns how many loaded and
// what failed; a module already present is not an error.
func LoadModules(list, dir string, want func(name string) bool) (int, []error) {
	b, err := os.ReadFile(list)
	if err != nil {
		return 0, []error{err}
	}
	paths := map[string]string{}
	if dep, err := os.ReadFile(filepath.Join(dir, "modules.dep")); err == nil {
		for _, line := range strings.Split(string(dep), "\n") {
			p, _, ok := strings.Cut(line, ":")
			if ok {
				base := strings.TrimSuffix(filepath.Base(p), ".ko")
				paths[strings.ReplaceAll(base, "-", "_")] = filepath.Join(dir, p)
			}
		}
	}
	n := 0
	var errs []error
	for _, name := range strings.Fields(string(b)) {
		if !want(name) {
			continue
		}
		p, ok := paths[name]
		if !ok {
			errs = append(errs, fmt.Errorf("%s: not in modules.dep", name))
			continue
		}
		f, err := os.Open(p)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		err = unix.FinitModule(int(f.Fd()), "", 0)
		f.Close()
		switch {
		case err == nil:
			n++
		case errors.Is(err, unix.EEXIST):
		default:
			errs = append(errs, fmt.Errorf("%s: %w", name, err))
		}
	}
	return n, errs
}

// network configures the interface.
func (in *Init) network(ctx context.Context, cfg Config) error {
	if cfg.NetAddress == "" || cfg.NetIface == "" {
		return nil
	}
	if err := waitPath(ctx, "/sys/class/net/"+cfg.NetIface, 10*time.Second); err != nil {
		return err
	}
	if err := configureInterface(cfg.NetIface, cfg.NetAddress, cfg.NetGateway); err != nil {
		return err
	}
	in.printf("network: %s %s via %s", cfg.NetIface, cfg.NetAddress, cfg.NetGateway)
	return nil
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
	// Synchronous: every write is on the disk when it returns, so a power
	// cut never leaves a file that was written whole (a key, a
	// certificate, a config) empty or short. The data partition sees
	// little traffic; SQLite syncs at commit anyway.
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
// the boot loader returns to the previous slot.
func (in *Init) Supervise(ctx context.Context, cfg Config) error {
	healthy := false
	for attempt := 0; ; attempt++ {
		cmd := exec.CommandContext(ctx, DaemonPath, cfg.DaemonArgs()...)
		out, flush := in.stamped()
		cmd.Stdout, cmd.Stderr = out, out
		cmd.Env = append(os.Environ(), cfg.Env...)
		if cfg.AdminPassword != "" {
			cmd.Env = append(cmd.Env, "CXLPOOL_ADMIN_PASSWORD="+cfg.AdminPassword)
		}
		in.printf("starting %s %s", DaemonPath, strings.Join(cfg.DaemonArgs(), " "))
		if err := cmd.Start(); err != nil {
			flush()
			return fmt.Errorf("guest: start daemon: %w", err)
		}
		exited := make(chan error, 1)
		go func() {
			err := cmd.Wait()
			flush()
			exited <- err
		}()
		if !healthy {
			if err := waitHealthy(ctx, cfg, exited); err != nil {
				in.printf("daemon not healthy: %v", err)
				if in.trial(cfg) {
					in.printf("trial boot of slot %s failed: rebooting to the previous slot", cfg.Slot)
					reboot()
				}
			} else {
				healthy = true
				in.printf("daemon healthy: API up at %.2fs", uptime().Seconds())
				in.commit(cfg)
				if in.lateModules != nil {
					in.lateModules()
				}
			}
		}
		err := <-exited
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

func reboot() {
	unix.Sync()
	_ = unix.Reboot(unix.LINUX_REBOOT_CMD_RESTART)
}
