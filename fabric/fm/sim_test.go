package fm

import (
	"context"
	"errors"
	"net"
	"path/filepath"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"cxlpool/fabric"
	"cxlpool/fabric/cci"
	"cxlpool/fabric/serial"
	"cxlpool/sim"
)

// These tests run the client against the virtual box over DSP0253 framing
// on an in-memory stream: the integration proof of the whole stack.

// eventWait bounds how long a test waits for an expected event before it
// reports it missing. It is a hang guard, not a performance assertion.
const eventWait = 20 * time.Second

// faultTimeout is the per-attempt timeout of tests that lose responses on
// purpose, so that each loss costs little time.
const faultTimeout = 300 * time.Millisecond

// rig is a box and a client connected to it.
type rig struct {
	box *sim.Box
	c   *Client
}

// newRig starts a virtual box (DefaultConfig changed by mod) served over a
// net.Pipe and opens a client on the other end. The client polls rarely
// so that injected faults hit the commands under test, not the pump.
func newRig(tb testing.TB, mod func(*sim.Config), cfg Config) *rig {
	tb.Helper()
	sc := sim.DefaultConfig()
	if mod != nil {
		mod(&sc)
	}
	box, err := sim.New(sc)
	if err != nil {
		tb.Fatalf("sim.New: %v", err)
	}
	devSide, fmSide := net.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- box.ServeConn(ctx, devSide) }()
	if cfg.PollInterval == 0 {
		cfg.PollInterval = time.Hour
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = DefaultTimeout
	}
	c, err := Open(ctx, serial.NewLink(fmSide, serial.LinkConfig{}), cfg)
	if err != nil {
		tb.Fatalf("Open: %v", err)
	}
	tb.Cleanup(func() {
		_ = c.Close()
		cancel()
		if err := <-served; err != nil {
			tb.Errorf("ServeConn: %v", err)
		}
		_ = box.Close()
	})
	return &rig{box: box, c: c}
}

func (r *rig) discover(tb testing.TB) fabric.Box {
	tb.Helper()
	b, err := r.c.Discover(context.Background())
	if err != nil {
		tb.Fatalf("Discover: %v", err)
	}
	return b
}

// next returns the next event of kind k, skipping others.
func (r *rig) next(tb testing.TB, k fabric.EventKind) fabric.Event {
	tb.Helper()
	timer := time.NewTimer(eventWait)
	defer timer.Stop()
	for {
		select {
		case ev, ok := <-r.c.Events():
			if !ok {
				tb.Fatalf("Events closed while waiting for %v", k)
			}
			if ev.Kind == k {
				return ev
			}
			tb.Logf("skipping event %v (host %d)", ev.Kind, ev.Host)
		case <-timer.C:
			tb.Fatalf("no %v event within %v", k, eventWait)
		}
	}
}

// sum returns the total length of extents carrying tag.
func sum(es []cci.Extent, tag cci.Tag) uint64 {
	var n uint64
	for _, e := range es {
		if e.Tag == tag {
			n += e.Length
		}
	}
	return n
}

