package main

import (
	"bufio"
	"context"
	"encoding/binary"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"cxlpool/fabric/cci"
	"cxlpool/fabric/mctp"
	"cxlpool/fabric/serial"
	"cxlpool/host"
	"cxlpool/host/vbox"
	"cxlpool/sim"
)

func TestHostPolicyFlag(t *testing.T) {
	p := policyValue{}
	for _, v := range []string{"3=reject,4=never", "5=part:2@10ms", "6=accept"} {
		if err := p.Set(v); err != nil {
			t.Fatal(err)
		}
	}
	want := policyValue{
		3: {Mode: sim.Reject},
		4: {Mode: sim.NeverAnswer},
		5: {Mode: sim.AcceptPart, AcceptN: 2, Delay: 10 * time.Millisecond},
		6: {Mode: sim.AcceptAll},
	}
	if diff := cmp.Diff(want, p); diff != "" {
		t.Errorf("policies (-want +got):\n%s", diff)
	}
	for _, bad := range []string{"3", "x=reject", "-1=reject", "3=maybe", "3=part:0", "3=part:x", "3=reject:1", "3=accept@soon", "3=accept@-1s"} {
		if err := (policyValue{}).Set(bad); err == nil {
			t.Errorf("Set(%q) succeeded", bad)
		}
	}
	if got := (policyValue{5: {Mode: sim.AcceptPart, AcceptN: 1}}).String(); got != "5=part" {
		t.Errorf("String() = %q", got)
	}
}

func TestRunErrors(t *testing.T) {
	tests := [][]string{
		{},
		{"--listen", "tcp://127.0.0.1:0", "--capacity", "1XB"},
		{"--listen", "tcp://127.0.0.1:0", "--heads", "2", "--host-policy", "5=reject"},
		{"--listen", "tcp://127.0.0.1:0", "--heads", "0"},
		{"--listen", "tcp://127.0.0.1:0", "--serial", "zz"},
		{"--listen", "tcp://127.0.0.1:0", "--eid", "300"},
		{"--listen", "tcp://127.0.0.1:0", "--log-level", "loud"},
		{"--listen", "ftp://x"},
		{"--listen", "tcp://127.0.0.1:0", "extra"},
		{"--nope"},
	}
	for _, args := range tests {
		if err := run(context.Background(), args, io.Discard); err == nil {
			t.Errorf("run(%q) succeeded", args)
		}
	}
}

func TestRunServes(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"--listen", "tcp://127.0.0.1:0", "--heads", "4", "--capacity", "64GiB",
			"--block-size", "512MiB", "--serial", "0x42", "--host-policy", "1=reject", "--log-level", "error"}, pw)
		pw.Close()
	}()
	line, err := bufio.NewReader(pr).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	addr, ok := strings.CutPrefix(strings.TrimSpace(line), "cxlsim listening on ")
	if !ok || !strings.HasPrefix(addr, "tcp://127.0.0.1:") || strings.HasSuffix(addr, ":0") {
		t.Fatalf("banner %q: want the real tcp address", line)
	}
	rw, err := serial.Dial(ctx, addr)
	if err != nil {
		t.Fatal(err)
	}
	ep := mctp.NewEndpoint(serial.NewLink(rw, serial.LinkConfig{}), mctp.Config{EID: 9}, nil)
	go func() { _ = ep.Run(ctx) }()
	req, _ := cci.Message{Category: cci.Request, Tag: 1, Opcode: cci.OpIdentify}.MarshalBinary()
	rctx, rcancel := context.WithTimeout(ctx, 10*time.Second)
	defer rcancel()
	out, err := ep.Request(rctx, 8, mctp.MsgTypeCXLCCI, req)
	if err != nil {
		t.Fatal(err)
	}
	m, err := cci.ParseMessage(out)
	if err != nil || m.ReturnCode != cci.Success || binary.LittleEndian.Uint64(m.Payload[8:]) != 0x42 {
		t.Fatalf("identify = %+v, %v; want serial 0x42", m, err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("run: %v", err)
	}
}

func TestExternalHostFlag(t *testing.T) {
	for _, args := range [][]string{
		{"--listen", "tcp://127.0.0.1:0", "--heads", "2", "--external-host", "5=unix:" + filepath.Join(t.TempDir(), "h5.sock")},
		{"--listen", "tcp://127.0.0.1:0", "--external-host", "1=tcp://127.0.0.1:0"},
		{"--listen", "tcp://127.0.0.1:0", "--external-host", "x=unix:/tmp/s"},
	} {
		if err := run(t.Context(), args, io.Discard); err == nil {
			t.Errorf("run(%q) succeeded", args)
		}
	}
	ctx, cancel := context.WithCancel(t.Context())
	pr, pw := io.Pipe()
	sock := filepath.Join(t.TempDir(), "h1.sock")
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"--listen", "tcp://127.0.0.1:0", "--heads", "4", "--capacity", "64GiB",
			"--serial", "0x42", "--external-host", "1=unix:" + sock, "--log-level", "error"}, pw)
		pw.Close()
	}()
	r := bufio.NewReader(pr)
	line, err := r.ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	if want := "cxlsim head 1 external host on unix:" + sock + "\n"; line != want {
		t.Fatalf("banner %q, want %q", line, want)
	}
	go func() { _, _ = io.Copy(io.Discard, r) }()
	if fi, err := os.Stat(sock); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("external host socket: %v, %v; want mode 0600 (it hands out the memory)", fi, err)
	}
	dctx, dcancel := context.WithTimeout(ctx, 10*time.Second)
	defer dcancel()
	b, err := vbox.Dial(dctx, "unix:"+sock, vbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	id, err := b.Identity(dctx)
	if err != nil {
		t.Fatal(err)
	}
	if want := (host.Identity{Serial: 0x42, LD: 1}); id != want {
		t.Errorf("Identity() = %+v, want %+v", id, want)
	}
	_ = b.Close()
	cancel()
	if err := <-done; err != nil {
		t.Errorf("run: %v", err)
	}
}
