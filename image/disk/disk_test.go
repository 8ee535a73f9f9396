package disk

import (
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// memDisk is an in-memory io.ReaderAt/WriterAt.
type memDisk []byte

func (m memDisk) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 || off+int64(len(p)) > int64(len(m)) {
		return 0, io.EOF
	}
	return copy(p, m[off:]), nil
}
func (m memDisk) WriteAt(p []byte, off int64) (int, error) { return copy(m[off:], p), nil }

func smallLayout() Layout {
	return Layout{SlotSize: 2 * mib, DataSize: 1 * mib, BootSize: 1 * mib, ESPSize: 1 * mib, Seed: 42}
}

func TestTableRoundTrip(t *testing.T) {
	parts, size, err := smallLayout().Partitions()
	if err != nil {
		t.Fatal(err)
	}
	if size != 9*mib {
		t.Fatalf("got disk size %d, want %d", size, 9*mib)
	}
	d := make(memDisk, size)
	if err := WriteTable(d, size, parts, 42); err != nil {
		t.Fatal(err)
	}
	got, err := ReadTable(d, size)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(parts, got); diff != "" {
		t.Errorf("table (-want +got):\n%s", diff)
	}
	wantNames := []struct {
		name string
		off  int64
	}{{BootName, 1 * mib}, {SlotAName, 2 * mib}, {SlotBName, 4 * mib}, {DataName, 6 * mib}, {ESPName, 7 * mib}}
	for _, w := range wantNames {
		p, err := Find(got, w.name)
		if err != nil || p.Offset != w.off {
			t.Errorf("Find(%s): got offset %d err %v, want %d", w.name, p.Offset, err, w.off)
		}
	}
	// UEFI firmware finds the ESP by its type; the others are Linux data.
	for _, p := range got {
		want := linuxData
		if p.Name == ESPName {
			want = ESPType
		}
		if p.Type != want {
			t.Errorf("%s: type %v, want %v", p.Name, p.Type, want)
		}
	}
	if _, err := Find(got, "nope"); !errors.Is(err, ErrNoPartition) {
		t.Errorf("got %v, want ErrNoPartition", err)
	}

	// A damaged primary header falls back to the backup copy.
	d[SectorSize+20] ^= 0xff
	got, err = ReadTable(d, size)
	if err != nil {
		t.Fatalf("backup table: %v", err)
	}
	if diff := cmp.Diff(parts, got); diff != "" {
		t.Errorf("backup table (-want +got):\n%s", diff)
	}
	// Both damaged: no table.
	d[size-SectorSize+20] ^= 0xff
	if _, err := ReadTable(d, size); !errors.Is(err, ErrNoGPT) {
		t.Errorf("got %v, want ErrNoGPT", err)
	}
}

// TestBlkid cross-checks the table with util-linux's reader where present.
func TestBlkid(t *testing.T) {
	blkid, err := exec.LookPath("blkid")
	if err != nil {
		t.Skip("blkid not installed")
	}
	parts, size, _ := smallLayout().Partitions()
	path := filepath.Join(t.TempDir(), "disk.img")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	f.Truncate(size)
	if err := WriteTable(f, size, parts, 42); err != nil {
		t.Fatal(err)
	}
	f.Close()
	out, err := exec.Command(blkid, "-p", "-o", "value", "-s", "PTTYPE", path).CombinedOutput()
	if err != nil {
		t.Fatalf("blkid: %v: %s", err, out)
	}
	if got := strings.TrimSpace(string(out)); got != "gpt" {
		t.Errorf("blkid says PTTYPE %q, want gpt", got)
	}
}

func TestDevicePath(t *testing.T) {
	for _, tt := range []struct {
		dev  string
		i    int
		want string
	}{{"/dev/vda", 4, "/dev/vda4"}, {"/dev/nvme0n1", 2, "/dev/nvme0n1p2"}, {"/dev/mmcblk0", 1, "/dev/mmcblk0p1"}} {
		if got := DevicePath(tt.dev, tt.i); got != tt.want {
			t.Errorf("DevicePath(%s, %d) = %s, want %s", tt.dev, tt.i, got, tt.want)
		}
	}
}

func FuzzReadTable(f *testing.F) {
	parts, size, _ := smallLayout().Partitions()
	d := make(memDisk, size)
	WriteTable(d, size, parts, 42)
	f.Add([]byte(d[:firstUsable*SectorSize]))
	f.Add(bytes.Repeat([]byte{0xff}, 4096))
	f.Fuzz(func(t *testing.T, b []byte) {
		buf := make(memDisk, max(len(b), 64*SectorSize))
		copy(buf, b)
		ReadTable(buf, int64(len(buf)))
	})
}
