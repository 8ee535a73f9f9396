package linux

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"
)

// sysfs reads and writes attributes under a root (the real /sys, or a
// fake tree in a test). Writes go through write so that a test's fake
// kernel can act on them, as the real kernel acts on a sysfs store.
type sysfs struct {
	root  string
	write func(path, value string) error
	poll  time.Duration
}

func (s *sysfs) path(rel ...string) string {
	return filepath.Join(append([]string{s.root}, rel...)...)
}

// read is one attribute, trimmed of its newline.
func (s *sysfs) read(rel ...string) (string, error) {
	b, err := os.ReadFile(s.path(rel...))
	if err != nil {
		return "", fmt.Errorf("linux: read %s: %w", s.path(rel...), err)
	}
	return strings.TrimSpace(string(b)), nil
}

// readUint parses an attribute the kernel prints as "%#llx", "%llu" or
// bare hex (block_size_bytes).
func (s *sysfs) readUint(rel ...string) (uint64, error) {
	v, err := s.read(rel...)
	if err != nil {
		return 0, err
	}
	return parseUint(v)
}

func parseUint(v string) (uint64, error) {
	if h, ok := strings.CutPrefix(v, "0x"); ok {
		return strconv.ParseUint(h, 16, 64)
	}
	return strconv.ParseUint(v, 10, 64)
}

// set writes one attribute; the error names the attribute and the value,
// which is what a kernel refusal (EINVAL, EBUSY, ENXIO) is about.
func (s *sysfs) set(value string, rel ...string) error {
	p := s.path(rel...)
	if err := s.write(p, value); err != nil {
		return fmt.Errorf("linux: write %q to %s: %w", value, p, err)
	}
	return nil
}

func (s *sysfs) exists(rel ...string) bool {
	_, err := os.Stat(s.path(rel...))
	return err == nil
}

// list is the names in a directory matching a glob pattern, sorted by
// their trailing numbers (region2 before region10).
func (s *sysfs) list(dir, pattern string) []string {
	m, _ := filepath.Glob(filepath.Join(s.path(dir), pattern))
	names := make([]string, 0, len(m))
	for _, p := range m {
		names = append(names, filepath.Base(p))
	}
	sort.Slice(names, func(i, j int) bool { return natLess(names[i], names[j]) })
	return names
}

// driver is the name of the driver bound to a device ("" when unbound).
func (s *sysfs) driver(rel ...string) string {
	t, err := os.Readlink(s.path(append(rel, "driver")...))
	if err != nil {
		return ""
	}
	return filepath.Base(t)
}

// until polls cond every s.poll until it holds, fails, or ctx ends: the
// kernel probes some devices asynchronously (libnvdimm's regions and
// namespaces), and a process without udev can only look again.
func (s *sysfs) until(ctx context.Context, what string, cond func() (bool, error)) error {
	for {
		ok, err := cond()
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		t := time.NewTimer(s.poll)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("linux: waiting for %s: %w", what, ctx.Err())
		case <-t.C:
		}
	}
}

// writeFile is the real kernel's store: open the attribute and write the
// value, newline-terminated, in one write(2), as libcxl and libndctl do
// (some stores insist on it: a uuid must be 36 characters and a newline).
func writeFile(path, value string) error {
	if !strings.HasSuffix(value, "\n") {
		value += "\n"
	}
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, werr := f.WriteString(value)
	cerr := f.Close()
	return errors.Join(werr, cerr)
}

// natLess orders names by their prefix, then by each number in them.
func natLess(a, b string) bool {
	na, nb := splitNum(a), splitNum(b)
	for i := 0; i < len(na) && i < len(nb); i++ {
		if na[i] != nb[i] {
			ai, aerr := strconv.Atoi(na[i])
			bi, berr := strconv.Atoi(nb[i])
			if aerr == nil && berr == nil {
				return ai < bi
			}
			return na[i] < nb[i]
		}
	}
	return len(na) < len(nb)
}

func splitNum(s string) []string {
	var parts []string
	start := 0
	for i := 1; i <= len(s); i++ {
		if i == len(s) || isDigit(s[i]) != isDigit(s[start]) {
			parts = append(parts, s[start:i])
			start = i
		}
	}
	return parts
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }
