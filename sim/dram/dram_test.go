package dram

import (
	"bytes"
	"errors"
	"testing"
)

func TestSparseReadWriteZero(t *testing.T) {
	const size = 1 << 40 // 1 TiB: must cost nothing until written
	d, err := New(size)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if got := d.Size(); got != size {
		t.Fatalf("Size() = %d, want %d", got, size)
	}
	r0, err := d.Resident()
	if err != nil {
		t.Fatal(err)
	}
	if r0 != 0 {
		t.Fatalf("resident before writes = %d, want 0", r0)
	}

	off := int64(size - 3<<20)
	data := bytes.Repeat([]byte("cxl!"), 1<<18) // 1 MiB
	if n, err := d.WriteAt(data, off); err != nil || n != len(data) {
		t.Fatalf("WriteAt = %d, %v; want %d, nil", n, err, len(data))
	}
	got := make([]byte, len(data))
	if _, err := d.ReadAt(got, off); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, data) {
		t.Fatal("read back differs from written data")
	}
	r1, _ := d.Resident()
	if r1 < uint64(len(data)) {
		t.Fatalf("resident after 1 MiB write = %d, want >= %d", r1, len(data))
	}

	if err := d.Zero(uint64(off), uint64(len(data))); err != nil {
		t.Fatal(err)
	}
	if _, err := d.ReadAt(got, off); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, make([]byte, len(got))) {
		t.Fatal("range not zero after Zero")
	}
	r2, _ := d.Resident()
	if r2 >= r1 {
		t.Fatalf("resident after Zero = %d, want < %d (pages freed)", r2, r1)
	}
}

func TestUnalignedZero(t *testing.T) {
	d, err := New(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if _, err := d.WriteAt(bytes.Repeat([]byte{0xff}, 1<<20), 0); err != nil {
		t.Fatal(err)
	}
	if err := d.Zero(100, 5000); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 6000)
	if _, err := d.ReadAt(got, 0); err != nil {
		t.Fatal(err)
	}
	for i, b := range got {
		want := byte(0xff)
		if i >= 100 && i < 5100 {
			want = 0
		}
		if b != want {
			t.Fatalf("byte %d = %#x, want %#x", i, b, want)
		}
	}
}

func TestRangeErrors(t *testing.T) {
	d, err := New(4096)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	buf := make([]byte, 16)
	tests := []struct {
		name string
		fn   func() error
	}{
		{"read past end", func() error { _, err := d.ReadAt(buf, 4090); return err }},
		{"write past end", func() error { _, err := d.WriteAt(buf, 4090); return err }},
		{"negative read", func() error { _, err := d.ReadAt(buf, -1); return err }},
		{"negative write", func() error { _, err := d.WriteAt(buf, -1); return err }},
		{"zero past end", func() error { return d.Zero(4000, 200) }},
		{"zero offset past end", func() error { return d.Zero(1<<20, 1) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.fn(); !errors.Is(err, ErrRange) {
				t.Fatalf("got %v, want ErrRange", err)
			}
		})
	}
	if _, err := New(0); err == nil {
		t.Fatal("New(0): got nil error, want one")
	}
}
