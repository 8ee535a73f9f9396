// Package build makes the box's image: it installs Debian's kernel if
// missing, builds the daemon and the guest init, assembles a u-root
// initramfs with the kernel modules the box needs (and a trimmed
// modules.dep), extracts the uncompressed vmlinux for fast PVH boot,
// signs a manifest and writes an update bundle and a partitioned disk
// image (image/disk) with the bundle installed in slot A.
//
// It shells out only to tools every Debian build host has or that it
// installs itself: go, apt-get, xz (to unpack the bzImage payload), zstd
// (to compress the initramfs) and mke2fs (to build the data partition
// from a directory, no mounting).
package build

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/ed25519"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"sort"
	"strings"
	"time"

	"cxlpool/image/disk"
	"cxlpool/image/guest"
	"cxlpool/image/manifest"
	"cxlpool/image/update"
)

// URootVersion is the u-root release the initramfs is built with (pinned
// in go.mod through image/tools.go).
const URootVersion = "v0.16.0"

// DefaultModules are the kernel modules the box loads (their dependencies
// are added from modules.dep): CXL memory devices through the Linux CXL
// driver, the NICs QEMU and common boards offer, virtio block and console
// (the disk and the device link in the VM), USB serial adapters (the
// device link on hardware) and ext4 for the data partition.
func DefaultModules() []string {
	return []string{
		"crc32c_generic", "crc32c_intel", // ext4 metadata checksums ask the crypto API for crc32c; there is no modprobe to fetch it
		"virtio_pci", "virtio_blk", "virtio_net", "virtio_console",
		"ext4",
		"e1000e",
		"cxl_acpi", "cxl_pci", "cxl_mem", "cxl_pmem",
		"xhci_pci", "usbserial", "ftdi_sio",
		// Soft-RoCE for exports over RDMA verbs (rdma.rxe): rdma_rxe
		// brings ib_core, ib_uverbs and the UDP tunnels; it asks the
		// crypto API for "crc32" (its ICRC) when a device is made, which
		// modules.dep does not say.
		"crc32_generic", "rdma_rxe",
	}
}

// DefaultCommands are the u-root commands an operator gets on the console.
// pci and wget are left out on purpose: the PCI ID table and net/http
// would add 1.4 MB to the gzipped initramfs (ls /sys/bus/pci/devices and
// the daemon's API cover them).
func DefaultCommands() []string {
	return []string{
		"init", "gosh", "ls", "cat", "ip", "dmesg", "mount", "umount", "ps", "kill", "free", "df",
		"mkdir", "cp", "mv", "rm", "ln", "echo", "grep", "uname", "sync", "lsmod", "insmod",
		"netstat", "hexdump", "date", "uptime", "sleep", "find", "tail", "more", "ping", "shutdown",
	}
}

// Config describes one build.
type Config struct {
	// Repo is the cxlpool module root (where go.mod is).
	Repo string
	// Out is the output directory (bin/image).
	Out string
	// Version and SecurityVersion go into the manifest.
	Version         string
	SecurityVersion uint64
	// SigningKey is the PEM private key file (IMAGE_SIGNING_KEY); empty
	// means the development key at DevKey, generated on first use.
	SigningKey string
	DevKey     string
	// Kernel is the kernel release to use; empty picks the newest
	// installed one.
	Kernel string
	// SecureBoot is the key loader.efi (the ESP's BOOTX64.EFI) is signed
	// with; zero means the development key (DevSecureBoot) when Debian's
	// ovmf package is installed, else unsigned.
	SecureBoot SecureBootKey
	// InstallPackages lets the build apt-get install what is missing.
	InstallPackages bool
	Modules         []string
	Commands        []string
	// VerbsProviders are the rdma-core providers linked into the daemon
	// (DefaultVerbsProviders: rxe); see VerbsLinkEnv.
	VerbsProviders []string
	Layout         disk.Layout
	// DataConfig is the content of cxlpool.conf on the data partition
	// (empty: a commented template).
	DataConfig string
	Logger     *slog.Logger
	// Stderr receives the output of the tools run.
	Stderr io.Writer
}

// Result says what was built.
type Result struct {
	Manifest  *manifest.Manifest
	KeySource manifest.KeySource
	// Paths of the artefacts.
	Vmlinux, KernelGz, Initramfs, Bundle, Disk, DiskManifest, PublicKey string
	// SignedKernel is the signed bzImage that goes into the bundle as
	// update.PartSignedKernel, signed as SignedKernelBy says.
	SignedKernel, SignedKernelBy string
	// Sizes in bytes.
	CPIOSize, InitramfsSize, VmlinuxSize, KernelGzSize, BundleSize, DiskSize int64
	Modules                                                                  []string
	Elapsed                                                                  time.Duration
	// Loader is the loader stage (image/loader): loader.cpio.gz and its kernel.
	Loader *LoaderResult
}

