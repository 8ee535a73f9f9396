package cci

import (
	"encoding"
	"encoding/hex"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// codec is what every payload type implements.
type codec interface {
	encoding.BinaryMarshaler
	encoding.BinaryUnmarshaler
}

// unhex decodes space/newline separated hex bytes.
func unhex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.Join(strings.Fields(s), ""))
	if err != nil {
		t.Fatalf("bad hex in test: %v", err)
	}
	return b
}

// zeroOf returns a new zero value of the same pointer type as v.
func zeroOf(v codec) codec {
	return reflect.New(reflect.TypeOf(v).Elem()).Interface().(codec)
}

// typeName names v's type for subtest names.
func typeName(v any) string { return reflect.TypeOf(v).Elem().Name() }

// goldenCase is a payload vector: encoding want must give bytes hex and
// decoding hex must give want.
type goldenCase struct {
	name string
	want codec
	hex  string
}

func runGolden(t *testing.T, cases []goldenCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			wire := unhex(t, tc.hex)
			got, err := tc.want.MarshalBinary()
			if err != nil {
				t.Fatalf("MarshalBinary: got error %v, want nil", err)
			}
			if diff := cmp.Diff(wire, got); diff != "" {
				t.Errorf("MarshalBinary bytes mismatch (-want +got):\n%s", diff)
			}
			dec := zeroOf(tc.want)
			if err := dec.UnmarshalBinary(wire); err != nil {
				t.Fatalf("UnmarshalBinary: got error %v, want nil", err)
			}
			if diff := cmp.Diff(tc.want, dec); diff != "" {
				t.Errorf("UnmarshalBinary mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

// roundTripCase is a value whose encoding must decode back to itself.
// shortOK lists truncated lengths the decoder must accept (the short-input
// rule) and that must decode like the zero-padded input; otherOK lists
// truncated lengths that are a different valid form (the empty 5602h
// response). Every other truncation must fail with ErrPayloadLength.
type roundTripCase struct {
	name    string
	v       codec
	shortOK []int
	otherOK []int
}

func runRoundTrip(t *testing.T, cases []roundTripCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(typeName(tc.v)+"/"+tc.name, func(t *testing.T) {
			b, err := tc.v.MarshalBinary()
			if err != nil {
				t.Fatalf("MarshalBinary: got error %v, want nil", err)
			}
			dec := zeroOf(tc.v)
			if err := dec.UnmarshalBinary(b); err != nil {
				t.Fatalf("UnmarshalBinary: got error %v, want nil", err)
			}
			if diff := cmp.Diff(tc.v, dec); diff != "" {
				t.Errorf("round trip mismatch (-want +got):\n%s", diff)
			}
			// Decoding must not alias the input.
			for i := range b {
				b[i] ^= 0xff
			}
			if diff := cmp.Diff(tc.v, dec); diff != "" {
				t.Errorf("decoded value changed with its input (-want +got):\n%s", diff)
			}
		})
		t.Run(typeName(tc.v)+"/"+tc.name+"/short", func(t *testing.T) {
			b, err := tc.v.MarshalBinary()
			if err != nil {
				t.Fatalf("MarshalBinary: got error %v, want nil", err)
			}
			for l := range len(b) {
				dec := zeroOf(tc.v)
				err := dec.UnmarshalBinary(b[:l])
				switch {
				case (slices.Contains(tc.shortOK, l) || slices.Contains(tc.otherOK, l)) && err != nil:
					t.Errorf("UnmarshalBinary(%d of %d bytes): got error %v, want nil", l, len(b), err)
				case slices.Contains(tc.otherOK, l):
				case slices.Contains(tc.shortOK, l):
					// The missing tail reads as zeros.
					padded := make([]byte, len(b))
					copy(padded, b[:l])
					full := zeroOf(tc.v)
					if err := full.UnmarshalBinary(padded); err != nil {
						t.Fatalf("UnmarshalBinary(zero padded): got error %v, want nil", err)
					}
					if diff := cmp.Diff(full, dec); diff != "" {
						t.Errorf("short input of %d bytes differs from zero padding (-padded +short):\n%s", l, diff)
					}
				case !errors.Is(err, ErrPayloadLength):
					t.Errorf("UnmarshalBinary(%d of %d bytes): got error %v, want ErrPayloadLength", l, len(b), err)
				}
			}
		})
	}
}

// fuzzDecoders feeds data to a fresh value of every codec in news. A
// decoder must never panic, must report failures as ErrPayloadLength, and
// whatever it accepts must re-encode and decode to the same value.
func fuzzDecoders(t *testing.T, data []byte, news []codec) {
	for _, proto := range news {
		v := zeroOf(proto)
		if err := v.UnmarshalBinary(data); err != nil {
			if !errors.Is(err, ErrPayloadLength) {
				t.Errorf("%s: decode error %v does not wrap ErrPayloadLength", typeName(v), err)
			}
			continue
		}
		b, err := v.MarshalBinary()
		if err != nil {
			t.Errorf("%s: re-encoding an accepted payload: got error %v, want nil", typeName(v), err)
			continue
		}
		w := zeroOf(proto)
		if err := w.UnmarshalBinary(b); err != nil {
			t.Errorf("%s: decoding the re-encoding: got error %v, want nil", typeName(v), err)
			continue
		}
		if diff := cmp.Diff(v, w); diff != "" {
			t.Errorf("%s: re-encoding changed the value (-first +second):\n%s", typeName(v), diff)
		}
	}
}

// seedCodecs adds the encodings of samples to the fuzz corpus.
func seedCodecs(f *testing.F, samples []roundTripCase) {
	for _, s := range samples {
		b, err := s.v.MarshalBinary()
		if err != nil {
			f.Fatalf("seed %s: %v", s.name, err)
		}
		f.Add(b)
	}
}

// protos returns the distinct codec types of samples.
func protos(samples []roundTripCase) []codec {
	seen := map[reflect.Type]bool{}
	var out []codec
	for _, s := range samples {
		if t := reflect.TypeOf(s.v); !seen[t] {
			seen[t] = true
			out = append(out, s.v)
		}
	}
	return out
}

// testTag returns a fixed tag with a recognisable pattern.
func testTag(seed byte) Tag {
	var t Tag
	for i := range t {
		t[i] = seed + byte(i)
	}
	return t
}
