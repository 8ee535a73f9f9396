package wire

import (
	"bytes"
	"encoding/hex"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"cxlpool/rdma"
)

// unhex decodes a vector written with spaces between fields.
func unhex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.ReplaceAll(s, " ", ""))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

var token = rdma.Token{0: 0xa0, 1: 0xa1, 30: 0xbe, 31: 0xbf}

// The golden vectors spell out every byte of the format documented in
// the package comment; a change to any of them is a protocol change.
var golden = []struct {
	name string
	hex  string
	enc  func() []byte
	dec  func(b []byte) (any, error)
	want any
}{
	{"preface", "4358524d 01 000000",
		func() []byte { return AppendPreface(nil) },
		func(b []byte) (any, error) { return ParsePreface(b) }, uint8(1)},
	{"READ request", "03 00 0000 07000000 0100000000000000 0010000000000000 40000000 00000000",
		func() []byte {
			return Request{Op: OpRead, Session: 7, ID: 1, Offset: 0x1000, Length: 64}.AppendBinary(nil)
		},
		func(b []byte) (any, error) { return ParseRequest(b) },
		Request{Op: OpRead, Session: 7, ID: 1, Offset: 0x1000, Length: 64}},
	{"WRITE request", "04 00 0000 01000000 ffffffffffffffff 0800000000000000 00001000 00001000",
		func() []byte {
			return Request{Op: OpWrite, Session: 1, ID: ^uint64(0), Offset: 8, Length: 1 << 20, Body: 1 << 20}.AppendBinary(nil)
		},
		func(b []byte) (any, error) { return ParseRequest(b) },
		Request{Op: OpWrite, Session: 1, ID: ^uint64(0), Offset: 8, Length: 1 << 20, Body: 1 << 20}},
	{"CAS request", "05 00 0000 02000000 0300000000000000 1800000000000000 08000000 10000000",
		func() []byte {
			return Request{Op: OpCAS, Session: 2, ID: 3, Offset: 0x18, Length: 8, Body: 16}.AppendBinary(nil)
		},
		func(b []byte) (any, error) { return ParseRequest(b) },
		Request{Op: OpCAS, Session: 2, ID: 3, Offset: 0x18, Length: 8, Body: 16}},
	{"OPEN request", "01 00 0000 00000000 0900000000000000 0000000000000000 00000000 31000000",
		func() []byte { return Request{Op: OpOpen, ID: 9, Body: 49}.AppendBinary(nil) },
		func(b []byte) (any, error) { return ParseRequest(b) },
		Request{Op: OpOpen, ID: 9, Body: 49}},
	{"OPEN body", "10 30313233343536373839616263646566 a0a1" + strings.Repeat("00", 28) + "bebf",
		func() []byte { return Open{Export: "0123456789abcdef", Token: token}.AppendBinary(nil) },
		func(b []byte) (any, error) { return ParseOpen(b) },
		Open{Export: "0123456789abcdef", Token: token}},
	{"OPEN reply", "05000000 03 000000 0000200000000000",
		func() []byte {
			return OpenReply{Session: 5, Perms: rdma.PermReadWrite, Size: 2 << 20}.AppendBinary(nil)
		},
		func(b []byte) (any, error) { return ParseOpenReply(b) },
		OpenReply{Session: 5, Perms: rdma.PermReadWrite, Size: 2 << 20}},
	{"FAA response", "06 00 0000 00000000 2a00000000000000 efcdab8967452301",
		func() []byte { return Response{Op: OpFAA, ID: 42, Value: 0x0123456789abcdef}.AppendBinary(nil) },
		func(b []byte) (any, error) { return ParseResponse(b) },
		Response{Op: OpFAA, ID: 42, Value: 0x0123456789abcdef}},
	{"denied response", "01 01 0000 00000000 0900000000000000 0000000000000000",
		func() []byte { return Response{Op: OpOpen, Status: StatusDenied, ID: 9}.AppendBinary(nil) },
		func(b []byte) (any, error) { return ParseResponse(b) },
		Response{Op: OpOpen, Status: StatusDenied, ID: 9}},
	{"batch entry", "04 000000 02000000 0001000000000000",
		func() []byte { return Entry{Op: OpWrite, Length: 2, Offset: 256}.AppendBinary(nil) },
		func(b []byte) (any, error) { return ParseEntry(b) },
		Entry{Op: OpWrite, Length: 2, Offset: 256}},
	{"batch result", "03 000000 00000000 0000000000000000",
		func() []byte { return Result{Status: StatusRange}.AppendBinary(nil) },
		func(b []byte) (any, error) { return ParseResult(b) },
		Result{Status: StatusRange}},
	{"batch body",
		"03 000000 04000000 0000000000000000" +
			"04 000000 02000000 1000000000000000 abcd" +
			"05 000000 08000000 1800000000000000 0100000000000000 0200000000000000" +
			"06 000000 08000000 2000000000000000 ffffffffffffffff",
		func() []byte {
			return AppendBatch(nil, []BatchOp{
				{Entry: Entry{Op: OpRead, Length: 4, Offset: 0}, Data: []byte{}},
				{Entry: Entry{Op: OpWrite, Length: 2, Offset: 16}, Data: []byte{0xab, 0xcd}},
				{Entry: Entry{Op: OpCAS, Length: 8, Offset: 24}, Data: mustHex("0100000000000000 0200000000000000")},
				{Entry: Entry{Op: OpFAA, Length: 8, Offset: 32}, Data: mustHex("ffffffffffffffff")},
			})
		},
		func(b []byte) (any, error) { return ParseBatch(b) },
		[]BatchOp{
			{Entry: Entry{Op: OpRead, Length: 4, Offset: 0}, Data: []byte{}},
			{Entry: Entry{Op: OpWrite, Length: 2, Offset: 16}, Data: []byte{0xab, 0xcd}},
			{Entry: Entry{Op: OpCAS, Length: 8, Offset: 24}, Data: mustHex("0100000000000000 0200000000000000")},
			{Entry: Entry{Op: OpFAA, Length: 8, Offset: 32}, Data: mustHex("ffffffffffffffff")},
		}},
}

