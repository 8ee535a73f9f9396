// Package loader is the box's boot loader stage, in the LinuxBoot manner:
// a small Linux kernel and u-root initramfs whose uinit (image/cmd/boxloader)
// finds the box disk by its GPT partition names, runs the same slot
// choice as everything else (image/update (*Disk).SelectBoot: trial
// bookkeeping, signature and hash verification, fallback to the other
// slot), extracts the chosen slot's kernel and initramfs to a tmpfs and
// kexecs into them with cxlpool.slot= on the command line.
//
// On hardware the loader lives in the board's flash (LinuxBoot) or is
// loaded by the firmware; in the VM test QEMU's -kernel/-initrd play the
// flash. When no slot verifies, Run returns an error and the command
// prints it and keeps a shell on the console instead of rebooting in a
// loop.
//
// The kernel interfaces (finit_module, kexec_load, kexec_file_load,
// lockdown, reboot) sit behind
// System so the decisions here are tested without a kernel.
package loader

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"cxlpool/image/disk"
	"cxlpool/image/manifest"
	"cxlpool/image/update"
)

// Paths inside the loader's initramfs (image/build writes them).
const (
	DefaultKeysDir = update.DefaultKeysDir
	// ModulesFile lists the block drivers to try, one group per line, each
	// line the group's module files (relative to /lib/modules/RELEASE) in
	// load order.
	ModulesFile    = "/etc/cxlpool/loader-modules"
	DefaultWorkDir = "/run/boxloader"
	DefaultWait    = 10 * time.Second
)

// ErrNoDisk reports that no block device carries the box's partitions.
var ErrNoDisk = errors.New("loader: no disk with the cxlpool partitions")

// System is what the loader needs from the kernel.
type System interface {
	// LoadModule loads a kernel module file; already loaded is not an error.
	LoadModule(path string) error
	// KexecLoad stages the next kernel (an ELF vmlinux), its initramfs
	// and command line with kexec_load(2).
	KexecLoad(kernel, initramfs, cmdline string) error
	// KexecFileLoad stages a signed PE kernel (bzImage) with
	// kexec_file_load(2): the running kernel checks the signature against
	// its keyrings, which is what lockdown permits.
	KexecFileLoad(kernel, initramfs, cmdline string) error
	// Lockdown is the running kernel's lockdown mode ("none",
	// "integrity", "confidentiality"; "" when it does not say). Debian's
	// kernel locks itself down when UEFI Secure Boot is on, and then
	// refuses kexec_load(2).
	Lockdown() string
	// KexecReboot jumps into the staged kernel; it returns only on failure.
	KexecReboot() error
}

// Options are the loader's settings from its kernel command line
// (cxlpool.loader.KEY=VALUE).
type Options struct {
	// Disk skips the scan (cxlpool.loader.disk=/dev/nvme0n1).
	Disk string
	// Wait is how long to wait for the disk to appear
	// (cxlpool.loader.wait=10s).
	Wait time.Duration
}

// ParseOptions reads the cxlpool.loader.* words of a kernel command line.
func ParseOptions(cmdline string) (Options, error) {
	o := Options{Wait: DefaultWait}
	for _, w := range SplitCmdline(cmdline) {
		kv, ok := strings.CutPrefix(w, "cxlpool.loader.")
		if !ok {
			continue
		}
		k, v, _ := strings.Cut(kv, "=")
		v = strings.Trim(v, `"`)
		switch k {
		case "disk":
			o.Disk = v
		case "wait":
			d, err := time.ParseDuration(v)
			if err != nil || d < 0 {
				return o, fmt.Errorf("loader: cxlpool.loader.wait=%s: want a duration like 10s", v)
			}
			o.Wait = d
		default:
			return o, fmt.Errorf("loader: unknown setting cxlpool.loader.%s", k)
		}
	}
	return o, nil
}

// SplitCmdline splits a kernel command line into words, keeping
// double-quoted stretches (key="a b") in one word as the kernel does.
func SplitCmdline(s string) []string {
	var words []string
	var cur strings.Builder
	quoted, in := false, false
	for _, r := range s {
		switch {
		case r == '"':
			quoted = !quoted
			cur.WriteRune(r)
			in = true
		case !quoted && strings.ContainsRune(" \t\n\r\v\f", r): // the kernel's isspace
			if in {
				words = append(words, cur.String())
				cur.Reset()
				in = false
			}
		default:
			cur.WriteRune(r)
			in = true
		}
	}
	if in {
		words = append(words, cur.String())
	}
	return words
}

