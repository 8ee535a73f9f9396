package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"cxlpool/rdma"
)

// exportNormaliser replaces what differs between runs in export output:
// export ids, tokens and the export server's address.
type exportNormaliser struct {
	c    *cli
	repl []string
}

// add registers an export; its placeholder is as long as its Id, so that
// tables keep their alignment.
func (n *exportNormaliser) add(id, token string) {
	ph := "EXPORT" + string(rune('0'+len(n.repl)/4))
	ph += strings.Repeat("_", max(len(id)-len(ph), 0))
	n.repl = append(n.repl, id, ph, token, "<token>")
}

func (n *exportNormaliser) normalise(out string) string {
	return strings.NewReplacer(append(n.repl, n.c.env.App.ExportAddr.String(), "EXPORTS")...).Replace(out)
}

func (n *exportNormaliser) golden(name, out string) {
	n.c.t.Helper()
	n.c.golden(name, n.normalise(out))
}

// reNumbers are the measured figures of export bench.
var reNumbers = regexp.MustCompile(`\b[0-9]+(\.[0-9]+)?(µs|ms|s|ns)?\b`)

// TestExportCommands: an administrator exports a chunk granted to a
// host, lists, measures and revokes exports; a remote client with the
// printed token reads what the host wrote.
func TestExportCommands(t *testing.T) {
	c := newCLI(t)
	n := &exportNormaliser{c: c}
	c.ok(c.as("admin", "login"))
	c.ok(c.run("request", "256MiB", "--host", "Host2"))

	r := c.ok(c.run("export", "create", "1", "--client", "rack7"))
	id := regexp.MustCompile(`export: (\S+)`).FindStringSubmatch(r.stdout)
	tok := regexp.MustCompile(`token:  (\S+)`).FindStringSubmatch(r.stdout)
	if id == nil || tok == nil {
		t.Fatalf("export create printed no export Id or token:\n%s", r.stdout)
	}
	n.add(id[1], tok[1])
	n.golden("export-create", r.stdout)

	x := decodeJSON[exportOut](t, c.ok(c.run("--json", "export", "create", "/redfish/v1/Chassis/Pool/MemoryDomains/Pool/MemoryChunks/1",
		"--client", "rack8", "--read-only", "--offset", "4KiB", "--length", "8KiB", "--expires", "1h30m")))
	if _, err := rdma.ParseToken(x.Token); err != nil || x.Access != "r" || x.OffsetBytes != 4096 || x.LengthBytes != 8192 ||
		x.Expiry == "" || x.Server != c.env.App.ExportAddr.String() || x.Chunk != "1" || x.Client != "rack8" {
		t.Errorf("export create --json: got %+v (token error %v)", x, err)
	}
	n.add(x.ID, x.Token)
	n.golden("export-list", c.ok(c.run("export", "list")).stdout)

	// The host writes; the bench's client reads it over the network.
	host := c.env.App.Box.Host(2)
	if _, err := host.WriteAt([]byte("host bytes"), host.Extents()[0].DPA); err != nil {
		t.Fatal(err)
	}
	tokFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokFile, []byte(tok[1]+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	b := decodeJSON[benchOut](t, c.ok(c.run("--json", "export", "bench", "--export", id[1], "--token-file", tokFile,
		"--server", c.env.App.ExportAddr.String(), "--size", "4KiB", "--duration", "1ns", "--conns", "2")))
	if b.Ops != 1 || b.Bytes != 4096 || b.Op != "read" || b.ExportBytes != 256<<20 || b.Conns != 2 {
		t.Errorf("export bench --json: got %+v", b)
	}
	// Without --server the address comes from the box's RDMA fabric.
	r = c.ok(c.run("export", "bench", "--export", "/redfish/v1/Fabrics/RDMA/Connections/"+id[1], "--token", tok[1],
		"--op", "write", "--size", "64", "--duration", "1ns"))
	c.golden("export-bench", reNumbers.ReplaceAllString(n.normalise(r.stdout), "N"))
	xs := decodeJSON[[]exportOut](t, c.ok(c.run("--json", "export", "list")))
	// Each bench first makes one untimed pass over its span (64 sizes
	// here), then the one timed operation.
	if len(xs) != 2 || xs[0].Reads != 65 || xs[0].BytesRead != 65*4096 || xs[0].Writes != 65 || xs[0].BytesWritten != 65*64 || xs[0].Token != "" {
		t.Errorf("export list --json after the benches: got %+v", xs)
	}
	got := make([]byte, 10)
	if _, err := host.ReadAt(got, host.Extents()[0].DPA); err != nil || string(got) != strings.Repeat("\x00", 10) {
		t.Errorf("host reads %q after a 64-byte WRITE bench of zeros, %v", got, err)
	}

	n.golden("export-revoke", c.ok(c.run("export", "revoke", x.ID)).stdout)
	if xs := decodeJSON[[]exportOut](t, c.ok(c.run("--json", "export", "list"))); len(xs) != 1 || xs[0].ID != id[1] {
		t.Errorf("exports after revoke: got %+v", xs)
	}
	c.fails(c.run("export", "bench", "--export", x.ID, "--token", x.Token, "--server", c.env.App.ExportAddr.String()),
		exitError, "refused")
	c.fails(c.run("export", "revoke", x.ID), exitError, "ResourceNotFound")
	c.fails(c.as("host0", "export", "create", "1", "--client", "h"), exitError, "privileges")
	c.fails(c.run("export", "create", "2", "--client", "rack7"), exitError, "MemoryChunks/2")

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"export", "frob"}, `unknown subcommand "frob"`},
		{[]string{"export", "create", "1"}, "--client is required"},
		{[]string{"export", "create"}, "missing argument"},
		{[]string{"export", "create", "1", "--client", "x", "--expires", "-1h"}, "--expires"},
		{[]string{"export", "create", "1", "--client", "x", "--offset", "1MB"}, "unknown unit"},
		{[]string{"export", "revoke", "a/b"}, "is not a export Id"},
		{[]string{"export", "bench", "--token", tok[1]}, "--export is required"},
		{[]string{"export", "bench", "--export", id[1]}, "--token or --token-file is required"},
		{[]string{"export", "bench", "--export", id[1], "--token", "short"}, "not an export token"},
		{[]string{"export", "bench", "--export", "x!", "--token", tok[1]}, "not an export Id"},
		{[]string{"export", "bench", "--export", id[1], "--token", tok[1], "--op", "cas"}, "--op"},
		{[]string{"export", "bench", "--export", id[1], "--token", tok[1], "--duration", "0s"}, "--duration"},
		{[]string{"export", "bench", "--export", id[1], "--token", tok[1], "--size", "0"}, "--size"},
		{[]string{"export", "bench", "--export", id[1], "--token", tok[1], "--size", "1GiB", "--server", c.env.App.ExportAddr.String()}, "larger than"},
	} {
		c.fails(c.run(tc.args...), exitUsage, tc.want)
	}
}