// mustHex decodes a constant of the vector table.
func mustHex(s string) []byte {
	b, err := hex.DecodeString(strings.ReplaceAll(s, " ", ""))
	if err != nil {
		panic(err) // a typo in a constant, not a runtime condition
	}
	return b
}

func TestGolden(t *testing.T) {
	for _, g := range golden {
		t.Run(g.name, func(t *testing.T) {
			want := unhex(t, g.hex)
			if got := g.enc(); !bytes.Equal(got, want) {
				t.Errorf("encode: got %x, want %x", got, want)
			}
			got, err := g.dec(want)
			if err != nil {
				t.Fatalf("decode: %v", err)
			}
			if diff := cmp.Diff(g.want, got); diff != "" {
				t.Errorf("decode (-want +got):\n%s", diff)
			}
		})
	}
}

func TestDecodeErrors(t *testing.T) {
	req := func(f func(b []byte)) []byte {
		b := Request{Op: OpRead, Session: 1, ID: 1, Length: 64}.AppendBinary(nil)
		f(b)
		return b
	}
	tests := []struct {
		name string
		err  error
	}{
		{"short request", func() error { _, err := ParseRequest(make([]byte, 31)); return err }()},
		{"flags set", func() error { _, err := ParseRequest(req(func(b []byte) { b[1] = 1 })); return err }()},
		{"read with body", func() error { _, err := ParseRequest(req(func(b []byte) { b[28] = 1 })); return err }()},
		{"read too long", func() error {
			_, err := ParseRequest(Request{Op: OpRead, Length: MaxIO + 1}.AppendBinary(nil))
			return err
		}()},
		{"write body mismatch", func() error {
			_, err := ParseRequest(Request{Op: OpWrite, Length: 8, Body: 7}.AppendBinary(nil))
			return err
		}()},
		{"cas length", func() error {
			_, err := ParseRequest(Request{Op: OpCAS, Length: 4, Body: 16}.AppendBinary(nil))
			return err
		}()},
		{"open with length", func() error {
			_, err := ParseRequest(Request{Op: OpOpen, Length: 1, Body: 49}.AppendBinary(nil))
			return err
		}()},
		{"huge body", func() error {
			_, err := ParseRequest(Request{Op: OpPing, Body: MaxBody + 1}.AppendBinary(nil))
			return err
		}()},
		{"bad magic", func() error { _, err := ParsePreface([]byte("HTTP/1.1")); return err }()},
		{"bad version", func() error { _, err := ParsePreface(unhex(t, "4358524d 02 000000")); return err }()},
		{"error with body", func() error {
			_, err := ParseResponse(Response{Op: OpRead, Status: StatusRange, Body: 1}.AppendBinary(nil))
			return err
		}()},
		{"open id empty", func() error { _, err := ParseOpen(append([]byte{0}, token[:]...)); return err }()},
		{"open id bad char", func() error {
			_, err := ParseOpen(Open{Export: "a/b", Token: token}.AppendBinary(nil))
			return err
		}()},
		{"open short token", func() error {
			b := Open{Export: "ab", Token: token}.AppendBinary(nil)
			_, err := ParseOpen(b[:len(b)-1])
			return err
		}()},
		{"open reply no perms", func() error { _, err := ParseOpenReply(make([]byte, 16)); return err }()},
		{"batch entry open", func() error {
			_, err := ParseEntry(Entry{Op: OpOpen}.AppendBinary(nil))
			return err
		}()},
		{"batch unknown op", func() error { _, err := ParseEntry(Entry{Op: 99}.AppendBinary(nil)); return err }()},
		{"batch empty", func() error { _, err := ParseBatch(nil); return err }()},
		{"batch truncated data", func() error {
			_, err := ParseBatch(Entry{Op: OpWrite, Length: 4}.AppendBinary(nil))
			return err
		}()},
		{"batch too many bytes", func() error {
			b := Entry{Op: OpRead, Length: MaxIO}.AppendBinary(nil)
			_, err := ParseBatch(Entry{Op: OpRead, Length: 1}.AppendBinary(b))
			return err
		}()},
		{"result error with data", func() error {
			_, err := ParseResult(Result{Status: StatusPerm, Length: 1}.AppendBinary(nil))
			return err
		}()},
	}
	for _, tt := range tests {
		if !errors.Is(tt.err, rdma.ErrProtocol) {
			t.Errorf("%s: got %v, want ErrProtocol", tt.name, tt.err)
		}
	}
}