func TestDiscoverVirtualBox(t *testing.T) {
	r := newRig(t, nil, Config{})
	got := r.discover(t)

	if len(got.Supported) == 0 || !slices.Contains(got.Supported, cci.OpInitiateDCAdd) {
		t.Errorf("Supported: got %v, want a CEL listing 5604h", got.Supported)
	}
	if got.DiscoveredAt.IsZero() {
		t.Errorf("DiscoveredAt: got zero, want the discovery time")
	}
	var wantHeads []fabric.Head
	for i := range 8 {
		wantHeads = append(wantHeads, fabric.Head{Port: uint8(i), LD: uint16(i), MaxWidth: 16, NegotiatedWidth: 16,
			MaxSpeed: 5, CurrentSpeed: 5, LTSSM: cci.LTSSML0, LinkUp: true})
	}
	const gib = 1 << 30
	want := fabric.Box{
		Identity: fabric.Identity{
			VendorID: 0x1e98, DeviceID: 0x0d93, Serial: 0x0123456789abcdef,
			MaxPayload: 512, ComponentType: cci.ComponentType3,
			FirmwareRevision: "cxlsim 1.0", TotalCapacity: 1024 * gib,
		},
		Heads: wantHeads,
		Regions: []fabric.Region{
			{Index: 0, Base: 0, DecodeLength: 512 * gib, Length: 512 * gib, BlockSize: 256 << 20,
				Sharable: false, SanitizeOnRelease: true, SoRConfigurable: true},
			{Index: 1, Base: 512 * gib, DecodeLength: 512 * gib, Length: 512 * gib, BlockSize: 256 << 20,
				Sharable: true, SanitizeOnRelease: true, SoRConfigurable: true},
		},
		TotalDynamic:    1024 * gib,
		AddPolicies:     0b111,
		ReleasePolicies: 0b11,
		ExtentsPerHost:  512,
		TagsPerHost:     64,
	}
	opts := cmp.FilterPath(func(p cmp.Path) bool {
		s := p.String()
		return s == "Supported" || s == "DiscoveredAt"
	}, cmp.Ignore())
	if diff := cmp.Diff(want, got, opts); diff != "" {
		t.Errorf("Box (-want +got):\n%s", diff)
	}
	// The response limit is the smaller of ours (2^10) and the box's (2^9).
	if got := r.c.limit(); got != 512 {
		t.Errorf("response limit: got %d, want 512", got)
	}
}

func TestDiscoverWaitsForBoot(t *testing.T) {
	r := newRig(t, nil, Config{})
	r.box.Faults().Reset() // the next BootRetries requests answer Retry Required
	if got := r.discover(t); len(got.Heads) != 8 {
		t.Errorf("heads: got %d, want 8", len(got.Heads))
	}
}

func TestAddAndRelease(t *testing.T) {
	r := newRig(t, nil, Config{})
	r.discover(t)
	ctx := context.Background()
	tag := cci.NewTag()
	const host, size = 2, 1 << 30
	if err := r.c.Add(ctx, fabric.AddRequest{Host: host, Policy: fabric.AddFree, Region: 0, Length: size, Tag: tag}); err != nil {
		t.Fatalf("Add: %v", err)
	}
	ev := r.next(t, fabric.EventAddResponse)
	if ev.Host != host || sum(ev.Extents, tag) != size {
		t.Fatalf("add response: got host %d with %d tagged bytes, want host %d with %d", ev.Host, sum(ev.Extents, tag), host, size)
	}
	list, err := r.c.Extents(ctx, host)
	if err != nil {
		t.Fatalf("Extents: %v", err)
	}
	if diff := cmp.Diff(ev.Extents, list.Extents); diff != "" {
		t.Errorf("extent list vs add response (-event +list):\n%s", diff)
	}
	if diff := cmp.Diff(r.box.Host(host).Extents(), list.Extents); diff != "" {
		t.Errorf("extent list vs host view (-host +list):\n%s", diff)
	}

	err = r.c.Release(ctx, fabric.ReleaseRequest{Host: host, Policy: fabric.ReleaseTagBased, Sanitize: true, Length: size, Tag: tag})
	if err != nil {
		t.Fatalf("Release: %v", err)
	}
	ev = r.next(t, fabric.EventCapacityReleased)
	if ev.Host != host || sum(ev.Extents, tag) != size {
		t.Fatalf("released: got host %d with %d tagged bytes, want host %d with %d", ev.Host, sum(ev.Extents, tag), host, size)
	}
	after, err := r.c.Extents(ctx, host)
	if err != nil {
		t.Fatalf("Extents: %v", err)
	}
	if len(after.Extents) != 0 {
		t.Errorf("extents after release: got %v, want none", after.Extents)
	}
	if after.Generation == list.Generation {
		t.Errorf("generation: got %d twice, want a change after the release", after.Generation)
	}
}

