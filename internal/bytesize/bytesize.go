// Package bytesize reads and prints memory sizes with binary units, for
// flags and messages. Units are binary because memory is sized in powers
// of two; decimal "MB"-style units are refused rather than guessed, since
// CXL itself writes "256 MB" for 2^28 bytes.
package bytesize

import (
	"fmt"
	"strconv"
	"strings"
)

var shifts = map[string]uint{"": 0, "b": 0, "k": 10, "kib": 10, "m": 20, "mib": 20, "g": 30, "gib": 30, "t": 40, "tib": 40}

// Parse reads "1TiB", "256MiB", "64G", "4096" or "4096B".
func Parse(v string) (uint64, error) {
	s := strings.TrimSpace(v)
	i := len(s)
	for i > 0 && (s[i-1] < '0' || s[i-1] > '9') {
		i--
	}
	num, unit := s[:i], strings.ToLower(strings.TrimSpace(s[i:]))
	n, err := strconv.ParseUint(num, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("size %q: want a number with an optional unit (KiB, MiB, GiB, TiB)", v)
	}
	sh, ok := shifts[unit]
	if !ok {
		return 0, fmt.Errorf("size %q: unknown unit %q (use KiB, MiB, GiB, TiB)", v, s[i:])
	}
	if n > (1<<64-1)>>sh {
		return 0, fmt.Errorf("size %q overflows 64 bits", v)
	}
	return n << sh, nil
}

// Format prints n in the largest binary unit that divides it exactly.
func Format(n uint64) string {
	for _, u := range []struct {
		name  string
		shift uint
	}{{"TiB", 40}, {"GiB", 30}, {"MiB", 20}, {"KiB", 10}} {
		if n >= 1<<u.shift && n%(1<<u.shift) == 0 {
			return fmt.Sprintf("%d %s", n>>u.shift, u.name)
		}
	}
	return fmt.Sprintf("%d B", n)
}

// Value is a flag.Value holding a size.
type Value uint64

func (v *Value) String() string { return Format(uint64(*v)) }

// Set parses s into v.
func (v *Value) Set(s string) error {
	n, err := Parse(s)
	if err != nil {
		return err
	}
	*v = Value(n)
	return nil
}
