package flash

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"cxlpool/image/manifest"
)

var key = ed25519.NewKeyFromSeed(bytes.Repeat([]byte{9}, ed25519.SeedSize))

func trusted() manifest.Keys {
	k := manifest.Keys{}
	k.Add(key.Public().(ed25519.PublicKey))
	return k
}

// signedImage writes disk.img with its signed manifest into dir.
func signedImage(t *testing.T, dir string, content []byte) string {
	t.Helper()
	img := filepath.Join(dir, "disk.img")
	if err := os.WriteFile(img, content, 0o644); err != nil {
		t.Fatal(err)
	}
	p, err := manifest.HashFile("disk.img", img)
	if err != nil {
		t.Fatal(err)
	}
	m := &manifest.Manifest{Product: "cxlpool-disk", Version: "1.0", Created: time.Unix(1, 0), Parts: []manifest.Part{p}}
	mb, sig, err := manifest.Sign(m, key)
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(img+".manifest.json", mb, 0o644)
	os.WriteFile(img+".manifest.sig", sig, 0o644)
	return img
}

func TestFlashFile(t *testing.T) {
	dir := t.TempDir()
	content := bytes.Repeat([]byte("cxlpool!"), 300000)
	img := signedImage(t, dir, content)
	target := filepath.Join(dir, "out", "target.img")
	os.MkdirAll(filepath.Dir(target), 0o755)
	os.WriteFile(target, bytes.Repeat([]byte{0xff}, 5<<20), 0o644) // longer: must be truncated
	var last int64
	m, err := Flash(context.Background(), Options{Image: img, Device: target, Keys: trusted(),
		Progress: func(done, total int64) { last = done }})
	if err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(target)
	if !bytes.Equal(got, content) || m.Version != "1.0" || last != int64(len(content)) {
		t.Fatalf("target has %d bytes (equal %v), version %s, progress %d; want the image", len(got), bytes.Equal(got, content), m.Version, last)
	}
}

func TestRefusedImages(t *testing.T) {
	tests := []struct {
		name string
		edit func(img string)
		want error
	}{
		{"unsigned", func(img string) { os.Remove(img + ".manifest.sig") }, manifest.ErrUnsigned},
		{"tampered", func(img string) {
			b, _ := os.ReadFile(img)
			b[10] ^= 1
			os.WriteFile(img, b, 0o644)
		}, manifest.ErrCorrupt},
		{"truncated", func(img string) { os.Truncate(img, 100) }, manifest.ErrTruncated},
		{"foreign key", func(img string) {
			_, other, _ := ed25519.GenerateKey(nil)
			mb, _ := os.ReadFile(img + ".manifest.json")
			os.WriteFile(img+".manifest.sig", ed25519.Sign(other, mb), 0o644)
		}, manifest.ErrBadSig},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			img := signedImage(t, dir, bytes.Repeat([]byte("x"), 4096))
			tt.edit(img)
			target := filepath.Join(dir, "target")
			_, err := Flash(context.Background(), Options{Image: img, Device: target, Keys: trusted()})
			if !errors.Is(err, tt.want) {
				t.Fatalf("got %v, want %v", err, tt.want)
			}
			if _, err := os.Stat(target); !errors.Is(err, os.ErrNotExist) {
				t.Error("target was written")
			}
		})
	}
}

// fixture builds /proc and /sys trees for a machine with disks sda (root
// on sda2), sdb (free), sdc (a partition mounted on /mnt), sdd (held by
// dm-0) and sde (swap on sde1).
func fixture(t *testing.T) (proc, sys string, stat DevInfo) {
	t.Helper()
	root := t.TempDir()
	proc, sys = filepath.Join(root, "proc"), filepath.Join(root, "sys")
	write := func(p, s string) {
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	disks := map[string]int{"sda": 0, "sdb": 16, "sdc": 32, "sdd": 48, "sde": 64}
	for name, minor := range disks {
		d := filepath.Join(sys, "devices", "pci0000:00", "block", name)
		write(filepath.Join(d, "dev"), "8:"+strconv.Itoa(minor)+"\n")
		os.MkdirAll(filepath.Join(d, "holders"), 0o755)
		for p := 1; p <= 2; p++ {
			pd := filepath.Join(d, name+strconv.Itoa(p))
			write(filepath.Join(pd, "dev"), "8:"+strconv.Itoa(minor+p)+"\n")
			write(filepath.Join(pd, "partition"), strconv.Itoa(p)+"\n")
			os.MkdirAll(filepath.Join(pd, "holders"), 0o755)
			os.MkdirAll(filepath.Join(sys, "dev", "block"), 0o755)
			os.Symlink(pd, filepath.Join(sys, "dev", "block", "8:"+strconv.Itoa(minor+p)))
		}
		os.Symlink(d, filepath.Join(sys, "dev", "block", "8:"+strconv.Itoa(minor)))
	}
	os.MkdirAll(filepath.Join(sys, "devices", "pci0000:00", "block", "sdd", "sdd1", "holders", "dm-0"), 0o755)
	write(filepath.Join(proc, "self", "mountinfo"), strings.Join([]string{
		"22 1 8:2 / / rw,relatime shared:1 - ext4 /dev/sda2 rw",
		"23 22 0:5 / /dev rw shared:2 - devtmpfs udev rw",
		"40 22 8:33 / /mnt rw shared:3 - ext4 /dev/sdc1 rw",
	}, "\n")+"\n")
	write(filepath.Join(proc, "swaps"), "Filename Type Size Used Priority\n/dev/sde1 partition 1000 0 -2\n")
	stat = func(path string) (bool, uint32, uint32, error) {
		base := filepath.Base(path)
		for name, minor := range disks {
			switch {
			case base == name:
				return true, 8, uint32(minor), nil
			case strings.HasPrefix(base, name):
				return true, 8, uint32(minor + int(base[len(base)-1]-'0')), nil
			}
		}
		return false, 0, 0, nil
	}
	return proc, sys, stat
}

func TestCheckTarget(t *testing.T) {
	proc, sys, stat := fixture(t)
	dir := t.TempDir()
	for _, d := range []string{"sda", "sdb", "sdc", "sdd", "sde", "sdb1"} {
		os.WriteFile(filepath.Join(dir, d), nil, 0o644) // stand-ins for /dev nodes
	}
	img := filepath.Join(dir, "disk.img")
	os.WriteFile(img, nil, 0o644)
	tests := []struct {
		dev  string
		want string // "" = allowed
	}{
		{"sdb", ""},
		{"new-file.img", ""},
		{"sda", "root file system"},
		{"sdc", "mounted on /mnt"},
		{"sdd", "held by dm-0"},
		{"sde", "swap"},
		{"sdb1", "partition"},
		{"disk.img", "the image itself"},
	}
	for _, tt := range tests {
		t.Run(tt.dev, func(t *testing.T) {
			err := CheckTarget(Options{Image: img, Device: filepath.Join(dir, tt.dev), ProcRoot: proc, SysRoot: sys, Stat: stat})
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("got %v, want allowed", err)
			case tt.want != "" && (!errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("got %v, want a refusal mentioning %q", err, tt.want)
			}
		})
	}
}