func TestPendingAddAndForcedRelease(t *testing.T) {
	r := newRig(t, nil, Config{})
	r.discover(t)
	ctx := context.Background()
	const host = 4
	r.box.Host(host).SetPolicy(sim.Policy{Mode: sim.NeverAnswer})
	tag := cci.NewTag()
	if err := r.c.Add(ctx, fabric.AddRequest{Host: host, Policy: fabric.AddFree, Region: 0, Length: 512 << 20, Tag: tag}); err != nil {
		t.Fatalf("Add: %v", err)
	}
	tags, err := r.c.Tags(ctx)
	if err != nil {
		t.Fatalf("Tags: %v", err)
	}
	ti, ok := tags.Find(tag)
	if !ok || !ti.HasPending(host) || ti.HasAccepted(host) {
		t.Fatalf("tag %v: got found=%v pending=%v accepted=%v, want pending only", tag, ok, ti.HasPending(host), ti.HasAccepted(host))
	}
	err = r.c.Release(ctx, fabric.ReleaseRequest{Host: host, Policy: fabric.ReleaseTagBased, Forced: true, Length: 512 << 20, Tag: tag})
	if err != nil {
		t.Fatalf("forced Release: %v", err)
	}
	after, err := r.c.Tags(ctx)
	if err != nil {
		t.Fatalf("Tags: %v", err)
	}
	if ti, ok := after.Find(tag); ok && (ti.HasPending(host) || ti.HasAccepted(host)) {
		t.Errorf("tag after forced release: got pending=%v accepted=%v, want neither", ti.HasPending(host), ti.HasAccepted(host))
	}
	if after.Generation == tags.Generation {
		t.Errorf("tag generation: got %d twice, want a change", after.Generation)
	}
}

func TestRejectingHost(t *testing.T) {
	r := newRig(t, nil, Config{})
	r.discover(t)
	const host = 5
	r.box.Host(host).SetPolicy(sim.Policy{Mode: sim.Reject})
	err := r.c.Add(context.Background(), fabric.AddRequest{Host: host, Policy: fabric.AddFree, Region: 0, Length: 256 << 20, Tag: cci.NewTag()})
	if err != nil {
		t.Fatalf("Add: %v", err)
	}
	ev := r.next(t, fabric.EventAddResponse)
	if ev.Host != host || len(ev.Extents) != 0 {
		t.Errorf("add response: got host %d with %v, want host %d with no extents", ev.Host, ev.Extents, host)
	}
}

func TestSharedAccess(t *testing.T) {
	r := newRig(t, nil, Config{})
	r.discover(t)
	ctx := context.Background()
	tag := cci.NewTag()
	const size = 768 << 20
	if err := r.c.Add(ctx, fabric.AddRequest{Host: 1, Policy: fabric.AddFree, Region: 1, Length: size, Tag: tag}); err != nil {
		t.Fatalf("Add host 1: %v", err)
	}
	first := r.next(t, fabric.EventAddResponse)
	if err := r.c.Add(ctx, fabric.AddRequest{Host: 6, Policy: fabric.AddSharedAccess, Region: 1, Tag: tag}); err != nil {
		t.Fatalf("shared Add host 6: %v", err)
	}
	second := r.next(t, fabric.EventAddResponse)
	if first.Host != 1 || second.Host != 6 {
		t.Fatalf("hosts: got %d then %d, want 1 then 6", first.Host, second.Host)
	}
	if sum(first.Extents, tag) != size {
		t.Errorf("host 1 got %d bytes, want %d", sum(first.Extents, tag), size)
	}
	if diff := cmp.Diff(first.Extents, second.Extents); diff != "" {
		t.Errorf("shared extents differ (-host1 +host6):\n%s", diff)
	}
	tags, err := r.c.Tags(ctx)
	if err != nil {
		t.Fatalf("Tags: %v", err)
	}
	ti, ok := tags.Find(tag)
	if !ok || !ti.HasAccepted(1) || !ti.HasAccepted(6) || ti.HasAccepted(2) {
		t.Errorf("tag accepted by 1/6/2: got %v/%v/%v (found %v), want true/true/false", ti.HasAccepted(1), ti.HasAccepted(6), ti.HasAccepted(2), ok)
	}
	for _, h := range []uint16{1, 6} {
		l, err := r.c.Extents(ctx, h)
		if err != nil {
			t.Fatalf("Extents(%d): %v", h, err)
		}
		if sum(l.Extents, tag) != size {
			t.Errorf("host %d holds %d tagged bytes, want %d", h, sum(l.Extents, tag), size)
		}
	}
}

