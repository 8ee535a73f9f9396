package main

import (
	"context"
	"encoding/json"
	"net"
	"path/filepath"
	"strings"
	"testing"

	"cxlpool/api/apitest"
	"cxlpool/api/client"
	"cxlpool/host/agent"
	"cxlpool/host/vbox"
)

// hostAgent hands head 0 of the CLI's box to an external host, runs an
// agent for it as host0 and returns its local socket.
func (c *cli) hostAgent() string {
	t := c.t
	box := c.env.App.Box
	if err := box.SetExternal(0); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	hostSock, apiSock := filepath.Join(dir, "h0.sock"), filepath.Join(dir, "cxlhost.sock")
	hl, err := net.ListenUnix("unix", &net.UnixAddr{Name: hostSock, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	boxDone, agentDone := make(chan struct{}), make(chan struct{})
	go func() { defer close(boxDone); _ = box.ServeHostListener(ctx, 0, hl) }()
	be, err := vbox.Dial(t.Context(), "unix:"+hostSock, vbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	bc, err := client.New(client.Config{Server: c.server, User: apitest.UserHost0, Password: apitest.UserPassword})
	if err != nil {
		t.Fatal(err)
	}
	a, err := agent.New(t.Context(), agent.Config{Backend: be, Box: bc})
	if err != nil {
		t.Fatal(err)
	}
	l, err := agent.Listen(apiSock)
	if err != nil {
		t.Fatal(err)
	}
	go func() { defer close(agentDone); _ = a.Serve(ctx, l) }()
	t.Cleanup(func() {
		cancel()
		<-agentDone
		_ = be.Close()
		<-boxDone
	})
	return apiSock
}

func TestHostVerbs(t *testing.T) {
	c := newCLI(t)
	sock := c.hostAgent()
	r := c.ok(c.run("host", "attach", "256MiB", "--name", "kv", "--agent", sock))
	for _, want := range []string{"Attached 256 MiB to Host0 as tag ", "CXLPOOL_DAX_PATH=/proc/", "CXLPOOL_DAX_SIZE=268435456", "CXLPOOL_DAX_OFFSET=", "Simulator:"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("attach output lacks %q:\n%s", want, r.stdout)
		}
	}
	t.Setenv("CXLHOST_SOCKET", sock)
	var list []agent.Attachment
	if err := json.Unmarshal([]byte(c.ok(c.run("--json", "host", "list")).stdout), &list); err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || list[0].Name != "kv" || list[0].Capacity.Size != 256<<20 {
		t.Fatalf("host list = %+v, want the kv attachment", list)
	}
	if r := c.ok(c.run("host", "list")); !strings.Contains(r.stdout, list[0].Tag) || !strings.Contains(r.stdout, "online") {
		t.Errorf("host list table:\n%s", r.stdout)
	}
	if r := c.ok(c.run("host", "detach", list[0].Tag)); !strings.Contains(r.stdout, "freed") {
		t.Errorf("detach output %q, want the chunk freed", r.stdout)
	}
	c.fails(c.run("host", "detach", list[0].Tag), exitError, "no attachment with that tag")
	c.fails(c.run("host", "attach", "1000"), exitUsage, "whole number of MiB")
	c.fails(c.run("host", "bogus"), exitUsage, "unknown subcommand")
	c.fails(c.run("host", "list", "--agent", filepath.Join(t.TempDir(), "none.sock")), exitError, "host agent (cxlhost) is not reachable")
}