// loaderOnly are command-line words meant for the loader's own kernel and
// init, not for the box's: the loader's settings, u-root's init flags,
// anything naming the loader's initramfs, and the slot and disk the
// loader sets itself.
var loaderOnly = []string{"cxlpool.loader.", "cxlpool.slot=", "cxlpool.disk=", "uroot.", "initrd=", "rdinit=", "init=", "BOOT_IMAGE="}

// NextCmdline is the box kernel's command line: the loader's own (the
// console and panic settings the firmware or flash gave it) without the
// loader's words, plus the slot booted and the disk it lives on.
func NextCmdline(own, slot, diskPath string) string {
	var out []string
	for _, w := range SplitCmdline(own) {
		if slices.ContainsFunc(loaderOnly, func(p string) bool { return strings.HasPrefix(w, p) }) {
			continue
		}
		if strings.Count(w, `"`)%2 != 0 {
			// An open quote would swallow the slot and disk appended below.
			continue
		}
		out = append(out, w)
	}
	out = append(out, "cxlpool.slot="+slot)
	if diskPath != "" {
		out = append(out, "cxlpool.disk="+diskPath)
	}
	return strings.Join(out, " ")
}

// Config is what a Loader works with.
type Config struct {
	Out    io.Writer // the console
	System System
	// Cmdline is the loader's own kernel command line (/proc/cmdline).
	Cmdline string
	Options Options
	// KeysDir holds the trusted update keys (PEM public keys).
	KeysDir string
	// ModulesFile and ModulesDir: the driver groups to try and where
	// their files are (/lib/modules/RELEASE). A missing ModulesFile means
	// the drivers are built in.
	ModulesFile, ModulesDir string
	// SysBlock and DevDir are scanned for disks (/sys/class/block, /dev).
	SysBlock, DevDir string
	// WorkDir receives the extracted kernel and initramfs (a tmpfs).
	WorkDir string
	// Uptime stamps console lines (time since the kernel started).
	Uptime func() time.Duration
	// Poll is the interval of the disk scan while waiting (100 ms).
	Poll time.Duration
}

// Loader boots the box.
type Loader struct {
	cfg    Config
	loaded map[string]bool
}

// New returns a Loader; empty fields take the box's defaults.
func New(cfg Config) *Loader {
	if cfg.Out == nil {
		cfg.Out = io.Discard
	}
	if cfg.KeysDir == "" {
		cfg.KeysDir = DefaultKeysDir
	}
	if cfg.SysBlock == "" {
		cfg.SysBlock = "/sys/class/block"
	}
	if cfg.DevDir == "" {
		cfg.DevDir = "/dev"
	}
	if cfg.WorkDir == "" {
		cfg.WorkDir = DefaultWorkDir
	}
	if cfg.Uptime == nil {
		cfg.Uptime = ProcUptime
	}
	if cfg.Poll <= 0 {
		cfg.Poll = 100 * time.Millisecond
	}
	return &Loader{cfg: cfg, loaded: map[string]bool{}}
}

// Printf writes a console line stamped with the uptime, like the kernel's
// and boxinit's, so a boot's timeline reads in one place.
func (l *Loader) Printf(format string, args ...any) {
	fmt.Fprintf(l.cfg.Out, "[%8.3f] boxloader: "+format+"\n", append([]any{l.cfg.Uptime().Seconds()}, args...)...)
}

// ProcUptime is the time since the kernel started, from /proc/uptime.
func ProcUptime() time.Duration {
	b, err := os.ReadFile("/proc/uptime")
	if err != nil {
		return 0
	}
	var s float64
	fmt.Sscanf(string(b), "%f", &s)
	return time.Duration(s * float64(time.Second))
}

