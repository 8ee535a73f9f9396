package sqlite_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"cxlpool/dcd"
	"cxlpool/rdma"
	"cxlpool/rdma/internal/fake"
	"cxlpool/rdma/sqlite"
)

func open(t *testing.T, path string) *sqlite.Store {
	t.Helper()
	st, err := sqlite.Open(context.Background(), path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// TestContract checks the rdma.Store contract: Save, replace, Delete
// (also of an unknown ID) and Load, across a reopen.
func TestContract(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), sqlite.File)
	created := time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)
	a := rdma.Record{ID: "aaaa", Chunk: 7, Client: "rack-7", Perms: rdma.PermReadWrite, Offset: 4096, Length: 1 << 20,
		Expiry: created.Add(time.Hour), Created: created, TokenHash: rdma.HashToken(rdma.Token{1}), Grants: []dcd.GrantID{3, 9}}
	b := rdma.Record{ID: "bbbb", Chunk: 8, Client: "rack 8", Perms: rdma.PermRead, Offset: 0, Length: ^uint64(0) >> 1,
		Created: created.Add(time.Second), TokenHash: rdma.HashToken(rdma.Token{2}), Grants: []dcd.GrantID{4}}
	a2 := a
	a2.Client = "rack-7b"
	tests := []struct {
		name string
		op   func(st *sqlite.Store) error
		want []rdma.Record
	}{
		{"empty", func(*sqlite.Store) error { return nil }, nil},
		{"save a", func(st *sqlite.Store) error { return st.Save(ctx, a) }, []rdma.Record{a}},
		{"save b", func(st *sqlite.Store) error { return st.Save(ctx, b) }, []rdma.Record{a, b}},
		{"replace a", func(st *sqlite.Store) error { return st.Save(ctx, a2) }, []rdma.Record{a2, b}},
		{"delete unknown", func(st *sqlite.Store) error { return st.Delete(ctx, "cccc") }, []rdma.Record{a2, b}},
		{"delete a", func(st *sqlite.Store) error { return st.Delete(ctx, a.ID) }, []rdma.Record{b}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := open(t, path)
			if err := tt.op(st); err != nil {
				t.Fatal(err)
			}
			// Reopened: what Load returns is what survived.
			st.Close()
			got, err := open(t, path).Load(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Load (-want +got):\n%s", diff)
			}
		})
	}
}

// TestRestart restarts an export service over the store's file and checks
// that the export survives and that the file never holds the token.
func TestRestart(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), sqlite.File)
	st := open(t, path)
	env := fake.NewEnv(t, rdma.Config{Store: st})
	x := env.Export(t, rdma.PermReadWrite)
	y := env.Export(t, rdma.PermRead)
	if err := env.Service.Revoke(ctx, y.ID); err != nil {
		t.Fatal(err)
	}
	if err := env.Service.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	// No token in the database, its WAL or anything else beside it.
	files, _ := filepath.Glob(path + "*")
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, tok := range []rdma.Token{x.Token, y.Token} {
			if bytes.Contains(data, tok[:]) || bytes.Contains(data, []byte(tok.String())) {
				t.Errorf("%s holds a raw token", filepath.Base(f))
			}
		}
	}

	s, err := rdma.NewService(rdma.Config{Ledger: env.Ledger, Memory: env.Mem, Store: open(t, path)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(ctx)
	if n, err := s.Restore(ctx); n != 1 || err != nil {
		t.Fatalf("Restore: got %d, %v; want 1, nil", n, err)
	}
	if _, err := s.Authenticate(x.ID, x.Token); err != nil {
		t.Errorf("old token after restart: %v", err)
	}
	wrong := x.Token
	wrong[5] ^= 0x80
	tests := []struct {
		name string
		id   rdma.ExportID
		tok  rdma.Token
	}{{"wrong token", x.ID, wrong}, {"revoked export", y.ID, y.Token}, {"unknown export", "0123456789abcdef", x.Token}}
	for _, tt := range tests {
		if _, err := s.Authenticate(tt.id, tt.tok); err != rdma.ErrDenied {
			t.Errorf("%s: got %v, want ErrDenied", tt.name, err)
		}
	}
}
