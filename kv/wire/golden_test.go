package wire_test

import (
	"bytes"
	"encoding/hex"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"cxlpool/kv/wire"
)

var update = flag.Bool("update", false, "rewrite testdata/*.hex")

func token() (t [32]byte) {
	for i := range t {
		t[i] = byte(i)
	}
	return t
}

func tag(b byte) (t [16]byte) {
	for i := range t {
		t[i] = b + byte(i)
	}
	return t
}

var loc = wire.Loc{Block: 7, Gen: 42, Tag: tag(0xa0), Offset: 0x10000, Length: 256 << 10}

// requests holds one request of every op; the HELLO is PROTOCOL.md's example.
var requests = map[string]wire.Request{
	"hello": {Op: wire.OpHello, ID: 1, Namespace: "llama", Host: 3, Token: token()},
	"put":   {Op: wire.OpPut, ID: 2, Puts: []wire.PutItem{{Key: []byte("k1"), Length: 4096}, {Key: []byte{0, 0xff}, Length: 2 << 20}}},
	// A chain's root (no parent, 256 tokens) and its next block.
	"put-meta": {Op: wire.OpPut, ID: 13, Flags: wire.FlagMeta, Puts: []wire.PutItem{{Key: []byte{0, 0, 0, 0, 0, 0, 0, 41}, Length: 4096, Tokens: 256},
		{Key: []byte{0, 0, 0, 0, 0, 0, 0, 42}, Length: 8192, HasParent: true, Parent: 41, Tokens: 256}}},
	"commit": {Op: wire.OpCommit, ID: 3, Blocks: []uint64{7, 8}},
	"abort":  {Op: wire.OpAbort, ID: 4, Blocks: []uint64{9}},
	"get":    {Op: wire.OpGet, ID: 5, Flags: wire.FlagPin, Keys: [][]byte{[]byte("k1")}},
	"exists": {Op: wire.OpExists, ID: 6, Keys: [][]byte{[]byte("k1"), []byte("k2")}},
	"delete": {Op: wire.OpDelete, ID: 7, Keys: [][]byte{[]byte("k1")}},
	"unpin":  {Op: wire.OpUnpin, ID: 8, Blocks: []uint64{7}},
	"check":  {Op: wire.OpCheck, ID: 9, Checks: []wire.BlockGen{{Block: 7, Gen: 42}}},
	"renew":  {Op: wire.OpRenew, ID: 10},
	"chunks": {Op: wire.OpChunks, ID: 11},
	"stat":   {Op: wire.OpStat, ID: 12},
}

var responses = map[string]wire.Response{
	"hello": {Op: wire.OpHello, ID: 1, Session: 99, LeaseMS: 30000, MaxBody: wire.DefaultMaxBody, MaxBatch: 4096, MaxKey: 1024,
		Chunks: []wire.Chunk{{ID: 5, Tag: tag(0xa0), Size: 256 << 20}}},
	"denied": {Op: wire.OpHello, ID: 1, Status: wire.Denied, Message: "kv: namespace, host or token refused"},
	"put":    {Op: wire.OpPut, ID: 2, Items: []wire.Item{{Status: wire.OK, Loc: loc}, {Status: wire.Exists}}},
	"commit": {Op: wire.OpCommit, ID: 3, Items: []wire.Item{{Status: wire.OK}, {Status: wire.Expired}}},
	"get":    {Op: wire.OpGet, ID: 5, Items: []wire.Item{{Status: wire.OK, Loc: loc}, {Status: wire.NotFound}}},
	"check":  {Op: wire.OpCheck, ID: 9, Items: []wire.Item{{Status: wire.Stale}}},
	"renew":  {Op: wire.OpRenew, ID: 10, LeaseMS: 30000},
	"chunks": {Op: wire.OpChunks, ID: 11, Chunks: []wire.Chunk{{ID: 5, Tag: tag(0xa0), Size: 256 << 20}, {ID: 6, Tag: tag(0xb0), Size: 256 << 20}}},
	"stat":   {Op: wire.OpStat, ID: 12, Stat: wire.Stat{Blocks: 1, Used: 2, Reserved: 3, Capacity: 4, Quota: 5, Evictions: 6}},
}

