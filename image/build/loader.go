package build

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"cxlpool/image/loader"
)

// LoaderModuleGroups are the block drivers the loader stage tries, in
// this order, until the box disk appears: virtio (VMs), NVMe, SATA/AHCI
// (with the SCSI disk driver), virtio-scsi. Debian's kernel builds them
// all as modules (CONFIG_VIRTIO_BLK=m, BLK_DEV_NVME=m, SATA_AHCI=m,
// BLK_DEV_SD=m; EFI_PARTITION=y); a kernel with them built in gets the
// built-in ones left out.
func LoaderModuleGroups() [][]string {
	return [][]string{
		{"virtio_pci", "virtio_blk"},
		{"nvme"},
		{"ahci", "sd_mod"},
		{"virtio_scsi", "sd_mod"},
	}
}

// LoaderCommands are the u-root commands of the loader's rescue shell.
func LoaderCommands() []string {
	return []string{"init", "gosh", "ls", "cat", "dmesg", "mount", "umount", "shutdown", "sync", "lsmod", "insmod",
		"echo", "grep", "hexdump", "mkdir", "uname", "sleep"}
}

// LoaderConfig describes the loader stage's build.
type LoaderConfig struct {
	Repo string // the cxlpool module root
	Out  string // receives loader.cpio.gz and loader.vmlinuz
	Work string // scratch directory (emptied)
	// Kernel is the kernel release whose modules go in and whose bzImage
	// (/boot/vmlinuz-RELEASE) is the loader's kernel.
	Kernel string
	// PublicKey is the PEM key the loader trusts for slots.
	PublicKey []byte
	Version   string
	// SecureBoot signs loader.efi for UEFI Secure Boot; a zero key
	// leaves it unsigned (firmware with Secure Boot on refuses it).
	SecureBoot SecureBootKey
	Groups     [][]string // default LoaderModuleGroups
	Commands   []string   // default LoaderCommands
	Stderr     io.Writer
}

// LoaderResult says what BuildLoader wrote.
type LoaderResult struct {
	// Initramfs is loader.cpio.gz; Kernel is loader.vmlinuz, a copy of
	// Debian's bzImage (what firmware or a LinuxBoot flash loads; the VM
	// test boots the same kernel as the ELF vmlinux).
	Initramfs, Kernel                   string
	CPIOSize, InitramfsSize, KernelSize int64
	Modules                             []string
	// EFI is loader.efi, the same kernel, initramfs and LoaderCmdline
	// as one unified kernel image (UEFI boards boot it from the ESP);
	// "" when systemd's EFI stub is not installed (BuildLoader called
	// outside Build, which installs it).
	EFI     string
	EFISize int64
	// EFISignedBy is the certificate file loader.efi is signed with
	// ("" when unsigned).
	EFISignedBy string
}

// Names of the loader's artefacts in the output directory.
const (
	LoaderInitramfs = "loader.cpio.gz"
	LoaderKernel    = "loader.vmlinuz"
)

