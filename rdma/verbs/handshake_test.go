package verbs

import (
	"bytes"
	"encoding/hex"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"cxlpool/rdma"
)

var gid = [16]byte{0xfe, 0x80, 15: 0x01}

func TestHandshakeGolden(t *testing.T) {
	req := Endpoint{QPN: 0x11, PSN: 0xabcdef, MTU: 3, GID: gid}
	rep := Reply{Endpoint: Endpoint{QPN: 0x22, PSN: 1, LID: 7, MTU: 5, GID: gid},
		Regions: []Region{{Offset: 0, Addr: 0x7f0000000000, Length: 1 << 20, RKey: 0x1234},
			{Offset: 1 << 20, Addr: 0x7f0000400000, Length: 4096, RKey: 0x5678}}}
	tests := []struct {
		name string
		got  []byte
		hex  string
	}{
		{"request", req.AppendBinary(nil),
			"0100 0000 11000000 efcdab00 0000 03 00 fe800000000000000000000000000001"},
		{"reply", rep.AppendBinary(nil),
			"0100 0200 22000000 01000000 0700 05 00 fe800000000000000000000000000001" +
				"0000000000000000 00000000007f0000 0000100000000000 34120000 00000000" +
				"0000100000000000 00004000007f0000 0010000000000000 78560000 00000000"},
	}
	for _, tt := range tests {
		want, _ := hex.DecodeString(strings.ReplaceAll(tt.hex, " ", ""))
		if !bytes.Equal(tt.got, want) {
			t.Errorf("%s: got %x, want %x", tt.name, tt.got, want)
		}
	}
	gotReq, err := ParseEndpoint(req.AppendBinary(nil))
	if err != nil || gotReq != req {
		t.Errorf("request round trip: got %+v, %v", gotReq, err)
	}
	gotRep, err := ParseReply(rep.AppendBinary(nil))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(rep, gotRep); diff != "" {
		t.Errorf("reply round trip (-want +got):\n%s", diff)
	}
	if gotRep.Size() != 1<<20+4096 {
		t.Errorf("got size %#x", gotRep.Size())
	}
}

func TestHandshakeErrors(t *testing.T) {
	ok := Reply{Endpoint: Endpoint{QPN: 1, MTU: 1}, Regions: []Region{{Length: 8, Addr: 64}}}
	gap := ok
	gap.Regions = []Region{{Length: 8}, {Offset: 16, Length: 8}}
	tests := []struct {
		name string
		err  error
	}{
		{"short", func() error { _, err := ParseEndpoint(make([]byte, 31)); return err }()},
		{"version", func() error { _, err := ParseEndpoint(make([]byte, 32)); return err }()},
		{"qpn", func() error { _, err := ParseEndpoint(Endpoint{QPN: 1 << 24, MTU: 1}.AppendBinary(nil)); return err }()},
		{"mtu", func() error { _, err := ParseEndpoint(Endpoint{MTU: 6}.AppendBinary(nil)); return err }()},
		{"request with regions", func() error { _, err := ParseEndpoint(ok.AppendBinary(nil)); return err }()},
		{"reply without regions", func() error { _, err := ParseReply(ok.Endpoint.AppendBinary(nil)); return err }()},
		{"reply gap", func() error { _, err := ParseReply(gap.AppendBinary(nil)); return err }()},
		{"reply truncated", func() error { b := ok.AppendBinary(nil); _, err := ParseReply(b[:len(b)-1]); return err }()},
	}
	for _, tt := range tests {
		if !errors.Is(tt.err, rdma.ErrProtocol) {
			t.Errorf("%s: got %v, want ErrProtocol", tt.name, tt.err)
		}
	}
}

func TestLocate(t *testing.T) {
	regions := []Region{{Offset: 0, Length: 100}, {Offset: 100, Length: 50}, {Offset: 150, Length: 10}}
	type piece struct{ Off, Goff, K uint64 }
	tests := []struct {
		off, n uint64
		want   []piece
		err    error
	}{
		{0, 10, []piece{{0, 0, 10}}, nil},
		{95, 60, []piece{{0, 95, 5}, {100, 0, 50}, {150, 0, 5}}, nil},
		{160, 0, nil, nil},
		{155, 6, nil, rdma.ErrRange},
		{^uint64(0), 2, nil, rdma.ErrRange},
	}
	for _, tt := range tests {
		var got []piece
		err := locate(regions, tt.off, tt.n, func(g Region, goff, k uint64) error {
			got = append(got, piece{g.Offset, goff, k})
			return nil
		})
		if !errors.Is(err, tt.err) {
			t.Errorf("locate(%d, %d): got %v, want %v", tt.off, tt.n, err, tt.err)
			continue
		}
		if tt.err == nil {
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("locate(%d, %d) (-want +got):\n%s", tt.off, tt.n, diff)
			}
		}
	}
}

func FuzzParseHandshake(f *testing.F) {
	f.Add(Endpoint{QPN: 0x11, PSN: 0xabcdef, MTU: 3, GID: gid}.AppendBinary(nil))
	f.Add(Reply{Endpoint: Endpoint{QPN: 2, MTU: 5}, Regions: []Region{{Length: 4096, Addr: 1, RKey: 9}}}.AppendBinary(nil))
	f.Fuzz(func(t *testing.T, b []byte) {
		if e, err := ParseEndpoint(b); err == nil {
			if got := e.AppendBinary(nil); !bytes.Equal(got, b) {
				t.Fatalf("request round trip: got %x, want %x", got, b)
			}
		}
		if r, err := ParseReply(b); err == nil {
			if got := r.AppendBinary(nil); !bytes.Equal(got, b) {
				t.Fatalf("reply round trip: got %x, want %x", got, b)
			}
		}
	})
}

func TestPickGID(t *testing.T) {
	v4 := [16]byte{10: 0xff, 11: 0xff, 12: 10, 15: 1}
	table := [][16]byte{gid, {}, v4}
	read := func(i int) ([16]byte, bool) {
		if i >= len(table) {
			return [16]byte{}, false
		}
		return table[i], true
	}
	tests := []struct {
		name      string
		index     int
		entries   int
		wantIndex int
		want      [16]byte
	}{
		{"negative prefers IPv4", -1, 3, 2, v4},
		{"negative without IPv4 takes the first", -1, 2, 0, gid},
		{"index 0 is the link-local entry", 0, 3, 0, gid},
		{"a zero entry is unusable", 1, 3, 0, [16]byte{}},
		{"past the table", 5, 3, 0, [16]byte{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			i, g := pickGID(tt.index, tt.entries, read)
			if i != tt.wantIndex || g != tt.want {
				t.Errorf("got %d %x, want %d %x", i, g, tt.wantIndex, tt.want)
			}
		})
	}
}
