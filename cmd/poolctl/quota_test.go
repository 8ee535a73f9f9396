package main

import (
	"strings"
	"testing"
)

// TestQuota: an administrator sets, lowers below the holding and clears a
// host's quota; grants must fit under it, whoever asks; readers and host
// accounts may not change it.
func TestQuota(t *testing.T) {
	c := newCLI(t)
	c.ok(c.as("admin", "login"))

	r := c.ok(c.run("quota", "Host3", "2GiB"))
	c.golden("quota", r.stdout)
	hosts := decodeJSON[[]hostOut](t, c.ok(c.run("hosts", "--json")))
	if len(hosts) != 8 || hosts[3].System != "Host3" || hosts[3].QuotaBytes != 2<<30 || hosts[2].QuotaBytes != 0 {
		t.Errorf("hosts --json after quota Host3 2GiB: got %+v", hosts)
	}

	// Grants must fit: 1 GiB does, 2 GiB more does not (and its chunk is
	// freed again).
	c.ok(c.run("request", "1GiB", "--host", "Host3"))
	r = c.run("request", "2GiB", "--host", "3")
	c.fails(r, exitError, "CreateLimitReachedForResource")
	if !strings.Contains(r.stderr, "was freed again") {
		t.Errorf("refused request: stderr %q does not say the chunk was freed", r.stderr)
	}

	// Below what the host holds: accepted, with the service's note.
	q := decodeJSON[quotaOut](t, c.ok(c.run("--json", "quota", "Host3", "512MiB")))
	if q.System != "Host3" || q.QuotaBytes != 512<<20 || q.GrantedBytes != 1<<30 ||
		!strings.Contains(q.Note, "1024 MiB, more than its new quota of 512 MiB") {
		t.Errorf("quota --json below the holding: got %+v", q)
	}
	r = c.ok(c.run("quota", "/redfish/v1/Systems/Host3", "512MiB"))
	if !strings.Contains(r.stderr, "poolctl: note: Host3 holds") {
		t.Errorf("quota below the holding: stderr %q, want the service's note", r.stderr)
	}
	c.fails(c.run("request", "256MiB", "--host", "Host3"), exitError, "CreateLimitReachedForResource")

	// Cleared: grants pass again.
	for _, none := range []string{"none", "0"} {
		q = decodeJSON[quotaOut](t, c.ok(c.run("quota", "Host3", none, "--json")))
		if q.QuotaBytes != 0 || q.Note != "" {
			t.Errorf("quota Host3 %s --json: got %+v, want no quota and no note", none, q)
		}
	}
	if r := c.ok(c.run("quota", "Host3", "NONE")); r.stdout != "Host3 has no quota now (holds 1 GiB).\n" {
		t.Errorf("quota Host3 NONE: got %q", r.stdout)
	}
	c.ok(c.run("request", "2GiB", "--host", "Host3"))

	// Who may not.
	c.fails(c.as("reader", "quota", "Host3", "1GiB"), exitError, "InsufficientPrivilege")
	c.fails(c.as("host0", "quota", "Host0", "1GiB"), exitError, "InsufficientPrivilege")
	c.fails(c.as("host0", "quota", "Host1", "1GiB"), exitError, "ResourceNotFound")
	c.fails(c.as("admin", "quota", "Host9", "1GiB"), exitError, "ResourceNotFound")
	c.fails(c.as("admin", "quota", "Host3", "2TiB"), exitError, "PropertyValueOutOfRange")
}

func TestQuotaUsage(t *testing.T) {
	c := newCLI(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"quota"}, "missing argument"},
		{[]string{"quota", "Host3"}, "missing argument"},
		{[]string{"quota", "Host3", "1GiB", "2GiB"}, "unexpected argument"},
		{[]string{"quota", "Host3", "lots"}, `size "lots"`},
		{[]string{"quota", "Host3", "64GB"}, "unknown unit"},
		{[]string{"quota", "Host3", "1000"}, "whole number of MiB"},
		{[]string{"quota", "Host/3", "1GiB"}, "not a host"},
	} {
		c.fails(c.as("admin", tc.args...), exitUsage, tc.want)
	}
}
