package main

import (
	"context"
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"cxlpool/dcd"
)

func TestSystemArg(t *testing.T) {
	for _, tc := range []struct {
		in, want string
		bad      bool
	}{
		{in: "Host3", want: "Host3"},
		{in: "host3", want: "Host3"},
		{in: "HOST3", want: "Host3"},
		{in: "3", want: "Host3"},
		{in: "/redfish/v1/Systems/Host3/", want: "Host3"},
		{in: "/redfish/v1/Systems/host7", want: "Host7"},
		{in: "Host", want: "Host"}, // not a number: left for the service to refuse
		{in: "Host/3", bad: true},
		{in: "", bad: true},
	} {
		got, err := systemArg(tc.in)
		if (err != nil) != tc.bad || got != tc.want {
			t.Errorf("systemArg(%q): got %q, %v; want %q (error %v)", tc.in, got, err, tc.want, tc.bad)
		}
	}
}

func TestSizeCheck(t *testing.T) {
	const mib = 1 << 20
	for _, tc := range []struct {
		n    uint64
		want string // "" for accepted
	}{
		{256 * mib, ""},
		{1 << 30, ""},
		{3 * mib, "chunk sizes are multiples of 256 MiB (the device's block size): use 256 MiB"},
		{300 * mib, "use 256 MiB or 512 MiB"},
	} {
		err := sizeCheck(tc.n, 256*mib, size(tc.n))
		if got := ""; err != nil {
			got = err.Error()
			if tc.want == "" || !strings.Contains(got, tc.want) {
				t.Errorf("sizeCheck(%s): got %q, want %q", size(tc.n), got, tc.want)
			}
		} else if tc.want != "" {
			t.Errorf("sizeCheck(%s): accepted, want %q", size(tc.n), tc.want)
		}
	}
}

func TestPlanShrink(t *testing.T) {
	const gib = 1 << 30
	items := func(sizes ...uint64) []heldChunk {
		out := make([]heldChunk, len(sizes))
		for i, s := range sizes {
			out[i] = heldChunk{conn: connectionOut{ID: string(rune('1' + i))}, bytes: s}
		}
		return out
	}
	ids := func(hs []heldChunk) []string {
		out := []string{}
		for _, h := range hs {
			out = append(out, h.conn.ID)
		}
		return out
	}
	for _, tc := range []struct {
		name  string
		items []heldChunk
		need  uint64
		want  []string
	}{
		{"nothing needed", items(gib), 0, []string{}},
		{"exact single", items(gib, 2*gib, 4*gib), 2 * gib, []string{"2"}},
		{"exact pair", items(gib, 2*gib, 4*gib), 3 * gib, []string{"1", "2"}},
		{"least over", items(2*gib, 4*gib), 3 * gib, []string{"2"}},
		{"more than held", items(gib, gib), 5 * gib, []string{"1", "2"}},
		{"half a unit rounds up", items(gib, gib), gib / 2, []string{"1"}},
	} {
		if diff := cmp.Diff(tc.want, ids(planShrink(tc.items, tc.need))); diff != "" {
			t.Errorf("%s: planShrink (-want +got):\n%s", tc.name, diff)
		}
	}
}