// Build runs every step.
func Build(ctx context.Context, cfg Config) (*Result, error) {
	start := time.Now()
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Stderr == nil {
		cfg.Stderr = io.Discard
	}
	if cfg.Modules == nil {
		cfg.Modules = DefaultModules()
	}
	if cfg.Commands == nil {
		cfg.Commands = DefaultCommands()
	}
	if cfg.VerbsProviders == nil {
		cfg.VerbsProviders = DefaultVerbsProviders()
	}
	if cfg.Layout == (disk.Layout{}) {
		cfg.Layout = disk.DefaultLayout()
	}
	if cfg.Version == "" {
		cfg.Version = "dev"
	}
	log := cfg.Logger
	work := filepath.Join(cfg.Out, "work")
	if err := os.RemoveAll(work); err != nil {
		return nil, fmt.Errorf("build: %w", err)
	}
	if err := os.MkdirAll(work, 0o755); err != nil {
		return nil, fmt.Errorf("build: %w", err)
	}
	if err := ensureTools(ctx, cfg); err != nil {
		return nil, err
	}
	kver, err := pickKernel(cfg.Kernel)
	if errors.Is(err, errNoKernel) && cfg.InstallPackages {
		log.Info("installing Debian's linux-image-amd64")
		if err = aptInstall(ctx, cfg.Stderr, "linux-image-amd64"); err == nil {
			kver, err = pickKernel(cfg.Kernel)
		}
	}
	if err != nil {
		return nil, err
	}
	log.Info("kernel", "release", kver)

	priv, src, err := manifest.LoadOrCreateSigningKey(cfg.SigningKey, cfg.DevKey)
	if err != nil {
		return nil, err
	}
	res := &Result{KeySource: src}
	pub := priv.Public().(ed25519.PublicKey)
	pubPEM, err := manifest.MarshalPublicKey(pub)
	if err != nil {
		return nil, err
	}
	res.PublicKey = filepath.Join(cfg.Out, "signing.pub")
	if err := os.WriteFile(res.PublicKey, pubPEM, 0o644); err != nil {
		return nil, fmt.Errorf("build: %w", err)
	}

	// The root file system's extra files.
	root := filepath.Join(work, "root")
	etc := filepath.Join(root, "etc", "cxlpool")
	if err := os.MkdirAll(filepath.Join(etc, "update-keys"), 0o755); err != nil {
		return nil, fmt.Errorf("build: %w", err)
	}
	if err := os.WriteFile(filepath.Join(etc, "update-keys", "signing.pub"), pubPEM, 0o644); err != nil {
		return nil, fmt.Errorf("build: %w", err)
	}
	if err := os.WriteFile(filepath.Join(etc, "boxinit.conf"), []byte(guest.DefaultConfig), 0o644); err != nil {
		return nil, fmt.Errorf("build: %w", err)
	}
	if err := os.WriteFile(filepath.Join(etc, "version"), []byte(cfg.Version+"\n"), 0o644); err != nil {
		return nil, fmt.Errorf("build: %w", err)
	}
	mods, err := stageModules(kver, cfg.Modules, root)
	if err != nil {
		return nil, err
	}
	res.Modules = mods
	if err := os.WriteFile(filepath.Join(etc, "modules"), []byte(strings.Join(mods, "\n")+"\n"), 0o644); err != nil {
		return nil, fmt.Errorf("build: %w", err)
	}

	// One program, stripped: cxlpoold with the usb tag and cgo,
	// dynamically linked, for its USB device link (bmc/usblink: libusb
	// through gousb; without the tag usb: is refused): u-root copies the
	// libraries ldd names (libc, libusb-1.0, libudev, the dynamic loader)
	// into the initramfs next to it (+1.2 MB gzipped). With the boxinit
	// tag the same binary is the image's uinit (`cxlpoold boxinit`, see
	// cmd/cxlpoold/uinit_boxinit.go): a second Go program for the init
	// stage cost ~2 MB gzipped of runtime and packages both link. netgo
	// and osusergo keep the resolver and user lookups in Go, so no NSS
	// modules are needed.
	// The verbs and verbs_static tags serve exports over RDMA verbs
	// (--export-rdma), with libibverbs, its providers and libnl linked
	// from their static archives (VerbsLinkEnv): nothing of rdma-core
	// goes into the initramfs beside the daemon.
	bins := filepath.Join(work, "bin")
	ldflags := "-s -w -X main.version=" + cfg.Version
	verbsEnv, err := VerbsLinkEnv(LibDir, cfg.VerbsProviders)
	if err != nil {
		return nil, err
	}
	if err := run(ctx, cfg, cfg.Repo, append([]string{"CGO_ENABLED=1"}, verbsEnv...), "go", "build", "-trimpath", "-tags", "netgo,osusergo,usb,boxinit,verbs,verbs_static",
		"-ldflags", ldflags, "-o", filepath.Join(bins, "cxlpoold"), "./cmd/cxlpoold"); err != nil {
		return nil, err
	}
	log.Info("built cxlpoold (cgo, the usb tag for USB links, the boxinit tag for the init stage, verbs linked statically)", "providers", cfg.VerbsProviders)

	// u-root: busybox of core commands, init, our files.
	uroot := filepath.Join(work, "u-root")
	if err := run(ctx, cfg, cfg.Repo, nil, "go", "build", "-o", uroot, "github.com/u-root/u-root"); err != nil {
		return nil, err
	}
	cpio := filepath.Join(work, "initramfs.cpio")
	args := []string{"-o", cpio, "-uinitcmd=/bin/cxlpoold boxinit", "-defaultsh=gosh",
		"-files", filepath.Join(bins, "cxlpoold") + ":bin/cxlpoold",
		"-files", filepath.Join(root, "etc", "cxlpool") + ":etc/cxlpool",
		"-files", filepath.Join(root, "lib", "modules") + ":lib/modules",
	}
	for _, c := range cfg.Commands {
		args = append(args, "github.com/u-root/u-root/cmds/core/"+c)
	}
	if err := run(ctx, cfg, cfg.Repo, []string{"CGO_ENABLED=0"}, uroot, args...); err != nil {
		return nil, err
	}
	res.Initramfs = filepath.Join(cfg.Out, update.PartInitramfs)
	if res.CPIOSize, res.InitramfsSize, err = zstdFile(ctx, cfg, cpio, res.Initramfs); err != nil {
		return nil, err
	}
	log.Info("initramfs", "cpio", res.CPIOSize, "zstd", res.InitramfsSize)
	sb := cfg.SecureBoot
	if sb.Key == "" {
		sb, _ = DevSecureBoot()
	}
	if res.Loader, err = BuildLoader(ctx, LoaderConfig{Repo: cfg.Repo, Out: cfg.Out, Work: filepath.Join(work, "loader"),
		Kernel: kver, PublicKey: pubPEM, Version: cfg.Version, SecureBoot: sb, Stderr: cfg.Stderr}); err != nil {
		return nil, err
	}
	log.Info("loader", "initramfs", res.Loader.InitramfsSize)

	// Kernel: the ELF inside the bzImage boots directly through PVH.
	res.Vmlinux = filepath.Join(cfg.Out, "vmlinux")
	if err := extractVmlinux(ctx, cfg, filepath.Join("/boot", "vmlinuz-"+kver), res.Vmlinux); err != nil {
		return nil, err
	}
	res.KernelGz = filepath.Join(cfg.Out, update.PartKernel)
	if res.VmlinuxSize, res.KernelGzSize, err = gzipFile(res.Vmlinux, res.KernelGz); err != nil {
		return nil, err
	}

	// Manifest and bundle.
	m := &manifest.Manifest{Product: "cxlpool", Version: cfg.Version, SecurityVersion: cfg.SecurityVersion,
		Created: time.Now().UTC().Truncate(time.Second), Kernel: kver, Go: runtime.Version(), URoot: URootVersion}
	// The same kernel as a signed PE bzImage, for kexec_file_load where
	// the loader's kernel is locked down (Secure Boot): signed with the
	// UKI's key (SignKernel says why); without one, as Debian signed it
	// (trusted where the board boots through shim with Debian's vendor
	// certificate).
	res.SignedKernel, res.SignedKernelBy = filepath.Join("/boot", "vmlinuz-"+kver), "Debian's signature (trusted through shim)"
	if sb.Key != "" {
		res.SignedKernel, res.SignedKernelBy = filepath.Join(work, update.PartSignedKernel), sb.Cert
		if err := SignKernel(ctx, cfg, filepath.Join(work, "sign"), sb, filepath.Join("/boot", "vmlinuz-"+kver), res.SignedKernel); err != nil {
			return nil, err
		}
	}
	files := []manifest.BundlePart{{Name: update.PartKernel, Path: res.KernelGz}, {Name: update.PartInitramfs, Path: res.Initramfs},
		{Name: update.PartSignedKernel, Path: res.SignedKernel}}
	for _, f := range files {
		p, err := manifest.HashFile(f.Name, f.Path)
		if err != nil {
			return nil, err
		}
		m.Parts = append(m.Parts, p)
	}
	mb, sig, err := manifest.Sign(m, priv)
	if err != nil {
		return nil, err
	}
	res.Manifest = m
	if err := os.WriteFile(filepath.Join(cfg.Out, manifest.ManifestName), mb, 0o644); err != nil {
		return nil, fmt.Errorf("build: %w", err)
	}
	if err := os.WriteFile(filepath.Join(cfg.Out, manifest.SignatureName), sig, 0o644); err != nil {
		return nil, fmt.Errorf("build: %w", err)
	}
	res.Bundle = filepath.Join(cfg.Out, "cxlpool-"+cfg.Version+".bundle")
	bf, err := os.Create(res.Bundle)
	if err != nil {
		return nil, fmt.Errorf("build: %w", err)
	}
	err = manifest.WriteBundle(bf, mb, sig, m, files)
	if cerr := bf.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, err
	}
	if fi, err := os.Stat(res.Bundle); err == nil {
		res.BundleSize = fi.Size()
	}

	// Disk image.
	res.Disk = filepath.Join(cfg.Out, "disk.img")
	dataCfg := cfg.DataConfig
	if dataCfg == "" {
		dataCfg = guest.DataConfigTemplate
	}
	if err := makeDisk(ctx, cfg, res, dataCfg, manifest.Keys{manifest.KeyID(pub): pub}); err != nil {
		return nil, err
	}
	dm := &manifest.Manifest{Product: "cxlpool-disk", Version: cfg.Version, SecurityVersion: cfg.SecurityVersion,
		Created: m.Created, Kernel: kver, Go: m.Go, URoot: URootVersion}
	p, err := manifest.HashFile("disk.img", res.Disk)
	if err != nil {
		return nil, err
	}
	dm.Parts = []manifest.Part{p}
	res.DiskSize = p.Size
	dmb, dsig, err := manifest.Sign(dm, priv)
	if err != nil {
		return nil, err
	}
	res.DiskManifest = res.Disk + ".manifest.json"
	if err := os.WriteFile(res.DiskManifest, dmb, 0o644); err != nil {
		return nil, fmt.Errorf("build: %w", err)
	}
	if err := os.WriteFile(res.Disk+".manifest.sig", dsig, 0o644); err != nil {
		return nil, fmt.Errorf("build: %w", err)
	}
	res.Elapsed = time.Since(start)
	return res, nil
}