func TestStatusErrors(t *testing.T) {
	for s := StatusOK; s <= StatusInternal; s++ {
		if got := StatusOf(s.Err()); got != s {
			t.Errorf("StatusOf(%d.Err()) = %d, want %d", s, got, s)
		}
	}
	if got := StatusOf(errors.New("other")); got != StatusInternal {
		t.Errorf("StatusOf(other) = %d, want %d", got, StatusInternal)
	}
}

func seed(f *testing.F) {
	for _, g := range golden {
		f.Add(unhex(f, g.hex))
	}
}

func FuzzParseRequest(f *testing.F) {
	seed(f)
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := ParseRequest(b)
		if err != nil {
			return
		}
		if got := r.AppendBinary(nil); !bytes.Equal(got, b[:RequestLen]) {
			t.Fatalf("round trip: got %x, want %x", got, b[:RequestLen])
		}
	})
}

func FuzzParseResponse(f *testing.F) {
	seed(f)
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := ParseResponse(b)
		if err != nil {
			return
		}
		if got := r.AppendBinary(nil); !bytes.Equal(got, b[:ResponseLen]) {
			t.Fatalf("round trip: got %x, want %x", got, b[:ResponseLen])
		}
	})
}

func FuzzParseOpen(f *testing.F) {
	seed(f)
	f.Fuzz(func(t *testing.T, b []byte) {
		if o, err := ParseOpen(b); err == nil {
			if got := o.AppendBinary(nil); !bytes.Equal(got, b) {
				t.Fatalf("round trip: got %x, want %x", got, b)
			}
		}
		if o, err := ParseOpenReply(b); err == nil {
			if got := o.AppendBinary(nil); !bytes.Equal(got, b) {
				t.Fatalf("reply round trip: got %x, want %x", got, b)
			}
		}
		_, _ = ParsePreface(b)
	})
}

func FuzzParseBatch(f *testing.F) {
	seed(f)
	f.Fuzz(func(t *testing.T, b []byte) {
		if r, err := ParseResult(b); err == nil {
			if got := r.AppendBinary(nil); !bytes.Equal(got, b[:ResultLen]) {
				t.Fatalf("result round trip: got %x, want %x", got, b[:ResultLen])
			}
		}
		ops, err := ParseBatch(b)
		if err != nil {
			return
		}
		if got := AppendBatch(nil, ops); !bytes.Equal(got, b) {
			t.Fatalf("round trip: got %x, want %x", got, b)
		}
	})
}
