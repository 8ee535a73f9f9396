package api_test

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"

	"cxlpool/api/apitest"
	"cxlpool/rdma"
	"cxlpool/rdma/client"
)

// TestExportEndToEnd: the whole path through the daemon. Through the API
// an operator exports a chunk granted to Host2; what the virtual box's
// host 2 writes, a remote client holding the token reads over TCP from
// the export server the fabric names, and its traffic shows on the
// Connection; DELETE of the Connection revokes the export under the open
// client; and releasing the chunk's grant revokes its exports by itself.
func TestExportEndToEnd(t *testing.T) {
	env := apitest.NewServer(t)
	ctx := context.Background()
	chunk := reserve(t, env.Admin, blockMiB, nil)
	grant := connect(t, env.Admin, chunk, 2)
	host := env.App.Box.Host(2)
	exts := host.Extents()
	if len(exts) != 1 {
		t.Fatalf("host 2 holds %d extents, want 1", len(exts))
	}
	dpa := exts[0].DPA

	addr, _ := get(env.Operator.GetOK(rdmaFabricURI), "Oem", "CxlPool", "Address").(string)
	if addr == "" {
		t.Fatal("the RDMA fabric names no export server address")
	}
	dial := func(uri string, tok rdma.Token) *client.Client {
		t.Helper()
		id := rdma.ExportID(strings.TrimPrefix(uri, rdmaConnectionsURI+"/"))
		c, err := client.Dial(ctx, client.Config{Addr: addr, Export: id, Token: tok, Conns: 2})
		if err != nil {
			t.Fatalf("dial export %s: %v", id, err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}

	uri, tok := createExport(t, env.Operator, exportBody(chunk, "rack7", nil))
	cl := dial(uri, tok)
	msg := []byte("written by host 2")
	if _, err := host.WriteAt(msg, dpa+4096); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(msg))
	if err := cl.Read(ctx, got, 4096); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, msg) {
		t.Errorf("remote client reads %q, want %q", got, msg)
	}
	if err := cl.Write(ctx, []byte("remote"), 0); err != nil {
		t.Fatal(err)
	}
	hb := make([]byte, 6)
	if _, err := host.ReadAt(hb, dpa); err != nil || string(hb) != "remote" {
		t.Errorf("host 2 reads %q, %v; want the client's bytes", hb, err)
	}
	tr := get(env.Admin.GetOK(uri), "Oem", "CxlPool", "Traffic")
	if get(tr, "Reads") != float64(1) || get(tr, "BytesRead") != float64(len(msg)) ||
		get(tr, "Writes") != float64(1) || get(tr, "BytesWritten") != float64(6) {
		t.Errorf("traffic after one READ and one WRITE: got %v", tr)
	}

	// A wrong token is refused like an unknown export.
	bad := tok
	bad[0] ^= 1
	id := rdma.ExportID(strings.TrimPrefix(uri, rdmaConnectionsURI+"/"))
	if _, err := client.Dial(ctx, client.Config{Addr: addr, Export: id, Token: bad, Conns: 1}); !errors.Is(err, rdma.ErrDenied) {
		t.Errorf("dial with a wrong token: got %v, want ErrDenied", err)
	}

	// DELETE revokes under the open client.
	if r := env.Operator.Delete(uri); r.Status != http.StatusNoContent {
		t.Fatalf("DELETE %s: got %s, want 204", uri, r)
	}
	if err := cl.Read(ctx, got, 4096); !errors.Is(err, rdma.ErrRevoked) {
		t.Errorf("read after DELETE: got %v, want ErrRevoked", err)
	}
	if _, err := client.Dial(ctx, client.Config{Addr: addr, Export: id, Token: tok, Conns: 1}); !errors.Is(err, rdma.ErrDenied) {
		t.Errorf("dial a revoked export: got %v, want ErrDenied", err)
	}

	// Releasing the chunk's only grant revokes its exports first.
	uri2, tok2 := createExport(t, env.Operator, exportBody(chunk, "rack8", map[string]any{"Expiry": "PT1H"}))
	cl2 := dial(uri2, tok2)
	if err := cl2.Read(ctx, got, 4096); err != nil {
		t.Fatal(err)
	}
	release(t, env.Admin, grant)
	if err := cl2.Read(ctx, got, 4096); !errors.Is(err, rdma.ErrRevoked) {
		t.Errorf("read after the grant's release: got %v, want ErrRevoked", err)
	}
	wantStatus(t, "GET an export of a released chunk", env.Admin.Get(uri2), http.StatusNotFound, "ResourceNotFound")
	if got := members(t, env.Admin, rdmaConnectionsURI); len(got) != 0 {
		t.Errorf("exports after the release: %v", got)
	}
	if got := members(t, env.Admin, rdmaEndpointsURI); len(got) != 1 {
		t.Errorf("endpoints after the release: %v, want only the pool target", got)
	}
	// The capacity went back to the device sanitized: granted again, it
	// reads as zeros to a new export's client.
	connect(t, env.Admin, chunk, 3)
	uri3, tok3 := createExport(t, env.Admin, exportBody(chunk, "rack9", nil))
	if err := dial(uri3, tok3).Read(ctx, got, 4096); err != nil || !bytes.Equal(got, make([]byte, len(got))) {
		t.Errorf("new export of the regranted chunk reads %q, %v; want zeros", got, err)
	}
}
