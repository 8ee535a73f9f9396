package share_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	"cxlpool/host/share"
)

func TestAllowancesPersist(t *testing.T) {
	path := filepath.Join(t.TempDir(), "shares.json")
	p, err := share.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	if p.Allowed("kv", 0) {
		t.Fatal("a host is allowed a share nobody allowed (not secure by default)")
	}
	for _, h := range []uint16{1, 0, 1} {
		if err := p.Set("kv", h, true); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Set("other", 1, true); err != nil {
		t.Fatal(err)
	}
	q, err := share.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		host uint16
		want []string
	}{
		{0, []string{"kv"}},
		{1, []string{"kv", "other"}},
		{2, nil},
	}
	for _, tt := range tests {
		if diff := cmp.Diff(tt.want, q.Shares(tt.host)); diff != "" {
			t.Errorf("after reopening, Shares(%d) (-want +got):\n%s", tt.host, diff)
		}
	}
	if err := q.Set("kv", 0, false); err != nil {
		t.Fatal(err)
	}
	if q.Allowed("kv", 0) || !q.Allowed("kv", 1) {
		t.Error("disallowing host 0 changed the wrong host")
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("file mode = %v, %v; want 0600", fi.Mode().Perm(), err)
	}
}

func TestBadNames(t *testing.T) {
	p, _ := share.Open("")
	for _, name := range []string{"", "KV", "-kv", "a b", "../x", string(make([]byte, 65))} {
		if err := p.Set(name, 0, true); !errors.Is(err, share.ErrBadName) {
			t.Errorf("Set(%q) = %v, want ErrBadName", name, err)
		}
	}
}