// BuildLoader builds the loader stage: boxloader as the uinit of a small
// u-root initramfs with the block drivers and the trusted key.
func BuildLoader(ctx context.Context, c LoaderConfig) (*LoaderResult, error) {
	if c.Groups == nil {
		c.Groups = LoaderModuleGroups()
	}
	if c.Commands == nil {
		c.Commands = LoaderCommands()
	}
	if c.Version == "" {
		c.Version = "dev"
	}
	cfg := Config{Stderr: c.Stderr}
	if cfg.Stderr == nil {
		cfg.Stderr = io.Discard
	}
	if err := os.RemoveAll(c.Work); err != nil {
		return nil, fmt.Errorf("build: loader: %w", err)
	}
	root := filepath.Join(c.Work, "root")
	keys := filepath.Join(root, "etc", "cxlpool", "update-keys")
	if err := os.MkdirAll(keys, 0o755); err != nil {
		return nil, fmt.Errorf("build: loader: %w", err)
	}
	if err := os.WriteFile(filepath.Join(keys, "signing.pub"), c.PublicKey, 0o644); err != nil {
		return nil, fmt.Errorf("build: loader: %w", err)
	}

	// Drivers: each group's modules with their dependencies, in load
	// order, one group per line of loader-modules.
	src := filepath.Join("/lib/modules", c.Kernel)
	deps, err := ReadModulesDep(filepath.Join(src, "modules.dep"))
	if err != nil {
		return nil, err
	}
	builtin, err := readBuiltin(filepath.Join(src, "modules.builtin"))
	if err != nil {
		return nil, err
	}
	lines, all, err := LoaderModuleLines(deps, builtin, c.Groups)
	if err != nil {
		return nil, err
	}
	res := &LoaderResult{}
	if res.Modules, err = stageModules(c.Kernel, all, root); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(root, strings.TrimPrefix(loader.ModulesFile, "/")), []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		return nil, fmt.Errorf("build: loader: %w", err)
	}

	bin := filepath.Join(c.Work, "boxloader")
	if err := run(ctx, cfg, c.Repo, []string{"CGO_ENABLED=0"}, "go", "build", "-trimpath", "-ldflags", "-s -w -X main.version="+c.Version,
		"-o", bin, "./image/cmd/boxloader"); err != nil {
		return nil, err
	}
	uroot := filepath.Join(c.Work, "u-root")
	if err := run(ctx, cfg, c.Repo, nil, "go", "build", "-o", uroot, "github.com/u-root/u-root"); err != nil {
		return nil, err
	}
	cpio := filepath.Join(c.Work, "loader.cpio")
	args := []string{"-o", cpio, "-uinitcmd=/bin/boxloader", "-defaultsh=gosh",
		"-files", bin + ":bin/boxloader",
		"-files", filepath.Join(root, "etc", "cxlpool") + ":etc/cxlpool",
		"-files", filepath.Join(root, "lib", "modules") + ":lib/modules",
	}
	for _, cmd := range c.Commands {
		args = append(args, "github.com/u-root/u-root/cmds/core/"+cmd)
	}
	if err := run(ctx, cfg, c.Repo, []string{"CGO_ENABLED=0"}, uroot, args...); err != nil {
		return nil, err
	}
	res.Initramfs = filepath.Join(c.Out, LoaderInitramfs)
	if res.CPIOSize, res.InitramfsSize, err = gzipFile(cpio, res.Initramfs); err != nil {
		return nil, err
	}
	res.Kernel = filepath.Join(c.Out, LoaderKernel)
	kb, err := os.ReadFile(filepath.Join("/boot", "vmlinuz-"+c.Kernel))
	if err != nil {
		return nil, fmt.Errorf("build: loader kernel: %w", err)
	}
	if err := os.WriteFile(res.Kernel, kb, 0o644); err != nil {
		return nil, fmt.Errorf("build: loader kernel: %w", err)
	}
	res.KernelSize = int64(len(kb))
	if _, err := os.Stat(EFIStub); err == nil {
		efi := filepath.Join(c.Out, LoaderEFI)
		uki := efi
		if c.SecureBoot.Key != "" {
			uki = filepath.Join(c.Work, "loader-unsigned.efi")
		}
		if err := BuildUKI(ctx, cfg, filepath.Join(c.Work, "uki"), res.Kernel, res.Initramfs, LoaderCmdline, c.Version, uki); err != nil {
			return nil, err
		}
		if c.SecureBoot.Key != "" {
			if err := SignEFI(ctx, cfg, c.Work, c.SecureBoot, uki, efi); err != nil {
				return nil, err
			}
			res.EFISignedBy = c.SecureBoot.Cert
		}
		fi, err := os.Stat(efi)
		if err != nil {
			return nil, fmt.Errorf("build: loader: %w", err)
		}
		res.EFI, res.EFISize = efi, fi.Size()
	}
	return res, nil
}

// LoaderModuleLines resolves the driver groups against modules.dep: one
// line per group with the module files in load order (dependencies
// first), groups whose modules are all built in left out; and every
// module needed, each once.
func LoaderModuleLines(deps map[string]Module, builtin map[string]bool, groups [][]string) ([]string, []string, error) {
	var lines, all []string
	for _, g := range groups {
		var want []string
		for _, m := range g {
			if !builtin[m] {
				want = append(want, m)
			}
		}
		if len(want) == 0 {
			continue
		}
		order, err := LoadOrder(deps, want)
		if err != nil {
			return nil, nil, err
		}
		var paths []string
		for _, m := range order {
			paths = append(paths, deps[m].Path)
			if !slices.Contains(all, m) {
				all = append(all, m)
			}
		}
		lines = append(lines, strings.Join(paths, " "))
	}
	return lines, all, nil
}

// readBuiltin returns the names of the modules built into the kernel
// (modules.builtin; missing means none).
func readBuiltin(path string) (map[string]bool, error) {
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return map[string]bool{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("build: %w", err)
	}
	defer f.Close()
	out := map[string]bool{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if l := strings.TrimSpace(sc.Text()); l != "" {
			out[ModuleName(l)] = true
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("build: %s: %w", path, err)
	}
	return out, nil
}