func TestFaults(t *testing.T) {
	tests := []struct {
		name    string
		inject  func(*sim.Faults)
		run     func(context.Context, *Client) error
		wantErr error // nil: transparent
	}{
		{"busy is reported",
			func(f *sim.Faults) { f.Busy(1) },
			func(ctx context.Context, c *Client) error { _, err := c.Heads(ctx); return err },
			cci.Busy},
		{"lost identify response is retried",
			func(f *sim.Faults) { f.DropResponses(1) },
			func(ctx context.Context, c *Client) error { return c.Do(ctx, cci.OpIdentify, nil, nil) },
			nil},
		{"corrupt frame is retried",
			func(f *sim.Faults) { f.CorruptFrames(1) },
			func(ctx context.Context, c *Client) error { _, err := c.Extents(ctx, 0); return err },
			nil},
		{"lost add response is a timeout",
			func(f *sim.Faults) { f.DropResponsesTo(cci.OpInitiateDCAdd, 1) },
			func(ctx context.Context, c *Client) error {
				return c.Add(ctx, fabric.AddRequest{Host: 3, Policy: fabric.AddFree, Region: 0, Length: 256 << 20, Tag: cci.NewTag()})
			},
			fabric.ErrTimeout},
		{"retry required is reported",
			func(f *sim.Faults) { f.RetryRequired(1) },
			func(ctx context.Context, c *Client) error {
				return c.Release(ctx, fabric.ReleaseRequest{Host: 3, Policy: fabric.ReleaseTagBased, Length: 256 << 20, Tag: cci.NewTag()})
			},
			cci.RetryRequired},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, nil, Config{Timeout: faultTimeout})
			r.discover(t)
			tc.inject(r.box.Faults())
			err := tc.run(context.Background(), r.c)
			if tc.wantErr == nil && err != nil || tc.wantErr != nil && !errors.Is(err, tc.wantErr) {
				t.Errorf("got %v, want %v", err, tc.wantErr)
			}
		})
	}
}

func TestLostAddResponseStillReportsOutcome(t *testing.T) {
	r := newRig(t, nil, Config{Timeout: faultTimeout})
	r.discover(t)
	r.box.Faults().DropResponsesTo(cci.OpInitiateDCAdd, 1)
	tag := cci.NewTag()
	err := r.c.Add(context.Background(), fabric.AddRequest{Host: 3, Policy: fabric.AddFree, Region: 0, Length: 256 << 20, Tag: tag})
	if !errors.Is(err, fabric.ErrTimeout) {
		t.Fatalf("Add: got %v, want ErrTimeout", err)
	}
	// The add did execute; the FM learns it from the event (and 5603h).
	if ev := r.next(t, fabric.EventAddResponse); ev.Host != 3 || sum(ev.Extents, tag) != 256<<20 {
		t.Errorf("add response: got host %d with %d bytes, want host 3 with %d", ev.Host, sum(ev.Extents, tag), 256<<20)
	}
}

