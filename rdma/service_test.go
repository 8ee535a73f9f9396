package rdma_test

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"cxlpool/dcd"
	"cxlpool/fabric/cci"
	"cxlpool/rdma"
	"cxlpool/rdma/internal/fake"
)

// clock is a settable test clock.
type clock struct{ ns atomic.Int64 }

func newClock() *clock {
	c := &clock{}
	c.ns.Store(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC).UnixNano())
	return c
}
func (c *clock) Now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *clock) Advance(d time.Duration) { c.ns.Add(int64(d)) }

func TestCreateValidation(t *testing.T) {
	clk := newClock()
	env := fake.NewEnv(t, rdma.Config{Clock: clk.Now, MaxExports: 4})
	ungranted := env.Ledger.AddChunk(2<<20, false)
	adding := env.Ledger.AddChunk(2<<20, false)
	env.Ledger.AddGrant(adding.ID, 1, dcd.GrantAdding)
	releasing := env.Ledger.AddChunk(2<<20, false)
	env.Ledger.AddGrant(releasing.ID, 1, dcd.GrantReleasing, cci.Extent{DPA: 6 << 20, Length: 2 << 20})
	ok := rdma.CreateRequest{Chunk: env.Chunk.ID, Client: "rack-7", Perms: rdma.PermRead}
	with := func(f func(r *rdma.CreateRequest)) rdma.CreateRequest { r := ok; f(&r); return r }
	tests := []struct {
		name string
		req  rdma.CreateRequest
		want error
	}{
		{"whole chunk", ok, nil},
		{"part", with(func(r *rdma.CreateRequest) { r.Offset, r.Length = 4096, 1<<20 }), nil},
		{"rest from offset", with(func(r *rdma.CreateRequest) { r.Offset = fake.ChunkSize - 64 }), nil},
		{"no client", with(func(r *rdma.CreateRequest) { r.Client = "" }), dcd.ErrInvalid},
		{"unprintable client", with(func(r *rdma.CreateRequest) { r.Client = "a\nb" }), dcd.ErrInvalid},
		{"no perms", with(func(r *rdma.CreateRequest) { r.Perms = 0 }), dcd.ErrInvalid},
		{"unknown perm", with(func(r *rdma.CreateRequest) { r.Perms = 4 }), dcd.ErrInvalid},
		{"expiry past", with(func(r *rdma.CreateRequest) { r.Expiry = clk.Now() }), dcd.ErrInvalid},
		{"ttl", with(func(r *rdma.CreateRequest) { r.TTL = time.Hour }), nil},
		{"negative ttl", with(func(r *rdma.CreateRequest) { r.TTL = -time.Second }), dcd.ErrInvalid},
		{"ttl and expiry", with(func(r *rdma.CreateRequest) { r.TTL, r.Expiry = time.Hour, clk.Now().Add(time.Hour) }), dcd.ErrInvalid},
		{"offset at end", with(func(r *rdma.CreateRequest) { r.Offset = fake.ChunkSize }), dcd.ErrInvalid},
		{"length beyond", with(func(r *rdma.CreateRequest) { r.Offset, r.Length = 1, fake.ChunkSize }), dcd.ErrInvalid},
		{"unknown chunk", with(func(r *rdma.CreateRequest) { r.Chunk = 999 }), dcd.ErrNotFound},
		{"never granted", with(func(r *rdma.CreateRequest) { r.Chunk = ungranted.ID }), rdma.ErrNoExtents},
		{"grant still adding", with(func(r *rdma.CreateRequest) { r.Chunk = adding.ID }), rdma.ErrNoExtents},
		{"grant releasing", with(func(r *rdma.CreateRequest) { r.Chunk = releasing.ID }), rdma.ErrNoExtents},
		{"over the limit", ok, rdma.ErrTooMany},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			x, err := env.Service.Create(context.Background(), tt.req)
			if !errors.Is(err, tt.want) {
				t.Fatalf("got %v, want %v", err, tt.want)
			}
			if err != nil {
				return
			}
			if !x.ID.Valid() || x.Token.IsZero() || x.Length == 0 || !x.Created.Equal(clk.Now()) {
				t.Errorf("got export %+v, want an ID, a token, a length and the creation time", x)
			}
			if tt.req.TTL > 0 && !x.Expiry.Equal(clk.Now().Add(tt.req.TTL)) {
				t.Errorf("got expiry %s, want %s after creation", x.Expiry, tt.req.TTL)
			}
			got, err := env.Service.Get(x.ID)
			if err != nil {
				t.Fatal(err)
			}
			x.Token = rdma.Token{}
			if diff := cmp.Diff(x, got); diff != "" {
				t.Errorf("Get differs from Create (-create +get):\n%s", diff)
			}
		})
	}
	if got := len(env.Service.List()); got != 4 {
		t.Errorf("got %d exports listed, want 4", got)
	}
	for _, x := range env.Service.List() {
		if !x.Token.IsZero() {
			t.Errorf("List shows export %s's token", x.ID)
		}
	}
}