// run runs a tool with its output to cfg.Stderr.
func run(ctx context.Context, cfg Config, dir string, env []string, name string, args ...string) error {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var tail bytes.Buffer
	cmd.Stdout = io.MultiWriter(cfg.Stderr, &tail)
	cmd.Stderr = io.MultiWriter(cfg.Stderr, &tail)
	if err := cmd.Run(); err != nil {
		out := tail.String()
		if len(out) > 2000 {
			out = out[len(out)-2000:]
		}
		return fmt.Errorf("build: %s %s: %w\n%s", name, strings.Join(args, " "), err, out)
	}
	return nil
}

// ensureTools checks for xz, zstd and mke2fs, and for what the daemon's cgo
// build needs (a C compiler, pkg-config, libusb-1.0's headers,
// libibverbs' static archives),
// installing them when allowed.
func ensureTools(ctx context.Context, cfg Config) error {
	var missing []string
	for tool, pkg := range map[string]string{"xz": "xz-utils", "zstd": "zstd", "mke2fs": "e2fsprogs", "gcc": "gcc", "pkg-config": "pkg-config",
		"objcopy": "binutils", "mkfs.vfat": "dosfstools", "mcopy": "mtools", "sbsign": "sbsigntool", "openssl": "openssl"} {
		if _, err := exec.LookPath(tool); err != nil {
			missing = append(missing, pkg)
		}
	}
	if _, err := os.Stat(EFIStub); err != nil {
		missing = append(missing, "systemd-boot-efi")
	}
	if _, ok := DevSecureBoot(); !ok && cfg.SecureBoot.Key == "" {
		missing = append(missing, "ovmf") // the development Secure Boot key
	}
	if exec.CommandContext(ctx, "pkg-config", "--exists", "libusb-1.0").Run() != nil {
		missing = append(missing, "libusb-1.0-0-dev")
	}
	if _, err := os.Stat(filepath.Join(LibDir, "libibverbs.a")); err != nil {
		missing = append(missing, "libibverbs-dev") // with libnl-3-dev, libnl-route-3-dev
	}
	if len(missing) == 0 {
		return nil
	}
	sort.Strings(missing)
	if !cfg.InstallPackages {
		return fmt.Errorf("build: missing packages %v (apt-get install them, or let the build install them)", missing)
	}
	return aptInstall(ctx, cfg.Stderr, missing...)
}

