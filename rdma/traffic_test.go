package rdma_test

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"

	"cxlpool/rdma"
	"cxlpool/rdma/internal/fake"
)

// TestTraffic: every access that passes the checks counts, refused ones
// and Hold do not.
func TestTraffic(t *testing.T) {
	env := fake.NewEnv(t, rdma.Config{})
	x := env.Export(t, rdma.PermReadWrite)
	h, err := env.Service.Authenticate(x.ID, x.Token)
	if err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		name string
		run  func() error
	}{
		{"read 100", func() error { return h.ReadAt(make([]byte, 100), 0) }},
		{"write 64 across extents", func() error { return h.WriteAt(make([]byte, 64), 1<<20-32) }},
		{"faa", func() error { _, err := h.FetchAdd(8, 1); return err }},
		{"cas", func() error { _, err := h.CompareAndSwap(8, 1, 2); return err }},
		{"refused read", func() error {
			if err := h.ReadAt(make([]byte, 2), fake.ChunkSize-1); !errors.Is(err, rdma.ErrRange) {
				return err
			}
			return nil
		}},
		{"refused atomic", func() error {
			if _, err := h.FetchAdd(4, 1); !errors.Is(err, rdma.ErrAlign) {
				return err
			}
			return nil
		}},
		{"hold", func() error {
			if _, err := h.Hold(nil, 0, 4096, rdma.PermWrite); err != nil {
				return err
			}
			h.Unpin()
			return nil
		}},
	}
	for _, s := range steps {
		if err := s.run(); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
	}
	want := rdma.Traffic{Reads: 1, Writes: 1, Atomics: 2, BytesRead: 100, BytesWritten: 64}
	if diff := cmp.Diff(want, h.Traffic()); diff != "" {
		t.Errorf("handle traffic (-want +got):\n%s", diff)
	}
	got, err := env.Service.Traffic(x.ID)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("service traffic (-want +got):\n%s", diff)
	}
	if _, err := env.Service.Traffic("nosuch"); !errors.Is(err, rdma.ErrNotFound) {
		t.Errorf("traffic of an unknown export: got %v, want ErrNotFound", err)
	}
}
