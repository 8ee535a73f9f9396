package appliance

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"cxlpool/fabric"
)

// countingDevice answers Discover with serial n on its nth call (the
// first one fails when failFirst is set).
type countingDevice struct {
	fabric.Device
	mu        sync.Mutex
	calls     int
	failFirst bool
}

func (d *countingDevice) Discover(context.Context) (fabric.Box, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.calls++
	if d.failFirst && d.calls == 1 {
		return fabric.Box{}, errors.New("no answer yet")
	}
	var b fabric.Box
	b.Identity.Serial = uint64(d.calls)
	return b, nil
}

func TestEarlyDiscovery(t *testing.T) {
	for _, tt := range []struct {
		name      string
		failFirst bool
		want      []uint64 // serials of three Discover calls
		calls     int
	}{
		{"the first Discover takes the early one", false, []uint64{1, 2, 3}, 3},
		{"a failed early discovery is run again", true, []uint64{2, 3, 4}, 4},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dev := &countingDevice{failFirst: tt.failFirst}
			d := discoverEarly(t.Context(), dev)
			var got []uint64
			for range 3 {
				b, err := d.Discover(t.Context())
				if err != nil {
					t.Fatal(err)
				}
				got = append(got, b.Identity.Serial)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("serials (-want +got):\n%s", diff)
			}
			if dev.calls != tt.calls {
				t.Errorf("device discovered %d times, want %d", dev.calls, tt.calls)
			}
		})
	}
}