// Run boots the box: find the disk, choose and verify a slot, kexec into
// it. It returns only when the box cannot boot (or, with a System whose
// KexecReboot returns nil, after handing over).
func (l *Loader) Run(ctx context.Context) error {
	l.Printf("start at %.2fs", l.cfg.Uptime().Seconds())
	keys, err := manifest.LoadPublicKeys(l.cfg.KeysDir)
	if err != nil {
		return fmt.Errorf("loader: %w", err)
	}
	t := time.Now()
	dev, err := l.FindDisk(ctx)
	if err != nil {
		return err
	}
	l.Printf("box disk %s (found in %v)", dev, time.Since(t).Round(time.Millisecond))
	if err := os.MkdirAll(l.cfg.WorkDir, 0o700); err != nil {
		return fmt.Errorf("loader: %w", err)
	}
	// A kexec that cannot load the trial slot's kernel is that trial
	// failing: the second pass of SelectBoot marks it bad and takes the
	// other slot.
	for attempt := 0; attempt < 2; attempt++ {
		t = time.Now()
		b, err := l.selectBoot(dev, keys)
		if err != nil {
			return err
		}
		cmdline := NextCmdline(l.cfg.Cmdline, b.Slot, dev)
		trial := ""
		if b.Trial {
			trial = ", trial boot"
		}
		l.Printf("slot %s verified and extracted in %v: version %s (security version %d%s)", b.Slot,
			time.Since(t).Round(time.Millisecond), b.Manifest.Version, b.Manifest.SecurityVersion, trial)
		t = time.Now()
		how, err := l.stage(b, cmdline)
		if err != nil {
			l.Printf("kexec load of slot %s: %v", b.Slot, err)
			if b.Trial {
				continue
			}
			return fmt.Errorf("loader: slot %s: %w", b.Slot, err)
		}
		l.Printf("kexec into slot %s at %.2fs (loaded in %v, %s): %s", b.Slot, l.cfg.Uptime().Seconds(),
			time.Since(t).Round(time.Millisecond), how, cmdline)
		if err := l.cfg.System.KexecReboot(); err != nil {
			return fmt.Errorf("loader: kexec: %w", err)
		}
		return nil
	}
	return fmt.Errorf("loader: %w: the kernels did not load", update.ErrNoBootable)
}

// stage loads b's kernel for the jump and says how. Where the kernel is
// not locked down it is kexec_load(2) of the uncompressed ELF, as always
// (nothing to decompress at boot). Under lockdown (UEFI Secure Boot) that
// is refused, and the slot's signed bzImage goes through
// kexec_file_load(2) instead: the loader's kernel checks its signature
// against its built-in keys (Debian's), the firmware's db and MOK. A slot
// without a signed kernel, or one whose signature the kernel rejects,
// does not load: on a trial that is the trial failing (Run falls back).
func (l *Loader) stage(b update.Boot, cmdline string) (string, error) {
	mode := l.cfg.System.Lockdown()
	if mode == "" || mode == "none" {
		return "kexec_load", l.cfg.System.KexecLoad(b.Kernel, b.Initramfs, cmdline)
	}
	if b.SignedKernel == "" {
		return "", fmt.Errorf("the kernel is locked down (%s, as under Secure Boot), which refuses kexec_load, and the bundle has no signed kernel (%s) for kexec_file_load", mode, update.PartSignedKernel)
	}
	if err := l.cfg.System.KexecFileLoad(b.SignedKernel, b.Initramfs, cmdline); err != nil {
		return "", fmt.Errorf("the kernel is locked down (%s) and refused the signed kernel: %w", mode, err)
	}
	return "kexec_file_load of the signed kernel, lockdown " + mode, nil
}

// selectBoot runs the shared slot choice on the disk and prints its notes.
func (l *Loader) selectBoot(dev string, keys manifest.Keys) (update.Boot, error) {
	// Leave nothing of an earlier attempt for the next kernel.
	ents, _ := os.ReadDir(l.cfg.WorkDir)
	for _, e := range ents {
		_ = os.RemoveAll(filepath.Join(l.cfg.WorkDir, e.Name()))
	}
	d, err := update.Open(dev)
	if err != nil {
		return update.Boot{}, fmt.Errorf("loader: %w", err)
	}
	b, err := d.SelectBoot(keys, l.cfg.WorkDir)
	for _, n := range b.Notes {
		l.Printf("%s", n)
	}
	// SelectBoot synced its records; Close releases the device before the
	// next kernel takes over.
	if cerr := d.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("loader: %w", cerr)
	}
	if err != nil {
		return update.Boot{}, err
	}
	return b, nil
}

// FindDisk returns the block device holding the box's partitions, loading
// the driver groups of ModulesFile one after the other until it appears
// and then waiting up to Options.Wait for slow devices.
func (l *Loader) FindDisk(ctx context.Context) (string, error) {
	if l.cfg.Options.Disk != "" {
		// A named disk still needs its driver.
		groups, _ := l.moduleGroups()
		for _, g := range groups {
			l.loadGroup(g)
		}
		return l.cfg.Options.Disk, l.waitFor(ctx, func() bool { return IsBoxDisk(l.cfg.Options.Disk) == nil })
	}
	if d := l.scan(); d != "" {
		return d, nil
	}
	groups, err := l.moduleGroups()
	if err != nil {
		l.Printf("drivers: %v", err)
	}
	for _, g := range groups {
		l.loadGroup(g)
		if d := l.scan(); d != "" {
			return d, nil
		}
	}
	var found string
	err = l.waitFor(ctx, func() bool { found = l.scan(); return found != "" })
	if err != nil {
		return "", fmt.Errorf("%w (after %v; looked at %s and %s/{vd,sd,nvme}*)", ErrNoDisk, l.cfg.Options.Wait, l.cfg.SysBlock, l.cfg.DevDir)
	}
	return found, nil
}

