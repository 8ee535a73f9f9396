package build

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
)

// The UEFI boot path: the loader stage as one EFI binary on the disk's
// EFI system partition, so a board's firmware boots it with no boot
// entries (the removable-media path \EFI\BOOT\BOOTX64.EFI).
const (
	// EFIStub is systemd's EFI stub (Debian's systemd-boot-efi): a PE
	// program that boots the kernel, initramfs and command line held in
	// its own .linux, .initrd and .cmdline sections (a unified kernel
	// image).
	EFIStub = "/usr/lib/systemd/boot/efi/linuxx64.efi.stub"
	// LoaderEFI is the unified kernel image in the output directory.
	LoaderEFI = "loader.efi"
	// ESPBootPath is where UEFI firmware looks on removable media and
	// disks without boot entries (UEFI 2.10 §3.5.1.1, x64).
	ESPBootPath = "EFI/BOOT/BOOTX64.EFI"
	// LoaderCmdline is the loader's kernel command line in the UKI: the
	// serial console (what management boards wire up; the last console=
	// is /dev/console), and a panic reboots at once instead of hanging.
	LoaderCmdline = "console=tty0 console=ttyS0,115200 panic=-1"
)

// The development Secure Boot key: Debian's OVMF "snakeoil" test key
// (package ovmf), enrolled as PK, KEK and db in OVMF_VARS_4M.snakeoil.fd.
// It is public (its passphrase is in the package's README), so it proves
// the Secure Boot path under OVMF and secures nothing: a vendor signs with
// its own db key (-sb-key/-sb-cert, IMAGE_SB_KEY/IMAGE_SB_CERT).
const (
	DevSecureBootKey        = "/usr/share/ovmf/PkKek-1-snakeoil.key"
	DevSecureBootCert       = "/usr/share/ovmf/PkKek-1-snakeoil.pem"
	devSecureBootPassphrase = "snakeoil"
)

// SecureBootKey is the key the UKI is signed with for UEFI Secure Boot.
type SecureBootKey struct {
	// Key and Cert are PEM files (the key unencrypted, or the development
	// key's with Passphrase).
	Key, Cert  string
	Passphrase string
	// Dev marks the development key.
	Dev bool
}

// DevSecureBoot returns the development key when Debian's ovmf package
// is installed.
func DevSecureBoot() (SecureBootKey, bool) {
	for _, f := range []string{DevSecureBootKey, DevSecureBootCert} {
		if _, err := os.Stat(f); err != nil {
			return SecureBootKey{}, false
		}
	}
	return SecureBootKey{Key: DevSecureBootKey, Cert: DevSecureBootCert, Passphrase: devSecureBootPassphrase, Dev: true}, true
}

// SignEFI signs the PE file in with k (sbsign from sbsigntool) into out.
// An encrypted key is decrypted into work first (sbsign would ask for
// the passphrase on a terminal).
func SignEFI(ctx context.Context, cfg Config, work string, k SecureBootKey, in, out string) error {
	key := k.Key
	if k.Passphrase != "" {
		if err := os.MkdirAll(work, 0o700); err != nil {
			return fmt.Errorf("build: sign: %w", err)
		}
		key = filepath.Join(work, "secureboot.key")
		if err := run(ctx, cfg, "", nil, "openssl", "pkey", "-in", k.Key, "-passin", "pass:"+k.Passphrase, "-out", key); err != nil {
			return fmt.Errorf("build: sign: decrypt %s: %w", k.Key, err)
		}
		defer os.Remove(key)
	}
	_ = os.Remove(out)
	return run(ctx, cfg, "", nil, "sbsign", "--key", key, "--cert", k.Cert, "--output", out, in)
}