// aptInstall installs Debian packages (needs root).
func aptInstall(ctx context.Context, out io.Writer, pkgs ...string) error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("build: need root to apt-get install %v", pkgs)
	}
	env := append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
	for _, args := range [][]string{{"update", "-qq"}, append([]string{"install", "-y", "-qq", "--no-install-recommends"}, pkgs...)} {
		cmd := exec.CommandContext(ctx, "apt-get", args...)
		cmd.Env, cmd.Stdout, cmd.Stderr = env, out, out
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("build: apt-get %s: %w", strings.Join(args, " "), err)
		}
	}
	return nil
}

var errNoKernel = errors.New("build: no Debian kernel installed (/boot/vmlinuz-* with /lib/modules)")

// pickKernel returns want if installed, else the newest installed release.
func pickKernel(want string) (string, error) {
	if want != "" {
		if _, err := os.Stat("/boot/vmlinuz-" + want); err != nil {
			return "", fmt.Errorf("build: kernel %s: %w", want, err)
		}
		return want, nil
	}
	vms, _ := filepath.Glob("/boot/vmlinuz-*")
	var rels []string
	for _, v := range vms {
		rel := strings.TrimPrefix(filepath.Base(v), "vmlinuz-")
		if _, err := os.Stat(filepath.Join("/lib/modules", rel, "modules.dep")); err == nil {
			rels = append(rels, rel)
		}
	}
	if len(rels) == 0 {
		return "", errNoKernel
	}
	slices.SortFunc(rels, compareVersions)
	return rels[len(rels)-1], nil
}

