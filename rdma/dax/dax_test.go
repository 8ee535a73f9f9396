package dax

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"cxlpool/rdma"
)

func fixture(t *testing.T, size int64) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "dax0.0")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
	f.Close()
	return p
}

func TestOpenFile(t *testing.T) {
	p := fixture(t, 4<<20)
	m, err := Open(Config{Path: p, Base: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if m.Size() != 4<<20 || m.Base() != 1<<30 {
		t.Fatalf("got size %#x base %#x", m.Size(), m.Base())
	}
	// Stores through the mapping are the file's bytes, and the other
	// way round: the memory is shared, not copied.
	b, err := m.Bytes(1<<30+4096, 5)
	if err != nil {
		t.Fatal(err)
	}
	copy(b, "hello")
	got := make([]byte, 5)
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.ReadAt(got, 4096); err != nil || string(got) != "hello" {
		t.Errorf("file reads %q, %v; want hello", got, err)
	}
	if _, err := f.WriteAt([]byte("world"), 8192); err != nil {
		t.Fatal(err)
	}
	b, _ = m.Bytes(1<<30+8192, 5)
	if string(b) != "world" {
		t.Errorf("mapping reads %q, want world", b)
	}
	if _, err := m.Bytes(0, 1); !errors.Is(err, rdma.ErrRange) {
		t.Errorf("below the base: got %v, want ErrRange", err)
	}
}

func TestOpenErrors(t *testing.T) {
	p := fixture(t, 4<<20)
	tests := []struct {
		name string
		cfg  Config
		want error
	}{
		{"missing", Config{Path: filepath.Join(t.TempDir(), "nope")}, os.ErrNotExist},
		{"directory", Config{Path: t.TempDir()}, syscall.EISDIR},
		{"character device that is not dax", Config{Path: "/dev/null", Sysfs: t.TempDir()}, os.ErrNotExist},
		{"too large", Config{Path: p, Size: 8 << 20}, rdma.ErrInvalid},
		{"unaligned size", Config{Path: p, Size: 4097}, rdma.ErrInvalid},
		{"empty", Config{Path: fixture(t, 0)}, rdma.ErrInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := Open(tt.cfg)
			if err == nil {
				m.Close()
			}
			if !errors.Is(err, tt.want) {
				t.Errorf("got %v, want %v", err, tt.want)
			}
		})
	}
}

func TestAttributes(t *testing.T) {
	write := func(dir, name, v string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(v), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name        string
		files       map[string]string
		size, align uint64
		wantErr     bool
	}{
		{"size and align", map[string]string{"size": "68719476736\n", "align": "1073741824\n"}, 64 << 30, 1 << 30, false},
		{"old kernel without align", map[string]string{"size": "2147483648\n"}, 2 << 30, 2 << 20, false},
		{"not dax", map[string]string{}, 0, 0, true},
		{"garbage", map[string]string{"size": "lots"}, 0, 0, true},
		{"odd align", map[string]string{"size": "4096", "align": "3000"}, 0, 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			for k, v := range tt.files {
				write(dir, k, v)
			}
			size, align, err := attributes(dir)
			if (err != nil) != tt.wantErr || size != tt.size || align != tt.align {
				t.Errorf("got %d, %d, %v; want %d, %d, error %v", size, align, err, tt.size, tt.align, tt.wantErr)
			}
		})
	}
}

func TestOpenCharDevice(t *testing.T) {
	// /dev/zero stands in for /dev/daxX.Y: a character device whose
	// shared mapping is memory, described by a fake sysfs.
	var st unix.Stat_t
	if err := unix.Stat("/dev/zero", &st); err != nil {
		t.Skipf("no /dev/zero: %v", err)
	}
	sysfs := t.TempDir()
	dir := filepath.Join(sysfs, "dev", "char", fmt.Sprintf("%d:%d", unix.Major(st.Rdev), unix.Minor(st.Rdev)))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	for name, v := range map[string]string{"size": "8388608\n", "align": "2097152\n"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(v), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		size uint64
		want error
	}{{0, nil}, {4 << 20, nil}, {3 << 20, rdma.ErrInvalid}}
	for _, tt := range tests {
		m, err := Open(Config{Path: "/dev/zero", Sysfs: sysfs, Size: tt.size})
		if !errors.Is(err, tt.want) {
			t.Errorf("size %#x: got %v, want %v", tt.size, err, tt.want)
		}
		if err != nil {
			continue
		}
		want := tt.size
		if want == 0 {
			want = 8 << 20
		}
		if m.Size() != want || m.Align() != 2<<20 || m.Path() != "/dev/zero" {
			t.Errorf("got size %#x align %#x path %s; want %#x, 2 MiB, /dev/zero", m.Size(), m.Align(), m.Path(), want)
		}
		b, err := m.Bytes(want-8, 8)
		if err != nil {
			t.Fatal(err)
		}
		copy(b, "lastword")
		m.Close()
	}
}