func TestExtentOrder(t *testing.T) {
	// Shared extents are ordered by sequence before DPA; a second grant
	// of the same (shared) extents adds nothing.
	env := fake.NewEnv(t, rdma.Config{})
	c := env.Ledger.AddChunk(2<<20, true)
	exts := []cci.Extent{{DPA: 6 << 20, Length: 1 << 20, SharedSeq: 1}, {DPA: 7 << 20, Length: 1 << 20, SharedSeq: 0}}
	env.Ledger.AddGrant(c.ID, 1, dcd.GrantGranted, exts...)
	env.Ledger.AddGrant(c.ID, 2, dcd.GrantGranted, exts[1], exts[0])
	x, err := env.Service.Create(context.Background(), rdma.CreateRequest{Chunk: c.ID, Client: "c", Perms: rdma.PermReadWrite})
	if err != nil {
		t.Fatal(err)
	}
	if x.Length != 2<<20 {
		t.Fatalf("got length %#x, want %#x", x.Length, 2<<20)
	}
	h, err := env.Service.Authenticate(x.ID, x.Token)
	if err != nil {
		t.Fatal(err)
	}
	// Byte 0 is at the start of sequence 0 (DPA 7 MiB), byte 1 MiB at
	// sequence 1 (DPA 6 MiB); a write across the boundary splits.
	if err := h.WriteAt([]byte("abcd"), 1<<20-2); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 2)
	for _, tc := range []struct {
		dpa  int64
		want string
	}{{7<<20 + 1<<20 - 2, "ab"}, {6 << 20, "cd"}} {
		if _, err := env.File.ReadAt(got, tc.dpa); err != nil {
			t.Fatal(err)
		}
		if string(got) != tc.want {
			t.Errorf("DPA %#x: got %q, want %q", tc.dpa, got, tc.want)
		}
	}
}

