package appliance

import (
	"fmt"
	"strconv"
	"strings"
)

var sizeUnits = []struct {
	suffix string
	mult   uint64
}{
	{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10},
	{"T", 1 << 40}, {"G", 1 << 30}, {"M", 1 << 20}, {"K", 1 << 10}, {"B", 1},
}

// ParseSize reads a byte size such as "1TiB", "256MiB", "4G" or "4096".
// Units are binary: people size memory in powers of two.
func ParseSize(s string) (uint64, error) {
	t := strings.TrimSpace(s)
	mult := uint64(1)
	for _, u := range sizeUnits {
		if strings.HasSuffix(t, u.suffix) {
			t, mult = strings.TrimSpace(strings.TrimSuffix(t, u.suffix)), u.mult
			break
		}
	}
	n, err := strconv.ParseUint(t, 10, 64)
	if err != nil || t == "" {
		return 0, fmt.Errorf("size %q: want a number with an optional unit (KiB, MiB, GiB, TiB)", s)
	}
	if n != 0 && n > ^uint64(0)/mult {
		return 0, fmt.Errorf("size %q overflows 64 bits", s)
	}
	return n * mult, nil
}

// FormatSize prints a byte size in the largest binary unit that divides it.
func FormatSize(n uint64) string {
	for _, u := range sizeUnits[:4] {
		if n >= u.mult && n%u.mult == 0 {
			return fmt.Sprintf("%d %s", n/u.mult, u.suffix)
		}
	}
	return fmt.Sprintf("%d B", n)
}
