// Package hosttest is the contract suite every host.Backend must pass.
// A backend's test provides a Fixture: the backend under test plus the
// device side (what the box's Fabric Manager does), so the suite can
// offer capacity to the host and ask for it back.
package hosttest

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"cxlpool/host"
)

// Fixture is one backend under test and the device side it is cabled to.
type Fixture struct {
	Backend host.Backend
	// Want is the identity the backend must report.
	Want host.Identity
	// Grant offers size bytes with tag (UUID form) to the host; it
	// returns once the offer is made, not when it is accepted.
	Grant func(ctx context.Context, tag string, size uint64) error
	// Revoke asks the host to release tag (not forced); it returns once
	// the request is made.
	Revoke func(ctx context.Context, tag string) error
	// Block is the device's allocation unit; sizes are multiples of it.
	Block uint64
}

// Run runs the contract suite; newFixture builds a fresh device and
// backend for each subtest (cleanups through t).
func Run(t *testing.T, newFixture func(t *testing.T) Fixture) {
	t.Run("Identity", func(t *testing.T) { testIdentity(t, newFixture(t)) })
	t.Run("GrantSurfacesMemory", func(t *testing.T) { testGrant(t, newFixture(t)) })
	t.Run("ReleaseRefusedWhileMapped", func(t *testing.T) { testBusy(t, newFixture(t)) })
	t.Run("DeviceReleaseWaitsForUnmap", func(t *testing.T) { testReleaseWaits(t, newFixture(t)) })
	t.Run("ReleasedMemoryReadsZero", func(t *testing.T) { testZero(t, newFixture(t)) })
	t.Run("UnknownTag", func(t *testing.T) { testUnknown(t, newFixture(t)) })
}