// TestHelpEverywhere: -h and --help print a command's help on stdout and
// exit 0; commands with several forms show all of them; help CMD is the
// same; --version prints the version.
func TestHelpEverywhere(t *testing.T) {
	c := newCLI(t)
	for _, cmd := range commands() {
		for _, args := range [][]string{{cmd.name, "-h"}, {cmd.name, "--help"}, {"help", cmd.name}} {
			r := c.run(args...)
			if r.code != 0 || r.stderr != "" || !strings.Contains(r.stdout, "usage: poolctl") {
				t.Errorf("poolctl %s: exit %d, stderr %q, stdout %q; want exit 0 with the usage on stdout", strings.Join(args, " "), r.code, r.stderr, r.stdout)
			}
			if cmd.args != "" && !strings.Contains(r.stdout, cmd.args) {
				t.Errorf("poolctl %s: stdout lacks the forms %q:\n%s", strings.Join(args, " "), cmd.args, r.stdout)
			}
		}
	}
	for _, args := range [][]string{{"accounts", "add", "-h"}, {"export", "bench", "--help"}, {"free", "-h"}} {
		r := c.run(args...)
		if r.code != 0 || !strings.Contains(r.stdout, "usage: poolctl [global flags] "+args[0]) {
			t.Errorf("poolctl %s: exit %d, stdout %q", strings.Join(args, " "), r.code, r.stdout)
		}
	}
	if r := c.ok(c.run("accounts", "remove", "-h")); !strings.Contains(r.stdout, "add NAME --role ROLE") {
		t.Errorf("accounts remove -h does not show the other forms:\n%s", r.stdout)
	}
	if r := c.ok(c.run("--version")); !strings.HasPrefix(r.stdout, "poolctl ") {
		t.Errorf("--version: got %q", r.stdout)
	}
	// A bad flag is still a usage error, its usage not printed.
	if r := c.run("request", "--bogus"); r.code != exitUsage || r.stdout != "" {
		t.Errorf("request --bogus: exit %d, stdout %q; want exit 2, no stdout", r.code, r.stdout)
	}
}

// TestJSONErrors: under --json an error is one JSON object on stderr,
// with the service's messages when it refused.
func TestJSONErrors(t *testing.T) {
	c := newCLI(t)
	c.ok(c.as("admin", "login"))
	for _, tc := range []struct {
		args   []string
		code   int
		status int
		id     string
	}{
		{[]string{"--json", "request", "lots"}, exitUsage, 0, ""},
		{[]string{"free", "9", "--json"}, exitError, 404, "ResourceNotFound"},
	} {
		r := c.run(tc.args...)
		var e errorOut
		if err := json.Unmarshal([]byte(r.stderr), &e); err != nil {
			t.Fatalf("poolctl %v: stderr %q is not JSON: %v", tc.args, r.stderr, err)
		}
		if r.code != tc.code || e.Error.ExitStatus != tc.code || e.Error.Status != tc.status || e.Error.Message == "" {
			t.Errorf("poolctl %v: exit %d, error %+v", tc.args, r.code, e.Error)
		}
		if tc.id != "" && (len(e.Error.Messages) == 0 || !strings.HasSuffix(e.Error.Messages[0].MessageID, tc.id)) {
			t.Errorf("poolctl %v: messages %+v, want %s", tc.args, e.Error.Messages, tc.id)
		}
	}
}