// golden compares b with testdata/name.hex (16 bytes a line).
func golden(t *testing.T, name string, b []byte) {
	t.Helper()
	path := filepath.Join("testdata", name+".hex")
	var sb strings.Builder
	for i := 0; i < len(b); i += 16 {
		sb.WriteString(hex.EncodeToString(b[i:min(i+16, len(b))]))
		sb.WriteByte('\n')
	}
	if *update {
		if err := os.WriteFile(path, []byte(sb.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(string(want), sb.String()); diff != "" {
		t.Errorf("%s (-golden +encoded):\n%s", name, diff)
	}
}

func TestGoldenRequests(t *testing.T) {
	for name, req := range requests {
		t.Run(name, func(t *testing.T) {
			b, err := wire.AppendRequest(nil, &req)
			if err != nil {
				t.Fatal(err)
			}
			golden(t, "req-"+name, b)
			h, body, _, err := wire.ReadFrame(bytes.NewReader(b), nil, wire.DefaultMaxBody)
			if err != nil {
				t.Fatal(err)
			}
			got, err := wire.DecodeRequest(h, body)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(req, got, cmp.Transformer("nil", func(v [][]byte) [][]byte {
				if len(v) == 0 {
					return nil
				}
				return v
			})); diff != "" && req.Count() > 0 {
				t.Errorf("round trip (-want +got):\n%s", diff)
			}
		})
	}
}

func TestGoldenResponses(t *testing.T) {
	for name, resp := range responses {
		t.Run(name, func(t *testing.T) {
			b, err := wire.AppendResponse(nil, &resp)
			if err != nil {
				t.Fatal(err)
			}
			golden(t, "resp-"+name, b)
			h, body, _, err := wire.ReadFrame(bytes.NewReader(b), nil, wire.DefaultMaxBody)
			if err != nil {
				t.Fatal(err)
			}
			got, err := wire.DecodeResponse(h, body)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(resp, got); diff != "" {
				t.Errorf("round trip (-want +got):\n%s", diff)
			}
		})
	}
}

// TestProtocolExample checks PROTOCOL.md's HELLO example byte for byte.
func TestProtocolExample(t *testing.T) {
	req := requests["hello"]
	b, err := wire.AppendRequest(nil, &req)
	if err != nil {
		t.Fatal(err)
	}
	tok := token()
	want := append([]byte{0x34, 0, 0, 0, 1, 1, 0, 0, 1, 0, 0, 0, 5, 'l', 'l', 'a', 'm', 'a', 3, 0}, tok[:]...)
	want = append(want, 0, 0, 0, 0)
	if !bytes.Equal(b, want) {
		t.Errorf("HELLO = % x\nwant    % x", b, want)
	}
}

func TestFrameRefusals(t *testing.T) {
	ok, _ := wire.AppendRequest(nil, &wire.Request{Op: wire.OpRenew, ID: 1})
	mut := func(f func(b []byte)) []byte { b := bytes.Clone(ok); f(b); return b }
	for _, tc := range []struct {
		name string
		b    []byte
		max  int
	}{
		{"length under header", mut(func(b []byte) { b[0] = 7 }), wire.DefaultMaxBody},
		{"version", mut(func(b []byte) { b[4] = 2 }), wire.DefaultMaxBody},
		{"unknown op", mut(func(b []byte) { b[5] = 0x7f }), wire.DefaultMaxBody},
		{"over max", mut(func(b []byte) { b[0], b[1] = 0, 0x10 }), 1024},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, _, _, err := wire.ReadFrame(bytes.NewReader(tc.b), nil, tc.max); err == nil {
				t.Fatal("accepted")
			}
		})
	}
}

func TestBodyRefusals(t *testing.T) {
	putItem := []byte{1, 0, 1, 0, 'k', 0, 16, 0, 0, 0, 0, 0, 0}
	for _, tc := range []struct {
		name  string
		op    wire.Op
		flags uint16
		body  []byte
	}{
		{"lying count", wire.OpCommit, 0, []byte{0xff, 0xff, 1, 0, 0, 0, 0, 0, 0, 0}},
		{"short key", wire.OpGet, 0, []byte{1, 0, 5, 0, 'a'}},
		{"trailing bytes", wire.OpRenew, 0, []byte{0}},
		{"hello not utf-8", wire.OpHello, 0, append([]byte{1, 0xff, 0, 0}, make([]byte, 36)...)},
		{"put meta missing", wire.OpPut, wire.FlagMeta, putItem},
		{"put meta unknown bit", wire.OpPut, wire.FlagMeta, append(append([]byte{}, putItem...), 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0)},
		{"put parent without its bit", wire.OpPut, wire.FlagMeta, append(append([]byte{}, putItem...), 0, 9, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0)},
		{"put meta without the flag", wire.OpPut, 0, append(append([]byte{}, putItem...), 1, 9, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := wire.DecodeRequest(wire.Header{Op: tc.op, Flags: tc.flags, Len: uint32(len(tc.body))}, tc.body); err == nil {
				t.Fatal("accepted")
			}
		})
	}
}

func FuzzDecodeRequest(f *testing.F) {
	for _, r := range requests {
		b, _ := wire.AppendRequest(nil, &r)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		h, body, _, err := wire.ReadFrame(bytes.NewReader(b), nil, 1<<16)
		if err != nil {
			return
		}
		req, err := wire.DecodeRequest(h, body)
		if err != nil {
			return
		}
		// What decodes re-encodes to the same bytes.
		again, err := wire.AppendRequest(nil, &req)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(again, b[:wire.HeaderSize+len(body)]) {
			t.Fatalf("re-encoded % x\nfrom        % x", again, b)
		}
	})
}

func FuzzDecodeResponse(f *testing.F) {
	for _, r := range responses {
		b, _ := wire.AppendResponse(nil, &r)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		h, body, _, err := wire.ReadFrame(bytes.NewReader(b), nil, 1<<16)
		if err != nil {
			return
		}
		resp, err := wire.DecodeResponse(h, body)
		if err != nil {
			return
		}
		if _, err := wire.AppendResponse(nil, &resp); err != nil {
			t.Fatal(err)
		}
	})
}