func TestDeviceReset(t *testing.T) {
	tests := []struct {
		name       string
		poll       time.Duration
		rediscover bool
	}{
		{"detected by the health poll", 10 * time.Millisecond, false},
		{"reported by a rediscovery before any poll", time.Hour, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, nil, Config{PollInterval: tc.poll})
			r.discover(t)
			r.box.Faults().Reset()
			if tc.rediscover {
				r.discover(t)
			}
			r.next(t, fabric.EventDeviceReset)

			// Events keep flowing once the policy is armed again.
			tag := cci.NewTag()
			ctx := context.Background()
			if err := r.c.Add(ctx, fabric.AddRequest{Host: 7, Policy: fabric.AddFree, Region: 0, Length: 256 << 20, Tag: tag}); err != nil {
				t.Fatalf("Add after reset: %v", err)
			}
			if ev := r.next(t, fabric.EventAddResponse); ev.Host != 7 || sum(ev.Extents, tag) != 256<<20 {
				t.Errorf("add response: got host %d with %d bytes, want host 7 with %d", ev.Host, sum(ev.Extents, tag), 256<<20)
			}
		})
	}
}

func TestLinkChange(t *testing.T) {
	r := newRig(t, nil, Config{})
	r.discover(t)
	r.box.SetLink(3, false)
	ev := r.next(t, fabric.EventLinkChange)
	if ev.Host != 3 || ev.LinkUp {
		t.Errorf("link event: got host %d up=%v, want host 3 down", ev.Host, ev.LinkUp)
	}
	heads, err := r.c.Heads(context.Background())
	if err != nil {
		t.Fatalf("Heads: %v", err)
	}
	for _, h := range heads {
		if want := h.LD != 3; h.LinkUp != want {
			t.Errorf("head %d: got LinkUp %v, want %v", h.LD, h.LinkUp, want)
		}
	}
	r.box.SetLink(3, true)
	if ev := r.next(t, fabric.EventLinkChange); ev.Host != 3 || !ev.LinkUp {
		t.Errorf("link event: got host %d up=%v, want host 3 up", ev.Host, ev.LinkUp)
	}
}

// smallBox is a box with 256-byte CCI payloads and 2 MiB blocks, so lists
// take many pages.
func smallBox(c *sim.Config) {
	c.MaxPayloadExp = 8
	c.Capacity = 1 << 30
	c.Regions = 1
	c.BlockSize = 2 << 20
}

// addScattered gives host n separate 2 MiB extents (every other block, so
// none are adjacent) in prescriptive adds that fit a 256-byte payload, and
// waits for every add response.
func addScattered(tb testing.TB, r *rig, host uint16, n int) []cci.Extent {
	tb.Helper()
	const block = 2 << 20
	per := (256 - cci.InitiateDCPrescriptiveMinLen) / cci.ExtentLen
	var all []cci.Extent
	for i := 0; i < n; i += per {
		var batch []cci.Extent
		for j := i; j < min(i+per, n); j++ {
			batch = append(batch, cci.Extent{DPA: uint64(2*j) * block, Length: block, Tag: cci.NewTag()})
		}
		if err := r.c.Add(context.Background(), fabric.AddRequest{Host: host, Policy: fabric.AddPrescriptive, Extents: batch}); err != nil {
			tb.Fatalf("Add batch at %d: %v", i, err)
		}
		ev := r.next(tb, fabric.EventAddResponse)
		if len(ev.Extents) != len(batch) {
			tb.Fatalf("add response: got %d extents, want %d", len(ev.Extents), len(batch))
		}
		all = append(all, ev.Extents...)
	}
	return all
}