// compareVersions orders kernel releases by their numeric fields.
func compareVersions(a, b string) int {
	num := regexp.MustCompile(`\d+`)
	na, nb := num.FindAllString(a, -1), num.FindAllString(b, -1)
	for i := 0; i < len(na) && i < len(nb); i++ {
		x, y := fmt.Sprintf("%09s", na[i]), fmt.Sprintf("%09s", nb[i])
		if c := strings.Compare(x, y); c != 0 {
			return c
		}
	}
	return len(na) - len(nb)
}

// stageModules copies the wanted modules and their dependencies into
// root/lib/modules/KVER, writes a modules.dep listing only them, and
// returns the load order (dependencies first).
func stageModules(kver string, want []string, root string) ([]string, error) {
	src := filepath.Join("/lib/modules", kver)
	deps, err := ReadModulesDep(filepath.Join(src, "modules.dep"))
	if err != nil {
		return nil, err
	}
	order, err := LoadOrder(deps, want)
	if err != nil {
		return nil, err
	}
	dst := filepath.Join(root, "lib", "modules", kver)
	var dep strings.Builder
	for _, name := range order {
		e := deps[name]
		b, err := os.ReadFile(filepath.Join(src, e.Path))
		if err != nil {
			return nil, fmt.Errorf("build: module %s: %w", name, err)
		}
		if err := os.MkdirAll(filepath.Join(dst, filepath.Dir(e.Path)), 0o755); err != nil {
			return nil, fmt.Errorf("build: %w", err)
		}
		if err := os.WriteFile(filepath.Join(dst, e.Path), b, 0o644); err != nil {
			return nil, fmt.Errorf("build: %w", err)
		}
		var ds []string
		for _, d := range e.Deps {
			ds = append(ds, deps[d].Path)
		}
		dep.WriteString(ModulesDepLine(e.Path, ds))
	}
	if err := os.WriteFile(filepath.Join(dst, "modules.dep"), []byte(dep.String()), 0o644); err != nil {
		return nil, fmt.Errorf("build: %w", err)
	}
	return order, nil
}