// TestFirstHour: what an administrator meets first, each refusal naming
// its rule and what would work, host names in any case, the host detail
// view, resize both ways, freeing several chunks, and stranded capacity
// shown and freed.
func TestFirstHour(t *testing.T) {
	c := newCLI(t)
	c.ok(c.as("admin", "login"))

	for _, tc := range []struct {
		args []string
		code int
		want []string
	}{
		{[]string{"request", "3MiB", "--host", "Host3"}, exitUsage, []string{"multiples of 256 MiB", "use 256 MiB"}},
		{[]string{"request", "600GiB", "--host", "Host3"}, exitError, []string{"A chunk lies in one DC region",
			"The largest chunk that fits now is 524288 MiB (region 0)"}},
	} {
		r := c.run(tc.args...)
		for _, w := range tc.want {
			if r.code != tc.code || !strings.Contains(r.stderr, w) {
				t.Errorf("poolctl %v: exit %d, stderr %q; want exit %d mentioning %q", tc.args, r.code, r.stderr, tc.code, w)
			}
		}
	}
	c.ok(c.run("quota", "host3", "1GiB"))
	c.fails(c.run("request", "2GiB", "--host", "HOST3"), exitError, "Host3's quota (Oem.CxlPool.QuotaMiB of /redfish/v1/Systems/Host3) is 1024 MiB")
	c.ok(c.run("quota", "Host3", "none"))
	plain := decodeJSON[grantOut](t, c.ok(c.run("--json", "request", "1GiB", "--host", "Host1"))).Chunk // region 0: not sharable
	c.fails(c.run("share", plain, "--host", "host2"), exitError,
		"Memory chunk "+plain+" is not sharable (it is in region 0, which is not sharable): Host1 holds it")

	// resize: grow by one chunk, refuse a difference that is no block
	// multiple, shrink by whole chunks.
	r := c.ok(c.run("resize", "host3", "1GiB"))
	if !strings.Contains(r.stdout, "to Host3: 0 B → 1 GiB") {
		t.Errorf("resize up: %q", r.stdout)
	}
	c.ok(c.run("resize", "Host3", "1536MiB"))
	c.fails(c.run("resize", "Host3", "1600MiB"), exitUsage, "chunk sizes are multiples of 256 MiB")
	r = c.ok(c.run("resize", "Host3", "600MiB", "--dry-run"))
	if !strings.Contains(r.stdout, "Would release connection") || !strings.Contains(r.stdout, "from 1536 MiB to 512 MiB") {
		t.Errorf("resize --dry-run: %q", r.stdout)
	}
	ro := decodeJSON[resizeOut](t, c.ok(c.run("--json", "resize", "Host3", "600MiB")))
	if ro.ToBytes != 512<<20 || len(ro.Released) != 1 || len(ro.Freed) != 1 {
		t.Errorf("resize down --json: got %+v, want 512 MiB left, one connection released and its chunk freed", ro)
	}

	// hosts HostN: the detail view.
	d := decodeJSON[hostDetailOut](t, c.ok(c.run("hosts", "host3", "--json")))
	if d.System != "Host3" || d.GrantedBytes != 512<<20 || len(d.Connections) != 1 {
		t.Errorf("hosts host3 --json: got %+v", d)
	}
	if r := c.ok(c.run("hosts", "Host3")); !strings.Contains(r.stdout, "Host3 (/redfish/v1/Systems/Host3)") ||
		!strings.Contains(r.stdout, "512 MiB in 1 connection") {
		t.Errorf("hosts Host3:\n%s", r.stdout)
	}

	// free takes several chunks.
	var ids []string
	for range 2 {
		r := c.env.Admin.Post("/redfish/v1/Chassis/Pool/MemoryDomains/Pool/MemoryChunks", map[string]any{"MemoryChunkSizeMiB": 256})
		ids = append(ids, lastSegment(r.Header.Get("Location")))
	}
	r = c.ok(c.run("free", ids[0], ids[1]))
	for _, id := range ids {
		if !strings.Contains(r.stdout, "Freed chunk "+id+" (256 MiB).") {
			t.Errorf("free %v: %q", ids, r.stdout)
		}
	}

	// Stranded capacity: Host1 gives its chunk back on its own, the grant
	// is lost, and status, chunks and free --stranded deal with it.
	ctx := context.Background()
	n, _ := strconv.Atoi(plain)
	ch, err := c.env.App.Ledger.Chunk(ctx, dcd.ChunkID(n))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.env.App.Box.Host(1).Release(ctx, ch.Tag); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		st := decodeJSON[statusOut](t, c.ok(c.run("status", "--json")))
		if st.StrandedChunks == 1 {
			if st.StrandedBytes != 1<<30 || st.Health != "Warning" {
				t.Errorf("status --json with a stranded chunk: %+v", st)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no stranded chunk in status after 10 s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	gs, _ := c.env.App.Ledger.Grants(ctx, dcd.GrantFilter{Chunk: ch.ID})
	if !slices.ContainsFunc(gs, func(g dcd.Grant) bool { return g.State == dcd.GrantLost }) {
		t.Fatalf("grants of chunk %s: %+v, want one lost", plain, gs)
	}
	if r := c.ok(c.run("status")); !strings.Contains(r.stdout, "poolctl free --stranded") {
		t.Errorf("status does not show the stranded chunk:\n%s", r.stdout)
	}
	if r := c.ok(c.run("chunks")); !strings.Contains(r.stdout, "(stranded: grant lost)") {
		t.Errorf("chunks does not mark the stranded chunk:\n%s", r.stdout)
	}
	c.fails(c.run("free", plain, "--stranded"), exitUsage, "not both")
	if r := c.ok(c.run("free", "--stranded")); r.stdout != "Freed 1 stranded chunks (1 GiB): "+plain+".\n" {
		t.Errorf("free --stranded: %q", r.stdout)
	}
	if r := c.ok(c.run("free", "--stranded")); r.stdout != "No stranded chunks.\n" {
		t.Errorf("free --stranded again: %q", r.stdout)
	}
}