func TestExtentsPaging(t *testing.T) {
	r := newRig(t, smallBox, Config{})
	box := r.discover(t)
	if box.Identity.MaxPayload != 256 || r.c.limit() != 256 {
		t.Fatalf("payload limits: got device %d, response %d, want 256 and 256", box.Identity.MaxPayload, r.c.limit())
	}
	const host, n = 1, 40
	added := addScattered(t, r, host, n)
	list, err := r.c.Extents(context.Background(), host)
	if err != nil {
		t.Fatalf("Extents: %v", err)
	}
	if len(list.Extents) != n {
		t.Fatalf("Extents: got %d, want %d", len(list.Extents), n)
	}
	byDPA := func(a, b cci.Extent) int { return int(a.DPA>>21) - int(b.DPA>>21) }
	slices.SortFunc(added, byDPA)
	got := slices.SortedFunc(slices.Values(list.Extents), byDPA)
	if diff := cmp.Diff(added, got); diff != "" {
		t.Errorf("extents (-added +listed):\n%s", diff)
	}
	// 40 tags of 54h bytes page too (two per 256-byte response).
	tags, err := r.c.Tags(context.Background())
	if err != nil {
		t.Fatalf("Tags: %v", err)
	}
	if len(tags.Tags) != n {
		t.Errorf("Tags: got %d, want %d", len(tags.Tags), n)
	}
}

func TestDial(t *testing.T) {
	box, err := sim.New(sim.DefaultConfig())
	if err != nil {
		t.Fatalf("sim.New: %v", err)
	}
	addr := "unix:" + filepath.Join(t.TempDir(), "box.sock")
	l, err := serial.Listen(addr)
	if err != nil {
		t.Fatalf("Listen: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- box.ServeListener(ctx, l) }()
	defer func() {
		cancel()
		<-served
		_ = box.Close()
	}()
	c, err := Dial(ctx, addr, Config{})
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	defer c.Close()
	got, err := c.Discover(ctx)
	if err != nil {
		t.Fatalf("Discover: %v", err)
	}
	if len(got.Heads) != 8 || got.TotalDynamic != 1<<40 {
		t.Errorf("box: got %d heads and %d bytes, want 8 and 1 TiB", len(got.Heads), got.TotalDynamic)
	}
}

func BenchmarkIdentify(b *testing.B) {
	r := newRig(b, nil, Config{})
	ctx := context.Background()
	var id cci.IdentifyResp
	for b.Loop() {
		if err := r.c.Do(ctx, cci.OpIdentify, nil, &id); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkExtents(b *testing.B) {
	r := newRig(b, smallBox, Config{})
	r.discover(b)
	addScattered(b, r, 2, 16)
	ctx := context.Background()
	for b.Loop() {
		l, err := r.c.Extents(ctx, 2)
		if err != nil {
			b.Fatal(err)
		}
		if len(l.Extents) != 16 {
			b.Fatalf("got %d extents, want 16", len(l.Extents))
		}
	}
}

// TestStartAddAnswersAsAdd: an add sent with StartAdd is answered as Add
// answers it, a refusal included, and the host sees the same offer.
func TestStartAddAnswersAsAdd(t *testing.T) {
	r := newRig(t, nil, Config{})
	r.discover(t)
	ctx := context.Background()
	tag := cci.NewTag()
	const host, size = 3, 1 << 30
	// StartAdd refuses, sending nothing, while the link writes another
	// message (the event pump's, say): the caller sends it again.
	startAdd := func(req fabric.AddRequest) func(context.Context) error {
		t.Helper()
		for {
			wait, err := r.c.StartAdd(req)
			if errors.Is(err, fabric.ErrNotSent) {
				runtime.Gosched()
				continue
			}
			if err != nil {
				t.Fatalf("StartAdd: %v", err)
			}
			return wait
		}
	}
	req := fabric.AddRequest{Host: host, Policy: fabric.AddFree, Region: 0, Length: size, Tag: tag}
	if err := startAdd(req)(ctx); err != nil {
		t.Fatalf("wait: %v", err)
	}
	ev := r.next(t, fabric.EventAddResponse)
	if ev.Host != host || sum(ev.Extents, tag) != size {
		t.Fatalf("add response: got host %d with %d tagged bytes, want host %d with %d", ev.Host, sum(ev.Extents, tag), host, size)
	}
	// The same tag again: the device refuses it, as it refuses Add.
	if err := startAdd(req)(ctx); !errors.Is(err, cci.InvalidInput) {
		t.Errorf("second add of the tag: got %v, want Invalid Input", err)
	}
}