func TestAuthenticate(t *testing.T) {
	clk := newClock()
	env := fake.NewEnv(t, rdma.Config{Clock: clk.Now})
	live := env.Export(t, rdma.PermRead)
	revoked := env.Export(t, rdma.PermRead)
	if err := env.Service.Revoke(context.Background(), revoked.ID); err != nil {
		t.Fatal(err)
	}
	expiring, err := env.Service.Create(context.Background(), rdma.CreateRequest{Chunk: env.Chunk.ID, Client: "c",
		Perms: rdma.PermRead, Expiry: clk.Now().Add(time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	wrong := live.Token
	wrong[31] ^= 1
	// An export made from a token the caller holds, given by its hash
	// (a KV namespace's, shared by its chunks' exports): Create shows no
	// token, the caller's opens it.
	var own rdma.Token
	own[0] = 0x5a
	byHash, err := env.Service.Create(context.Background(), rdma.CreateRequest{Chunk: env.Chunk.ID, Client: "rack",
		Perms: rdma.PermRead, Hash: rdma.HashToken(own)})
	if err != nil {
		t.Fatal(err)
	}
	if !byHash.Token.IsZero() {
		t.Errorf("Create from a hash showed token %s, want none", byHash.Token)
	}
	tests := []struct {
		name string
		id   rdma.ExportID
		tok  rdma.Token
		tick time.Duration
		want error
	}{
		{"right token", live.ID, live.Token, 0, nil},
		{"wrong token", live.ID, wrong, 0, rdma.ErrDenied},
		{"zero token", live.ID, rdma.Token{}, 0, rdma.ErrDenied},
		{"unknown export", "0123456789abcdef", live.Token, 0, rdma.ErrDenied},
		{"revoked export", revoked.ID, revoked.Token, 0, rdma.ErrDenied},
		{"caller's token by hash", byHash.ID, own, 0, nil},
		{"another token on a hash export", byHash.ID, live.Token, 0, rdma.ErrDenied},
		{"not yet expired", expiring.ID, expiring.Token, 0, nil},
		{"expired", expiring.ID, expiring.Token, time.Minute, rdma.ErrDenied},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk.Advance(tt.tick)
			h, err := env.Service.Authenticate(tt.id, tt.tok)
			// The very same error value: nothing tells the cases apart.
			if err != tt.want {
				t.Fatalf("got %v, want %v", err, tt.want)
			}
			if err == nil && h.Export().ID != tt.id {
				t.Errorf("got handle of %s, want %s", h.Export().ID, tt.id)
			}
		})
	}
}

func TestHandleAccess(t *testing.T) {
	env := fake.NewEnv(t, rdma.Config{})
	open := func(p rdma.Perm) *rdma.Handle {
		x := env.Export(t, p)
		h, err := env.Service.Authenticate(x.ID, x.Token)
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	rw, ro, wo := open(rdma.PermReadWrite), open(rdma.PermRead), open(rdma.PermWrite)
	part, err := env.Service.Create(context.Background(), rdma.CreateRequest{Chunk: env.Chunk.ID, Client: "c",
		Perms: rdma.PermReadWrite, Offset: 1<<20 - 4, Length: 12})
	if err != nil {
		t.Fatal(err)
	}
	ph, err := env.Service.Authenticate(part.ID, part.Token)
	if err != nil {
		t.Fatal(err)
	}
	const end = fake.ChunkSize
	type op func(h *rdma.Handle) error
	read := func(off uint64, n int) op {
		return func(h *rdma.Handle) error { return h.ReadAt(make([]byte, n), off) }
	}
	write := func(off uint64, n int) op {
		return func(h *rdma.Handle) error { return h.WriteAt(make([]byte, n), off) }
	}
	cas := func(off uint64) op {
		return func(h *rdma.Handle) error { _, err := h.CompareAndSwap(off, 0, 0); return err }
	}
	faa := func(off uint64) op {
		return func(h *rdma.Handle) error { _, err := h.FetchAdd(off, 0); return err }
	}
	tests := []struct {
		name string
		h    *rdma.Handle
		op   op
		want error
	}{
		{"read all", rw, read(0, end), nil},
		{"read last byte", rw, read(end-1, 1), nil},
		{"read empty at end", rw, read(end, 0), nil},
		{"read past end", rw, read(end-1, 2), rdma.ErrRange},
		{"read far", rw, read(1<<62, 1), rdma.ErrRange},
		{"read wrapping", rw, read(^uint64(0), 2), rdma.ErrRange},
		{"write past end", rw, write(end, 1), rdma.ErrRange},
		{"write across extents", rw, write(1<<20-8, 16), nil},
		{"read-only write", ro, write(0, 1), rdma.ErrPerm},
		{"read-only cas", ro, cas(0), rdma.ErrPerm},
		{"write-only read", wo, read(0, 1), rdma.ErrPerm},
		{"write-only faa", wo, faa(0), rdma.ErrPerm},
		{"cas", rw, cas(8), nil},
		{"cas unaligned", rw, cas(4), rdma.ErrAlign},
		{"faa last word", rw, faa(end - 8), nil},
		{"faa past end", rw, faa(end - 4), rdma.ErrRange},
		{"part read", ph, read(0, 12), nil},
		{"part beyond", ph, read(4, 9), rdma.ErrRange},
		{"part word straddles extents", ph, faa(0), rdma.ErrAlign},
		{"part word after boundary", ph, faa(4), nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.op(tt.h); !errors.Is(err, tt.want) {
				t.Errorf("got %v, want %v", err, tt.want)
			}
		})
	}
}

func TestAtomics(t *testing.T) {
	env := fake.NewEnv(t, rdma.Config{})
	x := env.Export(t, rdma.PermReadWrite)
	h, err := env.Service.Authenticate(x.ID, x.Token)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		run      func() (uint64, error)
		wantPrev uint64
		wantWord uint64
	}{
		{"faa from zero", func() (uint64, error) { return h.FetchAdd(64, 5) }, 0, 5},
		{"faa wraps", func() (uint64, error) { return h.FetchAdd(64, ^uint64(0)) }, 5, 4},
		{"cas hit", func() (uint64, error) { return h.CompareAndSwap(64, 4, 40) }, 4, 40},
		{"cas miss", func() (uint64, error) { return h.CompareAndSwap(64, 4, 99) }, 40, 40},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			prev, err := tt.run()
			if err != nil {
				t.Fatal(err)
			}
			var w [8]byte
			if err := h.ReadAt(w[:], 64); err != nil {
				t.Fatal(err)
			}
			word := uint64(w[0]) | uint64(w[1])<<8 | uint64(w[2])<<16 | uint64(w[3])<<24 |
				uint64(w[4])<<32 | uint64(w[5])<<40 | uint64(w[6])<<48 | uint64(w[7])<<56
			if prev != tt.wantPrev || word != tt.wantWord {
				t.Errorf("got previous %d, word %d; want %d, %d", prev, word, tt.wantPrev, tt.wantWord)
			}
		})
	}

	// CAS loops and FAA on one word from many goroutines lose nothing.
	const workers, each = 8, 500
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				if w%2 == 0 {
					if _, err := h.FetchAdd(128, 1); err != nil {
						t.Error(err)
						return
					}
					continue
				}
				for old := uint64(0); ; {
					prev, err := h.CompareAndSwap(128, old, old+1)
					if err != nil {
						t.Error(err)
						return
					}
					if prev == old {
						break
					}
					old = prev
				}
			}
		}()
	}
	wg.Wait()
	if got, _ := h.FetchAdd(128, 0); got != workers*each {
		t.Errorf("got counter %d, want %d", got, workers*each)
	}
}