const tagA = "6a1f0000-0000-4000-8000-00000000000a"

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func testIdentity(t *testing.T, f Fixture) {
	got, err := f.Backend.Identity(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	if got != f.Want {
		t.Errorf("Identity() = %+v, want %+v", got, f.Want)
	}
}

// grant offers and waits for the host to surface the capacity.
func grant(t *testing.T, f Fixture, tag string, size uint64) host.Capacity {
	t.Helper()
	ctx := ctxT(t)
	if err := f.Grant(ctx, tag, size); err != nil {
		t.Fatalf("grant %s: %v", tag, err)
	}
	c, err := f.Backend.Wait(ctx, tag)
	if err != nil {
		t.Fatalf("Wait(%s): %v", tag, err)
	}
	return c
}

func testGrant(t *testing.T, f Fixture) {
	size := 2 * f.Block
	c := grant(t, f, tagA, size)
	if c.Tag != tagA || c.Size != size || c.Path == "" || len(c.Extents) == 0 {
		t.Fatalf("Wait() = %+v, want tag %s, %d bytes, a path and extents", c, tagA, size)
	}
	var sum uint64
	for _, e := range c.Extents {
		sum += e.Length
	}
	if sum != size {
		t.Errorf("extents cover %d bytes, want %d", sum, size)
	}
	m, err := f.Backend.Map(ctxT(t), tagA)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	b := m.Bytes()
	if uint64(len(b)) != size {
		t.Fatalf("mapping is %d bytes, want %d", len(b), size)
	}
	b[0], b[len(b)-1] = 0xa5, 0x5a
	list, err := f.Backend.List(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || !list[0].InUse {
		t.Errorf("List() = %+v, want one tag in use", list)
	}
	// A second mapping sees the first one's bytes: both are the device's.
	m2, err := f.Backend.Map(ctxT(t), tagA)
	if err != nil {
		t.Fatal(err)
	}
	defer m2.Close()
	if got := m2.Bytes(); got[0] != 0xa5 || got[len(got)-1] != 0x5a {
		t.Errorf("second mapping reads %#x…%#x, want 0xa5…0x5a", got[0], got[len(got)-1])
	}
}

func testBusy(t *testing.T, f Fixture) {
	grant(t, f, tagA, f.Block)
	m, err := f.Backend.Map(ctxT(t), tagA)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Backend.Release(ctxT(t), tagA, false); !errors.Is(err, host.ErrBusy) {
		t.Fatalf("Release while mapped = %v, want ErrBusy", err)
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if err := f.Backend.Release(ctxT(t), tagA, false); err != nil {
		t.Fatalf("Release after unmap: %v", err)
	}
	if _, err := f.Backend.Map(ctxT(t), tagA); !errors.Is(err, host.ErrReleasing) {
		t.Errorf("Map after Release = %v, want ErrReleasing", err)
	}
	// The box did not follow (say its release failed): Keep makes the tag
	// usable again, and a second Release is as good as the first.
	if err := f.Backend.Keep(ctxT(t), tagA); err != nil {
		t.Fatalf("Keep: %v", err)
	}
	m, err = f.Backend.Map(ctxT(t), tagA)
	if err != nil {
		t.Fatalf("Map after Keep: %v", err)
	}
	_ = m.Close()
	if err := f.Backend.Release(ctxT(t), tagA, false); err != nil {
		t.Fatal(err)
	}
	if err := f.Revoke(ctxT(t), tagA); err != nil {
		t.Fatal(err)
	}
	if err := f.Backend.WaitGone(ctxT(t), tagA); err != nil {
		t.Fatal(err)
	}
}

func testReleaseWaits(t *testing.T, f Fixture) {
	grant(t, f, tagA, f.Block)
	m, err := f.Backend.Map(ctxT(t), tagA)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Revoke(ctxT(t), tagA); err != nil {
		t.Fatal(err)
	}
	// The device asked; the host must not give memory back from under the
	// mapping. Wait until the backend has seen the request (it refuses new
	// mappings), then check it still holds the tag.
	deadline := time.Now().Add(10 * time.Second)
	for {
		m2, err := f.Backend.Map(ctxT(t), tagA)
		if errors.Is(err, host.ErrReleasing) {
			break
		}
		if err == nil {
			_ = m2.Close()
		}
		if time.Now().After(deadline) {
			t.Fatalf("the backend never saw the device's release request (Map: %v)", err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	list, err := f.Backend.List(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || !list[0].InUse {
		t.Fatalf("while mapped: List() = %+v, want the tag still held and in use", list)
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if err := f.Backend.WaitGone(ctxT(t), tagA); err != nil {
		t.Fatal(err)
	}
}

func testZero(t *testing.T, f Fixture) {
	grant(t, f, tagA, f.Block)
	m, err := f.Backend.Map(ctxT(t), tagA)
	if err != nil {
		t.Fatal(err)
	}
	copy(m.Bytes(), "secret of host A")
	_ = m.Close()
	if err := f.Backend.Release(ctxT(t), tagA, false); err != nil {
		t.Fatal(err)
	}
	if err := f.Revoke(ctxT(t), tagA); err != nil {
		t.Fatal(err)
	}
	if err := f.Backend.WaitGone(ctxT(t), tagA); err != nil {
		t.Fatal(err)
	}
	const tagB = "6a1f0000-0000-4000-8000-00000000000b"
	grant(t, f, tagB, f.Block)
	m, err = f.Backend.Map(ctxT(t), tagB)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if got := m.Bytes()[:16]; !bytes.Equal(got, make([]byte, 16)) {
		t.Errorf("re-granted memory reads %q, want zeros", got)
	}
}

func testUnknown(t *testing.T, f Fixture) {
	if _, err := f.Backend.Map(ctxT(t), tagA); !errors.Is(err, host.ErrUnknownTag) {
		t.Errorf("Map(unknown) = %v, want ErrUnknownTag", err)
	}
	if err := f.Backend.Release(ctxT(t), tagA, false); !errors.Is(err, host.ErrUnknownTag) {
		t.Errorf("Release(unknown) = %v, want ErrUnknownTag", err)
	}
	if err := f.Backend.Keep(ctxT(t), tagA); !errors.Is(err, host.ErrUnknownTag) {
		t.Errorf("Keep(unknown) = %v, want ErrUnknownTag", err)
	}
}
