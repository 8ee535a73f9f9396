package main

import (
	"strings"
	"testing"
)

// TestKV: an administrator creates a namespace on two hosts (the tokens
// shown once), lists, joins a third host, resizes and deletes it; readers
// may look but not change.
func TestKV(t *testing.T) {
	c := newCLI(t)
	c.ok(c.as("admin", "login"))
	r := c.ok(c.run("kv", "create", "llama", "--hosts", "Host0,Host1", "--chunk", "256MiB", "--quota", "1GiB"))
	if !strings.Contains(r.stdout, "Created namespace llama.") || strings.Count(r.stdout, "token Host") != 2 {
		t.Errorf("create: %q", r.stdout)
	}
	list := decodeJSON[[]kvOut](t, c.ok(c.run("kv", "--json")))
	if len(list) != 1 || list[0].Name != "llama" || list[0].CapacityBytes != 256<<20 || len(list[0].Hosts) != 2 || list[0].Tokens != nil {
		t.Errorf("kv --json: %+v", list)
	}
	j := decodeJSON[kvOut](t, c.ok(c.run("--json", "kv", "join", "llama", "Host2")))
	if len(j.Hosts) != 3 || len(j.Tokens) != 1 || len(j.Tokens["Host2"]) != 64 {
		t.Errorf("join --json: %+v", j)
	}
	c.ok(c.run("kv", "leave", "llama", "Host2"))
	c.ok(c.run("kv", "resize", "llama", "512MiB"))
	if s := decodeJSON[kvOut](t, c.ok(c.run("--json", "kv", "show", "llama"))); s.QuotaBytes != 512<<20 || len(s.Hosts) != 2 {
		t.Errorf("show after resize: %+v", s)
	}
	c.fails(c.as("reader", "kv", "delete", "llama"), exitError, "InsufficientPrivilege")
	c.ok(c.as("reader", "kv", "list"))
	c.fails(c.run("kv", "create", "llama", "--hosts", "Host0"), exitError, "ResourceAlreadyExists")
	c.fails(c.run("kv", "create", "x"), exitUsage, "--hosts is required")
	c.ok(c.run("kv", "delete", "llama"))
	c.fails(c.run("kv", "show", "llama"), exitError, "ResourceNotFound")
}

// TestKVExport: an administrator exports a namespace to a rack (the
// token shown once, an export per chunk), show lists the exports without
// the token, unexport revokes them; a reader may not export.
func TestKVExport(t *testing.T) {
	c := newCLI(t)
	c.ok(c.as("admin", "login"))
	c.ok(c.run("kv", "create", "llama", "--hosts", "Host0", "--chunk", "256MiB"))
	r := c.ok(c.run("kv", "export", "llama", "--client", "rack-7"))
	if !strings.Contains(r.stdout, "Exported to rack-7: namespace llama.") || !strings.Contains(r.stdout, "rack token: ") {
		t.Errorf("export: %q", r.stdout)
	}
	s := decodeJSON[kvOut](t, c.ok(c.run("--json", "kv", "show", "llama")))
	if s.Remote == nil || s.Remote.Client != "rack-7" || len(s.Remote.Exports) != 1 || s.Remote.Token != "" {
		t.Errorf("show after export: %+v", s.Remote)
	}
	c.fails(c.as("reader", "kv", "export", "llama", "--client", "rack-8"), exitError, "InsufficientPrivilege")
	c.fails(c.run("kv", "export", "llama"), exitUsage, "--client RACK is required")
	c.ok(c.run("kv", "unexport", "llama"))
	if s := decodeJSON[kvOut](t, c.ok(c.run("--json", "kv", "show", "llama"))); s.Remote != nil {
		t.Errorf("show after unexport: %+v", s.Remote)
	}
}
