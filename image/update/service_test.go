package update

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	"cxlpool/image/manifest"
)

// TestService drives the daemon-facing API on a file-backed disk.
func TestService(t *testing.T) {
	f := newDisk(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "disk.img")
	if err := os.WriteFile(path, f.b, 0o600); err != nil {
		t.Fatal(err)
	}
	keys := filepath.Join(dir, "keys")
	os.MkdirAll(keys, 0o755)
	pub, _ := manifest.MarshalPublicKey(testKey.Public().(ed25519.PublicKey))
	os.WriteFile(filepath.Join(keys, "signing.pub"), pub, 0o644)
	cmdline := filepath.Join(dir, "cmdline")
	os.WriteFile(cmdline, []byte("console=ttyS0 cxlpool.slot=a quiet\n"), 0o644)

	s, err := ServiceFromBoot(path, keys, cmdline)
	if err != nil {
		t.Fatal(err)
	}
	if s.Running != SlotA {
		t.Fatalf("got running slot %q, want a", s.Running)
	}
	if _, err := s.Apply(context.Background(), bytes.NewReader([]byte("junk")), nil); !IsRefusal(err) {
		t.Fatalf("junk: got %v, want a refusal", err)
	}
	m, err := s.Apply(context.Background(), bytes.NewReader(bundle(t, "2.0", 2, testKey, 100)), nil)
	if err != nil || m.Version != "2.0" {
		t.Fatalf("got %v %v, want version 2.0", m, err)
	}
	slots, err := s.Slots()
	if err != nil {
		t.Fatal(err)
	}
	got := []string{}
	for _, sl := range slots {
		got = append(got, sl.Slot+":"+sl.State+":"+sl.Version+":"+map[bool]string{true: "active"}[sl.Active]+
			map[bool]string{true: ":running"}[sl.Running]+map[bool]string{true: ":trial"}[sl.Trial])
	}
	if diff := cmp.Diff([]string{"a:ready:1.0:active:running", "b:ready:2.0::trial"}, got); diff != "" {
		t.Errorf("slots (-want +got):\n%s", diff)
	}
	if IsRefusal(ErrTrialPending) || !IsRefusal(errors.Join(errors.New("x"), manifest.ErrRollback)) {
		t.Error("IsRefusal misclassifies")
	}
}