func (l *Loader) waitFor(ctx context.Context, ok func() bool) error {
	deadline := time.Now().Add(l.cfg.Options.Wait)
	for !ok() {
		if !time.Now().Before(deadline) {
			return ErrNoDisk
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(l.cfg.Poll):
		}
	}
	return nil
}

// moduleGroups reads ModulesFile: one group per line.
func (l *Loader) moduleGroups() ([][]string, error) {
	if l.cfg.ModulesFile == "" {
		return nil, nil
	}
	b, err := os.ReadFile(l.cfg.ModulesFile)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var groups [][]string
	for _, line := range strings.Split(string(b), "\n") {
		if line = strings.TrimSpace(line); line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		groups = append(groups, strings.Fields(line))
	}
	return groups, nil
}

func (l *Loader) loadGroup(g []string) {
	t := time.Now()
	n := 0
	var errs []string
	for _, p := range g {
		if l.loaded[p] {
			continue
		}
		l.loaded[p] = true
		if err := l.cfg.System.LoadModule(filepath.Join(l.cfg.ModulesDir, p)); err != nil {
			errs = append(errs, fmt.Sprintf("%s: %v", filepath.Base(p), err))
			continue
		}
		n++
	}
	if n > 0 || len(errs) > 0 {
		l.Printf("drivers: %d modules in %v (%s)", n, time.Since(t).Round(time.Millisecond), moduleName(g[len(g)-1]))
	}
	for _, e := range errs {
		l.Printf("drivers: %s", e)
	}
}

func moduleName(p string) string {
	return strings.TrimSuffix(filepath.Base(p), ".ko")
}

// diskPrefixes are the whole-disk names the scan tries: virtio, SCSI/SATA
// (and USB storage), NVMe namespaces, Xen, MMC.
var diskPrefixes = []string{"vd", "sd", "nvme", "xvd", "hd", "mmcblk"}

// Candidates lists the whole disks the scan considers: /sys/class/block
// entries that are not partitions, and /dev/vd*, /dev/sd*, /dev/nvme*n*
// (for a kernel without sysfs block classes). Sorted, no duplicates.
func Candidates(sysBlock, devDir string) []string {
	var out []string
	ents, _ := os.ReadDir(sysBlock)
	for _, e := range ents {
		name := e.Name()
		if !slices.ContainsFunc(diskPrefixes, func(p string) bool { return strings.HasPrefix(name, p) }) {
			continue
		}
		if _, err := os.Stat(filepath.Join(sysBlock, name, "partition")); err == nil {
			continue
		}
		out = append(out, filepath.Join(devDir, name))
	}
	for _, pat := range []string{"vd[a-z]", "sd[a-z]", "nvme[0-9]n[0-9]", "nvme[0-9]n[0-9][0-9]"} {
		m, _ := filepath.Glob(filepath.Join(devDir, pat))
		out = append(out, m...)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// scan returns the first candidate that holds the box's partitions.
func (l *Loader) scan() string {
	for _, c := range Candidates(l.cfg.SysBlock, l.cfg.DevDir) {
		if IsBoxDisk(c) == nil {
			return c
		}
	}
	return ""
}

// IsBoxDisk checks that path has a GPT with the boot and both slot
// partitions (found by name, as image/disk lays them out).
func IsBoxDisk(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	size, err := f.Seek(0, io.SeekEnd)
	if err != nil {
		return err
	}
	parts, err := disk.ReadTable(f, size)
	if err != nil {
		return err
	}
	for _, n := range []string{disk.BootName, disk.SlotAName, disk.SlotBName} {
		if _, err := disk.Find(parts, n); err != nil {
			return err
		}
	}
	return nil
}

// ParseLockdown returns the selected mode of the kernel's lockdown file,
// "none [integrity] confidentiality" → "integrity"; "" when none is
// marked.
func ParseLockdown(s string) string {
	for _, w := range strings.Fields(s) {
		if len(w) > 2 && w[0] == '[' && w[len(w)-1] == ']' {
			return w[1 : len(w)-1]
		}
	}
	return ""
}