// ModulesDepLine is one modules.dep line in depmod's format: "path:"
// alone for a module without dependencies. u-root's kmodule, which
// boxinit loads the modules with, reads the space of "path: " as a
// dependency named "" that no module has.
func ModulesDepLine(path string, deps []string) string {
	if len(deps) == 0 {
		return path + ":\n"
	}
	return path + ": " + strings.Join(deps, " ") + "\n"
}

// Module is one modules.dep line.
type Module struct {
	Path string   // relative to /lib/modules/KVER
	Deps []string // module names
}

// ModuleName is the kernel's name for a module file: "kernel/a/crc32c-intel.ko"
// → "crc32c_intel".
func ModuleName(path string) string {
	base := filepath.Base(path)
	for _, ext := range []string{".xz", ".zst", ".gz"} {
		base = strings.TrimSuffix(base, ext)
	}
	return strings.ReplaceAll(strings.TrimSuffix(base, ".ko"), "-", "_")
}

// ReadModulesDep parses a modules.dep file by module name.
func ReadModulesDep(path string) (map[string]Module, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("build: %w", err)
	}
	defer f.Close()
	return ParseModulesDep(f)
}

// ParseModulesDep parses modules.dep content.
func ParseModulesDep(r io.Reader) (map[string]Module, error) {
	mods := map[string]Module{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		p, rest, ok := strings.Cut(line, ":")
		if !ok {
			return nil, fmt.Errorf("build: modules.dep line %q", line)
		}
		m := Module{Path: p}
		for _, d := range strings.Fields(rest) {
			m.Deps = append(m.Deps, ModuleName(d))
		}
		mods[ModuleName(p)] = m
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("build: modules.dep: %w", err)
	}
	return mods, nil
}

// LoadOrder returns want plus their dependencies, each after everything
// it depends on, in a stable order.
func LoadOrder(deps map[string]Module, want []string) ([]string, error) {
	var order []string
	state := map[string]int{} // 1 visiting, 2 done
	var visit func(n string, from string) error
	visit = func(n, from string) error {
		n = strings.ReplaceAll(n, "-", "_")
		switch state[n] {
		case 1:
			return fmt.Errorf("build: module dependency cycle at %s", n)
		case 2:
			return nil
		}
		m, ok := deps[n]
		if !ok {
			if from != "" {
				return fmt.Errorf("build: module %s (needed by %s) not in modules.dep", n, from)
			}
			return fmt.Errorf("build: module %s not in modules.dep (built in, or not in this kernel)", n)
		}
		state[n] = 1
		// modules.dep lists dependencies deepest last; load them first.
		for i := len(m.Deps) - 1; i >= 0; i-- {
			if err := visit(m.Deps[i], n); err != nil {
				return err
			}
		}
		state[n] = 2
		order = append(order, n)
		return nil
	}
	for _, w := range want {
		if err := visit(w, ""); err != nil {
			return nil, err
		}
	}
	return order, nil
}

// gzipFile compresses src into dst and returns both sizes.
// zstdFile compresses the box's initramfs with zstd -19: the kernel
// (CONFIG_RD_ZSTD, as Debian's has) unpacks it faster than gzip and it is
// ~20 % smaller (17.8 → 14.2 MB once the daemon embedded the fleet's NATS
// server). The bundle part keeps its name, initramfs.cpio.gz, so that
// loaders and slots written before read it: the kernel goes by the
// format's magic, not the name. The loader's own initramfs stays gzip.
func zstdFile(ctx context.Context, cfg Config, src, dst string) (int64, int64, error) {
	if err := run(ctx, cfg, filepath.Dir(src), nil, "zstd", "-q", "-19", "-f", "-T0", src, "-o", dst); err != nil {
		return 0, 0, err
	}
	in, err := os.Stat(src)
	if err != nil {
		return 0, 0, fmt.Errorf("build: %w", err)
	}
	out, err := os.Stat(dst)
	if err != nil {
		return 0, 0, fmt.Errorf("build: %w", err)
	}
	return in.Size(), out.Size(), nil
}

func gzipFile(src, dst string) (int64, int64, error) {
	in, err := os.Open(src)
	if err != nil {
		return 0, 0, fmt.Errorf("build: %w", err)
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		return 0, 0, fmt.Errorf("build: %w", err)
	}
	zw, _ := gzip.NewWriterLevel(out, gzip.BestCompression)
	n, err := io.Copy(zw, in)
	if err == nil {
		err = zw.Close()
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return 0, 0, fmt.Errorf("build: gzip %s: %w", src, err)
	}
	fi, err := os.Stat(dst)
	if err != nil {
		return 0, 0, fmt.Errorf("build: %w", err)
	}
	return n, fi.Size(), nil
}