// SignKernel writes out, the PE bzImage in with its signatures replaced
// by one of k's. The loader's kernel checks a kexec_file_load kernel
// against its built-in keys, the firmware's db and MOK; Debian's kernel
// builds in only its ephemeral module key, and Debian's own signature is
// trusted there only through shim's vendor certificate. So the slot's
// kernel is signed with the key that signs the UKI, which the boards
// that boot the UKI trust in db. One signature, not two: the kernel's
// PE parser takes the certificate table's only entry.
func SignKernel(ctx context.Context, cfg Config, work string, k SecureBootKey, in, out string) error {
	if err := os.MkdirAll(work, 0o700); err != nil {
		return fmt.Errorf("build: sign kernel: %w", err)
	}
	b, err := os.ReadFile(in)
	if err != nil {
		return fmt.Errorf("build: sign kernel: %w", err)
	}
	bare := filepath.Join(work, "vmlinuz-unsigned.efi")
	if err := os.WriteFile(bare, b, 0o644); err != nil {
		return fmt.Errorf("build: sign kernel: %w", err)
	}
	// sbattach --remove refuses an image without a signature: a kernel
	// that came unsigned is signed as it is.
	_ = run(ctx, cfg, "", nil, "sbattach", "--remove", bare)
	return SignEFI(ctx, cfg, work, k, bare, out)
}

// Section addresses of the UKI (systemd 252's stub: its own sections
// end below 0x20000; the kernel goes at 32 MiB and the initramfs at 48
// MiB, so a kernel up to 16 MiB fits; ukify computes these in later
// systemd releases).
var ukiSections = []struct{ name, vma string }{
	{".osrel", "0x20000"},
	{".cmdline", "0x30000"},
	{".linux", "0x2000000"},
	{".initrd", "0x3000000"},
}

// ukiMaxKernel is the room between .linux and .initrd.
const ukiMaxKernel = 0x3000000 - 0x2000000

// BuildUKI writes out, a unified kernel image of kernel (a bzImage with
// its EFI stub), initrd and cmdline, with objcopy from binutils.
func BuildUKI(ctx context.Context, cfg Config, work, kernel, initrd, cmdline, version, out string) error {
	fi, err := os.Stat(kernel)
	if err != nil {
		return fmt.Errorf("build: uki: %w", err)
	}
	if fi.Size() > ukiMaxKernel {
		return fmt.Errorf("build: uki: kernel %s is %d bytes, over the %d between .linux and .initrd", kernel, fi.Size(), ukiMaxKernel)
	}
	if err := os.MkdirAll(work, 0o755); err != nil {
		return fmt.Errorf("build: uki: %w", err)
	}
	osrel := filepath.Join(work, "os-release")
	if err := os.WriteFile(osrel, []byte(fmt.Sprintf("ID=cxlpool\nNAME=\"cxlpool loader\"\nVERSION_ID=%q\n", version)), 0o644); err != nil {
		return fmt.Errorf("build: uki: %w", err)
	}
	cl := filepath.Join(work, "cmdline")
	if err := os.WriteFile(cl, []byte(cmdline+"\x00"), 0o644); err != nil {
		return fmt.Errorf("build: uki: %w", err)
	}
	files := map[string]string{".osrel": osrel, ".cmdline": cl, ".linux": kernel, ".initrd": initrd}
	var args []string
	for _, s := range ukiSections {
		args = append(args, "--add-section", s.name+"="+files[s.name], "--change-section-vma", s.name+"="+s.vma)
	}
	_ = os.Remove(out)
	args = append(args, EFIStub, out)
	return run(ctx, cfg, "", nil, "objcopy", args...)
}

// writeESP makes a FAT filesystem of size bytes at img holding efi as
// \EFI\BOOT\BOOTX64.EFI (dosfstools' mkfs.vfat, mtools' mmd/mcopy: no
// loop mount, no root). --invariant fixes the volume ID (1234-ABCD) and
// the other varying fields so builds compare.
func writeESP(ctx context.Context, cfg Config, img, efi string, size int64) error {
	_ = os.Remove(img)
	if err := run(ctx, cfg, "", nil, "mkfs.vfat", "-C", "-n", "CXLPOOL-ESP", "--invariant", img,
		fmt.Sprint(size/1024)); err != nil {
		return err
	}
	if err := run(ctx, cfg, "", nil, "mmd", "-i", img, "::/EFI", "::/EFI/BOOT"); err != nil {
		return err
	}
	return run(ctx, cfg, "", nil, "mcopy", "-i", img, efi, "::/"+ESPBootPath)
}