func TestRevokeWaitsForPins(t *testing.T) {
	env := fake.NewEnv(t, rdma.Config{})
	x := env.Export(t, rdma.PermReadWrite)
	h, err := env.Service.Authenticate(x.ID, x.Token)
	if err != nil {
		t.Fatal(err)
	}
	segs, err := h.Pin(nil, 0, 16, rdma.PermWrite)
	if err != nil {
		t.Fatal(err)
	}
	// A second pin by the same holder must not deadlock against a
	// pending revoke (this is why the gate is not an RWMutex).
	if _, err := h.Pin(nil, 0, 16, rdma.PermRead); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- env.Service.Revoke(context.Background(), x.ID) }()
	<-h.Context().Done() // revocation has started
	if _, err := h.Pin(nil, 0, 1, rdma.PermRead); !errors.Is(err, rdma.ErrRevoked) {
		t.Errorf("pin after revoke began: got %v, want ErrRevoked", err)
	}
	select {
	case err := <-done:
		t.Fatalf("Revoke returned (%v) while accesses were pinned", err)
	default:
	}
	copy(segs[0], "still mine")
	h.Unpin()
	h.Unpin()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := h.ReadAt(make([]byte, 1), 0); !errors.Is(err, rdma.ErrRevoked) {
		t.Errorf("read after revoke: got %v, want ErrRevoked", err)
	}

	// A revoke whose drain outlasts its context still refuses at once.
	y := env.Export(t, rdma.PermRead)
	hy, _ := env.Service.Authenticate(y.ID, y.Token)
	if _, err := hy.Pin(nil, 0, 1, rdma.PermRead); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := env.Service.Revoke(ctx, y.ID); !errors.Is(err, context.Canceled) {
		t.Errorf("got %v, want context.Canceled", err)
	}
	if !hy.Revoked() {
		t.Error("export not revoked after a timed-out drain")
	}
	hy.Unpin()
	if err := env.Service.Revoke(context.Background(), y.ID); !errors.Is(err, rdma.ErrNotFound) {
		t.Errorf("second revoke: got %v, want ErrNotFound", err)
	}
}