// extractVmlinux unpacks the ELF kernel from a bzImage: the setup header
// gives the compressed payload's offset and length (Documentation/x86/
// boot.rst: setup_sects at 0x1F1, payload_offset at 0x248, payload_length
// at 0x24C, relative to the protected-mode code after the setup
// sectors); Debian compresses it with xz.
func extractVmlinux(ctx context.Context, cfg Config, bzImage, out string) error {
	b, err := os.ReadFile(bzImage)
	if err != nil {
		return fmt.Errorf("build: %w", err)
	}
	payload, err := BzImagePayload(b)
	if err != nil {
		return err
	}
	if !bytes.HasPrefix(payload, []byte("\xfd7zXZ\x00")) {
		return fmt.Errorf("build: %s: payload is not xz (magic % x)", bzImage, payload[:min(6, len(payload))])
	}
	f, err := os.Create(out)
	if err != nil {
		return fmt.Errorf("build: %w", err)
	}
	defer f.Close()
	cmd := exec.CommandContext(ctx, "xz", "-dc", "--single-stream")
	cmd.Stdin, cmd.Stdout, cmd.Stderr = bytes.NewReader(payload), f, cfg.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("build: xz -d of the kernel payload: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("build: %w", err)
	}
	head := make([]byte, 4)
	g, err := os.Open(out)
	if err != nil {
		return fmt.Errorf("build: %w", err)
	}
	defer g.Close()
	if _, err := io.ReadFull(g, head); err != nil || string(head) != "\x7fELF" {
		return fmt.Errorf("build: extracted kernel is not an ELF file")
	}
	return nil
}

// BzImagePayload returns the compressed kernel inside a bzImage.
func BzImagePayload(b []byte) ([]byte, error) {
	if len(b) < 0x250 || string(b[0x202:0x206]) != "HdrS" {
		return nil, errors.New("build: not a bzImage (no HdrS)")
	}
	setup := int(b[0x1f1])
	if setup == 0 {
		setup = 4
	}
	base := (setup + 1) * 512
	off := int(binary.LittleEndian.Uint32(b[0x248:]))
	n := int(binary.LittleEndian.Uint32(b[0x24c:]))
	if base+off+n > len(b) || n < 4 {
		return nil, fmt.Errorf("build: bzImage payload %d+%d beyond its %d bytes", base+off, n, len(b))
	}
	// The last 4 bytes are the decompressed size the kernel's build appends.
	return b[base+off : base+off+n-4], nil
}

// makeDisk writes the partitioned disk: table, bundle in slot A, boot
// control record, ext4 data partition.
func makeDisk(ctx context.Context, cfg Config, res *Result, dataCfg string, keys manifest.Keys) error {
	parts, size, err := cfg.Layout.Partitions()
	if err != nil {
		return err
	}
	_ = os.Remove(res.Disk)
	f, err := os.Create(res.Disk)
	if err != nil {
		return fmt.Errorf("build: %w", err)
	}
	defer f.Close()
	if err := f.Truncate(size); err != nil {
		return fmt.Errorf("build: %w", err)
	}
	if err := disk.WriteTable(f, size, parts, cfg.Layout.Seed); err != nil {
		return err
	}
	d, err := update.New(f, size)
	if err != nil {
		return err
	}
	bf, err := os.Open(res.Bundle)
	if err != nil {
		return fmt.Errorf("build: %w", err)
	}
	defer bf.Close()
	if _, err := d.Install(ctx, update.SlotA, bf, keys); err != nil {
		return fmt.Errorf("build: install slot a: %w", err)
	}
	// Data partition: ext4 made from a directory, then copied in.
	dp, err := disk.Find(parts, disk.DataName)
	if err != nil {
		return err
	}
	ddir := filepath.Join(cfg.Out, "work", "data")
	if err := os.MkdirAll(ddir, 0o755); err != nil {
		return fmt.Errorf("build: %w", err)
	}
	if err := os.WriteFile(filepath.Join(ddir, "cxlpool.conf"), []byte(dataCfg), 0o644); err != nil {
		return fmt.Errorf("build: %w", err)
	}
	img := filepath.Join(cfg.Out, "work", "data.ext4")
	_ = os.Remove(img)
	if err := run(ctx, cfg, "", nil, "mke2fs", "-q", "-F", "-t", "ext4", "-L", disk.DataName, "-E", "root_owner=0:0",
		"-d", ddir, img, fmt.Sprintf("%dk", dp.Size/1024)); err != nil {
		return err
	}
	if err := CopySparse(f, dp.Offset, img); err != nil {
		return err
	}
	// EFI system partition: the loader stage as BOOTX64.EFI.
	if ep, err := disk.Find(parts, disk.ESPName); err == nil {
		if res.Loader == nil || res.Loader.EFI == "" {
			return fmt.Errorf("build: the layout has an EFI system partition but no loader.efi was built (is %s installed?)", EFIStub)
		}
		esp := filepath.Join(cfg.Out, "work", "esp.fat")
		if err := writeESP(ctx, cfg, esp, res.Loader.EFI, ep.Size); err != nil {
			return err
		}
		if err := CopySparse(f, ep.Offset, esp); err != nil {
			return err
		}
	}
	return f.Sync()
}

