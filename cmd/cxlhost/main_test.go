package main

import (
	"bufio"
	"context"
	"io"
	"net"
	"path/filepath"
	"strings"
	"testing"

	"cxlpool/api/apitest"
	"cxlpool/host/agent"
)

func TestRunErrors(t *testing.T) {
	t.Setenv("CXLHOST_PASSWORD", "")
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"--device", "vbox:unix:/x"}, "--user is required"},
		{[]string{"--user", "h3", "--device", "vbox:unix:/x"}, "no password"},
		{[]string{"--user", "h3", "--password-file", "/nonexistent", "--device", "vbox:unix:/x"}, "--password-file"},
		{[]string{"--log-level", "loud"}, "--log-level"},
		{[]string{"extra"}, "unexpected arguments"},
	}
	for _, tt := range tests {
		err := run(t.Context(), tt.args, io.Discard)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("run(%q) = %v, want an error containing %q", tt.args, err, tt.want)
		}
	}
	t.Setenv("CXLHOST_PASSWORD", "x")
	for _, dev := range []string{"", "/dev/dax0.0", "vbox:tcp://127.0.0.1:1"} {
		if err := run(t.Context(), []string{"--user", "h3", "--device", dev}, io.Discard); err == nil || !strings.Contains(err.Error(), "vbox:unix:PATH") {
			t.Errorf("--device %q: %v, want the backend named", dev, err)
		}
	}
}

func TestRunServes(t *testing.T) {
	env := apitest.NewServer(t)
	box := env.App.Box
	if err := box.SetExternal(0); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	hostSock, apiSock := filepath.Join(dir, "h0.sock"), filepath.Join(dir, "cxlhost.sock")
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: hostSock, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go func() { _ = box.ServeHostListener(ctx, 0, l) }()
	t.Setenv("CXLHOST_PASSWORD", apitest.UserPassword)
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"--box", env.HTTP.URL, "--user", apitest.UserHost0, "--device", "vbox:unix:" + hostSock,
			"--listen", apiSock, "--log-level", "error"}, pw)
		pw.Close()
	}()
	line, err := bufio.NewReader(pr).ReadString('\n')
	if err != nil {
		t.Fatalf("no banner: %v (run: %v)", err, <-done)
	}
	if want := "cxlhost: Host0 (01-23-45-67-89-AB-CD-EF:0000) ready on unix:" + apiSock + "\n"; line != want {
		t.Errorf("banner %q, want %q", line, want)
	}
	list, err := agent.NewLocalClient(apiSock).List(t.Context())
	if err != nil || len(list) != 0 {
		t.Errorf("List() = %+v, %v; want nothing", list, err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("run: %v", err)
	}
}