func TestLedgerConsistency(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name   string
		change func(env *fake.Env)
		keep   bool
	}{
		{"nothing changed", func(*fake.Env) {}, true},
		{"grant releasing", func(env *fake.Env) { env.Ledger.SetState(env.Grant.ID, dcd.GrantReleasing) }, false},
		{"grant lost", func(env *fake.Env) { env.Ledger.SetState(env.Grant.ID, dcd.GrantLost) }, false},
		{"chunk deleted", func(env *fake.Env) {
			env.Ledger.SetState(env.Grant.ID, dcd.GrantReleased)
			env.Ledger.DeleteChunk(env.Chunk.ID)
		}, false},
		{"extents changed", func(env *fake.Env) {
			env.Ledger.SetState(env.Grant.ID, dcd.GrantReleased)
			env.Ledger.AddGrant(env.Chunk.ID, 3, dcd.GrantGranted, cci.Extent{DPA: 0, Length: 2 << 20})
		}, false},
		{"another host shares it", func(env *fake.Env) {
			g := env.Grant
			env.Ledger.AddGrant(env.Chunk.ID, 3, dcd.GrantGranted, g.Extents[1], g.Extents[0])
		}, true},
		{"ledger unavailable", func(env *fake.Env) { env.Ledger.Err = errors.New("disk on fire") }, true},
	}
	for _, tt := range tests {
		for _, via := range []string{"sweep", "run"} {
			t.Run(tt.name+"/"+via, func(t *testing.T) {
				env := fake.NewEnv(t, rdma.Config{})
				x := env.Export(t, rdma.PermRead)
				h, err := env.Service.Authenticate(x.ID, x.Token)
				if err != nil {
					t.Fatal(err)
				}
				tt.change(env)
				if via == "sweep" {
					_ = env.Service.Sweep(ctx)
				} else {
					changes := make(chan dcd.Change, 1)
					changes <- dcd.Change{Kind: dcd.ChangeGrant, Chunk: env.Chunk.ID}
					close(changes)
					env.Service.Run(ctx, changes) // returns once changes is drained
				}
				env.Ledger.Err = nil
				_, err = env.Service.Get(x.ID)
				if kept := err == nil; kept != tt.keep {
					t.Errorf("got kept %v, want %v", kept, tt.keep)
				}
				if h.Revoked() == tt.keep {
					t.Errorf("got handle revoked %v, want %v", h.Revoked(), !tt.keep)
				}
			})
		}
	}
}

// noRecord stands for the ledger write Leaving guards.
func noRecord() error { return nil }