// CopySparse copies the file src into w at off, skipping all-zero blocks
// (w must read as zeros there already, e.g. a new sparse file).
func CopySparse(w io.WriterAt, off int64, src string) error {
	in, err := os.Open(src)
	if err != nil {
		return fmt.Errorf("build: %w", err)
	}
	defer in.Close()
	buf := make([]byte, 64<<10)
	var pos int64
	for {
		n, err := io.ReadFull(in, buf)
		if n > 0 && !disk.IsZero(buf[:n]) {
			if _, werr := w.WriteAt(buf[:n], off+pos); werr != nil {
				return fmt.Errorf("build: %w", werr)
			}
		}
		pos += int64(n)
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("build: %w", err)
		}
	}
}

// Report prints what was built, with sizes, and where the key came from.
func Report(w io.Writer, r *Result) {
	mb := func(n int64) string { return fmt.Sprintf("%.1f MB", float64(n)/1e6) }
	src := "development key " + r.KeySource.Path
	switch {
	case r.KeySource.FromEnv:
		src = "IMAGE_SIGNING_KEY=" + r.KeySource.Path
	case r.KeySource.Generated:
		src += " (generated now; set IMAGE_SIGNING_KEY to sign with a real key)"
	}
	verdict := "within"
	if r.InitramfsSize > 16<<20 {
		verdict = "OVER"
	}
	fmt.Fprintf(w, "image %s (security version %d), kernel %s, built in %v\n", r.Manifest.Version,
		r.Manifest.SecurityVersion, r.Manifest.Kernel, r.Elapsed.Round(time.Second))
	fmt.Fprintf(w, "  signed by %s (key id %s); public key %s\n", src, r.Manifest.KeyID, r.PublicKey)
	fmt.Fprintf(w, "  initramfs  %s (cpio %s, zstd %s: %s the 16 MiB goal), %d modules\n", r.Initramfs, mb(r.CPIOSize), mb(r.InitramfsSize), verdict, len(r.Modules))
	fmt.Fprintf(w, "  kernel     %s (%s; gzip %s in the bundle)\n", r.Vmlinux, mb(r.VmlinuxSize), mb(r.KernelGzSize))
	fmt.Fprintf(w, "  signed     %s in the bundle as %s (for kexec_file_load under Secure Boot), signed with %s\n", r.SignedKernel, update.PartSignedKernel, r.SignedKernelBy)
	fmt.Fprintf(w, "  bundle     %s (%s): the update image\n", r.Bundle, mb(r.BundleSize))
	fmt.Fprintf(w, "  disk       %s (%s, sparse): slot A installed; signed manifest %s\n", r.Disk, mb(r.DiskSize), r.DiskManifest)
	if l := r.Loader; l != nil {
		fmt.Fprintf(w, "  loader     %s (cpio %s, gzip %s), %d modules; kernel %s (%s; the VM test boots it as vmlinux)\n",
			l.Initramfs, mb(l.CPIOSize), mb(l.InitramfsSize), len(l.Modules), l.Kernel, mb(l.KernelSize))
		if l.EFI != "" {
			signed := "UNSIGNED: UEFI firmware with Secure Boot on refuses it"
			if l.EFISignedBy != "" {
				signed = "signed for Secure Boot with " + l.EFISignedBy
				if l.EFISignedBy == DevSecureBootCert {
					signed += " (the development key: OVMF's snakeoil test key; sign with your own: -sb-key/-sb-cert)"
				}
			}
			fmt.Fprintf(w, "  loader.efi %s (%s): the same as a unified kernel image, \\%s on the disk's EFI system partition, %s\n", l.EFI, mb(l.EFISize), strings.ReplaceAll(ESPBootPath, "/", "\\"), signed)
		}
	}
}
