// Package share is the box's rule for shared attaches by host accounts
// (`poolctl host attach SIZE --shared NAME`): a share is a sharable chunk
// with the share's name, and a host may create or join share NAME only
// if an administrator allowed that host that name. Secure by default:
// no host is allowed any share until an administrator says so, so a host
// account can neither read another host's memory by guessing a name nor
// pull another host into its own chunk. Creating the share's chunk and
// joining it are the same allowance; the chunk's owner must be allowed
// too (a chunk someone reserved under the name without the allowance is
// never joined).
//
// The allowances are kept in a JSON file (written atomically, 0600) so
// that they survive a restart of the daemon.
package share

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sync"
)

// ErrBadName is a share name the rule refuses.
var ErrBadName = errors.New("share: a share name is 1 to 64 of a-z, 0-9, '.', '_' and '-', starting with a letter or digit")

var nameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,63}$`)

// ValidName checks a share name.
func ValidName(name string) error {
	if !nameRE.MatchString(name) {
		return fmt.Errorf("%q: %w", name, ErrBadName)
	}
	return nil
}

// Policy is the allowances: share name → hosts allowed.
type Policy struct {
	path string

	mu      sync.Mutex
	allowed map[string][]uint16
}

// Open loads the allowances from path (none if the file does not exist).
// An empty path keeps them in memory only.
func Open(path string) (*Policy, error) {
	p := &Policy{path: path, allowed: map[string][]uint16{}}
	if path == "" {
		return p, nil
	}
	b, err := os.ReadFile(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return p, nil
	case err != nil:
		return nil, fmt.Errorf("share: %w", err)
	}
	if err := json.Unmarshal(b, &p.allowed); err != nil {
		return nil, fmt.Errorf("share: %s: %w", path, err)
	}
	for name := range p.allowed {
		if err := ValidName(name); err != nil {
			return nil, fmt.Errorf("share: %s: %w", path, err)
		}
	}
	return p, nil
}

// Allowed reports whether host may create or join share name.
func (p *Policy) Allowed(name string, host uint16) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Contains(p.allowed[name], host)
}

// Shares is the shares host is allowed, sorted.
func (p *Policy) Shares(host uint16) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []string
	for name, hs := range p.allowed {
		if slices.Contains(hs, host) {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// Set allows (allow true) or stops allowing host share name. A host
// already joined keeps its grant: disallowing stops new joins only.
func (p *Policy) Set(name string, host uint16, allow bool) error {
	if err := ValidName(name); err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	next := map[string][]uint16{}
	for k, v := range p.allowed {
		next[k] = slices.Clone(v)
	}
	hs := next[name]
	switch i := slices.Index(hs, host); {
	case allow && i < 0:
		hs = append(hs, host)
		slices.Sort(hs)
	case !allow && i >= 0:
		hs = slices.Delete(hs, i, i+1)
	default:
		return nil
	}
	if len(hs) == 0 {
		delete(next, name)
	} else {
		next[name] = hs
	}
	if err := p.save(next); err != nil {
		return err
	}
	p.allowed = next
	return nil
}

// save writes m to the file: a temporary file renamed over it.
func (p *Policy) save(m map[string][]uint16) error {
	if p.path == "" {
		return nil
	}
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return fmt.Errorf("share: %w", err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(p.path), ".shares-*")
	if err != nil {
		return fmt.Errorf("share: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(append(b, '\n')); err != nil {
		tmp.Close()
		return fmt.Errorf("share: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("share: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("share: %w", err)
	}
	if err := os.Rename(tmp.Name(), p.path); err != nil {
		return fmt.Errorf("share: %w", err)
	}
	return nil
}