func TestLeaving(t *testing.T) {
	ctx := context.Background()
	env := fake.NewEnv(t, rdma.Config{})
	g := env.Grant
	other := env.Ledger.AddGrant(env.Chunk.ID, 3, dcd.GrantGranted, g.Extents...)
	x := env.Export(t, rdma.PermRead)
	if err := env.Service.Leaving(ctx, other, false, noRecord); err != nil {
		t.Fatal(err)
	}
	if _, err := env.Service.Get(x.ID); err != nil {
		t.Fatalf("export revoked while another host keeps the capacity: %v", err)
	}
	env.Ledger.SetState(other.ID, dcd.GrantReleased)
	if err := env.Service.Leaving(ctx, g, false, noRecord); err != nil {
		t.Fatal(err)
	}
	if _, err := env.Service.Get(x.ID); !errors.Is(err, rdma.ErrNotFound) {
		t.Fatalf("got %v, want the export revoked before the last release", err)
	}
	if n, err := env.Service.RevokeChunk(ctx, env.Chunk.ID); n != 0 || err != nil {
		t.Errorf("RevokeChunk of nothing: got %d, %v; want 0, nil", n, err)
	}
}

func TestExpirySweep(t *testing.T) {
	clk := newClock()
	env := fake.NewEnv(t, rdma.Config{Clock: clk.Now})
	x, err := env.Service.Create(context.Background(), rdma.CreateRequest{Chunk: env.Chunk.ID, Client: "c",
		Perms: rdma.PermRead, Expiry: clk.Now().Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	h, err := env.Service.Authenticate(x.ID, x.Token)
	if err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Hour)
	// An open handle refuses as soon as the clock passes the expiry,
	// before any sweep.
	if err := h.ReadAt(make([]byte, 1), 0); !errors.Is(err, rdma.ErrRevoked) {
		t.Errorf("read after expiry: got %v, want ErrRevoked", err)
	}
	if err := env.Service.Sweep(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := env.Service.Get(x.ID); !errors.Is(err, rdma.ErrNotFound) {
		t.Errorf("after sweep: got %v, want ErrNotFound", err)
	}
}

func TestTokenAndPerm(t *testing.T) {
	var tok rdma.Token
	copy(tok[:], bytes.Repeat([]byte{0xfb}, 32))
	s := tok.String()
	back, err := rdma.ParseToken(s)
	if err != nil || back != tok {
		t.Fatalf("ParseToken(%q) = %v, %v; want the token back", s, back, err)
	}
	for _, bad := range []string{"", "abc", s + "A", "+" + s[1:]} {
		if _, err := rdma.ParseToken(bad); !errors.Is(err, dcd.ErrInvalid) {
			t.Errorf("ParseToken(%q): got %v, want ErrInvalid", bad, err)
		}
	}
	perms := []struct {
		in   string
		want rdma.Perm
		str  string
	}{{"r", rdma.PermRead, "r"}, {"write", rdma.PermWrite, "w"}, {"RW", rdma.PermReadWrite, "rw"}}
	for _, p := range perms {
		got, err := rdma.ParsePerm(p.in)
		if err != nil || got != p.want || got.String() != p.str {
			t.Errorf("ParsePerm(%q) = %v (%q), %v; want %v (%q)", p.in, got, got.String(), err, p.want, p.str)
		}
	}
	if _, err := rdma.ParsePerm("x"); !errors.Is(err, dcd.ErrInvalid) {
		t.Errorf("ParsePerm(x): got %v, want ErrInvalid", err)
	}
}

func TestMappingRange(t *testing.T) {
	m, _ := fake.Memory(t, 1<<20)
	tests := []struct {
		dpa, n uint64
		want   error
	}{{0, 1 << 20, nil}, {1 << 20, 0, nil}, {1<<20 - 1, 2, rdma.ErrRange}, {^uint64(0), 2, rdma.ErrRange}}
	for _, tt := range tests {
		b, err := m.Bytes(tt.dpa, tt.n)
		if !errors.Is(err, tt.want) {
			t.Errorf("Bytes(%#x, %#x): got %v, want %v", tt.dpa, tt.n, err, tt.want)
		}
		if err == nil && (len(b) != int(tt.n) || cap(b) != int(tt.n)) {
			t.Errorf("Bytes(%#x, %#x): got len %d cap %d", tt.dpa, tt.n, len(b), cap(b))
		}
	}
}
