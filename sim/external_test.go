package sim_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"cxlpool/fabric/mctp"
	"cxlpool/sim"
)

// A head handed to an external host runs no synthetic workload: the box
// must not write memory a program of that host owns.
func TestExternalHeadHasNoWorkload(t *testing.T) {
	cfg := sim.DefaultConfig()
	cfg.WorkloadTick = -1
	box, err := sim.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer box.Close()
	if err := box.StartWorkload(2, sim.WorkloadZipf, sim.WorkloadParams{}); err != nil {
		t.Fatal(err)
	}
	if err := box.SetExternal(2); err != nil {
		t.Fatal(err)
	}
	if err := box.StartWorkload(2, sim.WorkloadZipf, sim.WorkloadParams{}); err != nil {
		t.Fatal(err)
	}
	if err := box.StartWorkload(3, sim.WorkloadZipf, sim.WorkloadParams{}); err != nil {
		t.Fatal(err)
	}
	if got, want := box.Workloads(), map[int]sim.WorkloadKind{3: sim.WorkloadZipf}; !cmp.Equal(got, want) {
		t.Errorf("Workloads() = %v, want %v", got, want)
	}
	if !box.External(2) || box.External(3) {
		t.Errorf("External(2), External(3) = %v, %v; want true, false", box.External(2), box.External(3))
	}
	if err := box.SetExternal(9); err == nil {
		t.Error("SetExternal(9) on an 8-head box succeeded")
	}
}

func TestHostHelloRoundTrip(t *testing.T) {
	h := sim.HostHello{LD: 5, BoxEID: 8, HostEID: mctp.EID(0x10), Size: 1 << 40, Serial: 0x0123456789abcdef}
	b, _ := h.MarshalBinary()
	if len(b) != sim.HostHelloLen || string(b[:8]) != "CXLHOST1" || b[8] != 5 || b[0x0a] != 8 || b[0x0b] != 0x10 {
		t.Fatalf("hello bytes % x", b)
	}
	var got sim.HostHello
	if err := got.UnmarshalBinary(b); err != nil || got != h {
		t.Errorf("round trip = %+v, %v; want %+v", got, err, h)
	}
	b[0] = 'X'
	if err := got.UnmarshalBinary(b); err == nil {
		t.Error("a hello with a bad magic decoded")
	}
}
