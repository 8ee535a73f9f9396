// The Python client against the real index and server (package kv) and
// the Go client, over loopback: Python puts, Go on another host gets the
// same bytes, and back.
package python

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"

	"cxlpool/fabric/cci"
	"cxlpool/host"
	"cxlpool/kv"
	"cxlpool/kv/client"
	"cxlpool/kv/evict"
)

const interopChunk = 64 << 20

type fileMapping struct{ b []byte }

func (m fileMapping) Bytes() []byte { return m.b }
func (m fileMapping) Close() error  { return unix.Munmap(m.b) }

// fileMapper maps the one chunk: the whole memory file.
type fileMapper struct{ f *os.File }

func (m fileMapper) Map(context.Context, string) (host.Mapping, error) {
	b, err := unix.Mmap(int(m.f.Fd()), 0, interopChunk, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	return fileMapping{b}, err
}

// policy adapts evict.Policy to kv.Evictor (kv.Range is its own type).
type policy struct{ p evict.Policy }

func (a policy) Add(id, size uint64, where []kv.Range) {
	rs := make([]evict.Range, len(where))
	for i, r := range where {
		rs[i] = evict.Range{DPA: r.DPA, Len: r.Len}
	}
	a.p.Add(id, size, rs)
}
func (a policy) Touch(id uint64)                                   { a.p.Touch(id) }
func (a policy) Remove(id uint64)                                  { a.p.Remove(id) }
func (a policy) Victims(n uint64, skip func(uint64) bool) []uint64 { return a.p.Victims(n, skip) }
func (a policy) Len() int                                          { return a.p.Len() }

func TestInterop(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 not found")
	}
	dir := t.TempDir()
	mem := filepath.Join(dir, "mem")
	f, err := os.Create(mem)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Truncate(interopChunk); err != nil {
		t.Fatal(err)
	}
	events := make(chan kv.Event, 64)
	ix, err := kv.OpenIndex(kv.IndexConfig{Dir: dir, NoSync: true,
		NewEvictor: func(string) kv.Evictor { return policy{evict.NewHot(nil, time.Now)} },
		Events:     func(_ context.Context, e kv.Event) { events <- e }})
	if err != nil {
		t.Fatal(err)
	}
	defer ix.Close()
	var tag cci.Tag
	for i := range tag {
		tag[i] = 0xa0 + byte(i)
	}
	var tok [32]byte
	for i := range tok {
		tok[i] = byte(i)
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(ix.CreateNamespace("llama", interopChunk, interopChunk))
	must(ix.SetMember("llama", 3, tok))
	must(ix.SetMember("llama", 5, tok))
	must(ix.AddChunk("llama", kv.ChunkInfo{ID: 1, Tag: tag, Size: interopChunk, Extents: []cci.Extent{{DPA: 0, Length: interopChunk}}}))
	srv, err := kv.NewServer(kv.ServerConfig{Index: ix})
	must(err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must(err)
	go srv.Serve(ln)
	defer srv.Close()
	port := ln.Addr().(*net.TCPAddr).Port

	pyRun := func(script string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		head := fmt.Sprintf("from cxlpool_kv import Client, FileMapper\nm = FileMapper({%q: (%q, [(0, %d)])})\naddr = (\"127.0.0.1\", %d)\nc = Client(addr, \"llama\", 3, bytes(range(32)), m)\n",
			"a0a1a2a3-a4a5-a6a7-a8a9-aaabacadaeaf", mem, interopChunk, port)
		cmd := exec.CommandContext(ctx, py, "-c", head+script)
		cmd.Env = append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("python: %v\n%s", err, out)
		}
	}
	pyRun(`
data = bytes((i * 7) & 0xff for i in range(256 << 10))
assert c.put("py-block", data), "put"
assert not c.put("py-block", data), "a second put is skipped"
assert c.contains("py-block") and bytes(c.get("py-block")) == data
assert c.batched_put(["a", "b"], [b"A" * 5000, b"B" * 3]) == [True, True]
assert [bytes(x) for x in c.batch_get(["a", "b"])] == [b"A" * 5000, b"B" * 3]
assert c.pin("a") and c.unpin("a")
assert c.set("hc", b"hicache") and c.exists("hc") and c.batch_exists(["hc", "zz"]) == 1
assert c.remove("b") and not c.exists("b")
cc = Client(addr, "llama", 3, bytes(range(32)), m, location_cache=16)
assert bytes(cc.get("py-block")) == data and bytes(cc.get("py-block")) == data  # GET+CHECK, then CHECK only
assert c.remove("py-block") and cc.get("py-block") is None  # the cached location is STALE, the index says gone
assert c.put("py-block", data)
`)
	ctx := context.Background()
	gc, err := client.Dial(ctx, client.Config{Network: "tcp", Addr: ln.Addr().String(), Namespace: "llama", Host: 5, Token: tok, Mapper: fileMapper{f}})
	must(err)
	defer gc.Close()
	got, err := gc.Get(ctx, []byte("py-block"))
	must(err)
	want := make([]byte, 256<<10)
	for i := range want {
		want[i] = byte(i * 7)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("the Go client on host 5 read other bytes than the Python client put")
	}
	must(gc.Put(ctx, []byte("go-block"), []byte("from go")))
	pyRun(`assert bytes(c.get(b"go-block")) == b"from go"`)

	// A chain's sequence told by Python (PUT with META) comes out in the
	// index's Stored event: parent hash and token counts.
	for len(events) > 0 {
		<-events
	}
	pyRun(`
k = lambda h: h.to_bytes(8, "big")
assert c.batched_put([k(41), k(42)], [b"x" * 10, b"y" * 20], parents=[7, 41], tokens=[16, 32]) == [True, True]
assert c.put(k(50), b"z", tokens=4)
`)
	p7 := uint64(7)
	h := func(v uint64) []byte { return binary.BigEndian.AppendUint64(nil, v) }
	wantEv := []kv.Event{
		{Kind: kv.EventStored, Namespace: "llama", Parent: &p7, Blocks: []kv.EventBlock{{Key: h(41), Length: 10, Hash: 41, Tokens: 16}, {Key: h(42), Length: 20, Hash: 42, Tokens: 32}}},
		{Kind: kv.EventStored, Namespace: "llama", Blocks: []kv.EventBlock{{Key: h(50), Length: 1, Hash: 50, Tokens: 4}}},
	}
	for i, w := range wantEv {
		select {
		case e := <-events:
			if diff := cmp.Diff(w, e); diff != "" {
				t.Errorf("event %d of Python's puts (-want +got):\n%s", i, diff)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("no event %d for Python's puts", i)
		}
	}
}
