package build

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestUKIOnESP builds a unified kernel image from stand-in parts, puts it
// on a FAT ESP, and reads both back with binutils and mtools: the stub's
// sections carry the parts byte for byte, and the file is at the path
// UEFI firmware boots without boot entries.
func TestUKIOnESP(t *testing.T) {
	for _, tool := range []string{"objcopy", "mkfs.vfat", "mcopy", "mmd"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not installed", tool)
		}
	}
	if _, err := os.Stat(EFIStub); err != nil {
		t.Skipf("systemd-boot-efi not installed: %v", err)
	}
	dir := t.TempDir()
	kernel, initrd := filepath.Join(dir, "vmlinuz"), filepath.Join(dir, "initrd")
	parts := map[string][]byte{".linux": bytes.Repeat([]byte("K"), 70000), ".initrd": bytes.Repeat([]byte("I"), 50000)}
	if err := os.WriteFile(kernel, parts[".linux"], 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(initrd, parts[".initrd"], 0o644); err != nil {
		t.Fatal(err)
	}
	parts[".cmdline"] = []byte(LoaderCmdline + "\x00")
	ctx := context.Background()
	cfg := Config{Stderr: os.Stderr}
	efi := filepath.Join(dir, LoaderEFI)
	if err := BuildUKI(ctx, cfg, filepath.Join(dir, "work"), kernel, initrd, LoaderCmdline, "v1", efi); err != nil {
		t.Fatal(err)
	}
	for name, want := range parts {
		out := filepath.Join(dir, "section"+name)
		if b, err := exec.Command("objcopy", "-O", "binary", "--only-section="+name, efi, out).CombinedOutput(); err != nil {
			t.Fatalf("objcopy %s: %v: %s", name, err, b)
		}
		got, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		// PE sections are padded to the file alignment.
		if !bytes.HasPrefix(got, want) || len(bytes.Trim(got[len(want):], "\x00")) != 0 {
			t.Errorf("section %s: got %d bytes, want %d bytes of the part (then zeros)", name, len(got), len(want))
		}
	}

	img := filepath.Join(dir, "esp.fat")
	if err := writeESP(ctx, cfg, img, efi, 32<<20); err != nil {
		t.Fatal(err)
	}
	back := filepath.Join(dir, "back.efi")
	if b, err := exec.Command("mcopy", "-i", img, "::/"+ESPBootPath, back).CombinedOutput(); err != nil {
		t.Fatalf("mcopy from the ESP: %v: %s", err, b)
	}
	got, _ := os.ReadFile(back)
	want, _ := os.ReadFile(efi)
	if !bytes.Equal(got, want) {
		t.Errorf("%s on the ESP: got %d bytes, want the %d of %s", ESPBootPath, len(got), len(want), efi)
	}
	if b, err := exec.Command("file", "-b", back).Output(); err == nil && !strings.Contains(string(b), "EFI application") {
		t.Errorf("file says %q, want a PE EFI application", b)
	}
}

// TestSignEFI signs a unified kernel image for Secure Boot, with the
// development key (OVMF's snakeoil key, encrypted) and with a vendor's own
// unencrypted key, and checks each signature with sbverify against its
// certificate (and not against the other's).
func TestSignEFI(t *testing.T) {
	for _, tool := range []string{"objcopy", "sbsign", "sbverify", "openssl"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not installed (sbsigntool, openssl)", tool)
		}
	}
	if _, err := os.Stat(EFIStub); err != nil {
		t.Skipf("systemd-boot-efi not installed: %v", err)
	}
	dev, ok := DevSecureBoot()
	if !ok {
		t.Skip("Debian's ovmf package (the development key) is not installed")
	}
	dir := t.TempDir()
	ctx := context.Background()
	cfg := Config{Stderr: os.Stderr}
	kernel, initrd := filepath.Join(dir, "vmlinuz"), filepath.Join(dir, "initrd")
	os.WriteFile(kernel, bytes.Repeat([]byte("K"), 70000), 0o644)
	os.WriteFile(initrd, bytes.Repeat([]byte("I"), 50000), 0o644)
	uki := filepath.Join(dir, "unsigned.efi")
	if err := BuildUKI(ctx, cfg, filepath.Join(dir, "work"), kernel, initrd, LoaderCmdline, "v1", uki); err != nil {
		t.Fatal(err)
	}
	vendor := SecureBootKey{Key: filepath.Join(dir, "vendor.key"), Cert: filepath.Join(dir, "vendor.crt")}
	if b, err := exec.Command("openssl", "req", "-new", "-x509", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=vendor db test",
		"-days", "1", "-keyout", vendor.Key, "-out", vendor.Cert).CombinedOutput(); err != nil {
		t.Fatalf("openssl req: %v: %s", err, b)
	}
	verify := func(efi, cert string) error {
		return exec.Command("sbverify", "--cert", cert, efi).Run()
	}
	for _, tc := range []struct {
		name      string
		key       SecureBootKey
		otherCert string
	}{
		{"development key", dev, vendor.Cert},
		{"vendor key", vendor, dev.Cert},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-")+".efi")
			work := filepath.Join(dir, "sign-"+strings.ReplaceAll(tc.name, " ", "-"))
			if err := SignEFI(ctx, cfg, work, tc.key, uki, out); err != nil {
				t.Fatal(err)
			}
			if err := verify(out, tc.key.Cert); err != nil {
				t.Errorf("sbverify --cert %s: %v, want the signature to verify", tc.key.Cert, err)
			}
			if err := verify(out, tc.otherCert); err == nil {
				t.Errorf("sbverify --cert %s (another key): verified, want a refusal", tc.otherCert)
			}
			if err := verify(uki, tc.key.Cert); err == nil {
				t.Errorf("the unsigned UKI verified against %s, want a refusal", tc.key.Cert)
			}
			// The decrypted development key is not left behind.
			if _, err := os.Stat(filepath.Join(work, "secureboot.key")); err == nil {
				t.Errorf("the decrypted key stayed in %s", work)
			}
		})
	}
	// The slot kernel: an already signed PE re-signed with the vendor key
	// carries that one signature only (the kernel's PE parser reads the
	// certificate table's only entry).
	devSigned := filepath.Join(dir, "development-key.efi")
	resigned := filepath.Join(dir, "resigned.efi")
	if err := SignKernel(ctx, cfg, filepath.Join(dir, "sign-kernel"), vendor, devSigned, resigned); err != nil {
		t.Fatal(err)
	}
	if err := verify(resigned, vendor.Cert); err != nil {
		t.Errorf("re-signed kernel: sbverify --cert vendor: %v, want the signature to verify", err)
	}
	if err := verify(resigned, dev.Cert); err == nil {
		t.Errorf("re-signed kernel: still verifies against the development key, want its signature gone")
	}
	list, err := exec.Command("sbverify", "--list", resigned).Output()
	if err != nil {
		t.Fatal(err)
	}
	if n := len(regexp.MustCompile(`(?m)^signature [0-9]+$`).FindAll(list, -1)); n != 1 {
		t.Errorf("re-signed kernel: sbverify --list shows %d signatures, want 1:\n%s", n, list)
	}
}
