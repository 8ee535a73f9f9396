package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"cxlpool/api/client"
	"cxlpool/host/agent"
)

// The end to end test with real processes: cxlpoold with its virtual
// box, heads 0 and 1 handed to two cxlhost agents, poolctl host verbs, and
// a separate program (this test binary run as a helper) that maps the
// path poolctl printed and writes or reads it.

const helperEnv = "CXLHOST_TEST_MAPPER"

// TestHelperMapper is the program: CXLHOST_TEST_MAPPER="write|read PATH
// OFFSET HEX" maps 4 KiB of PATH at OFFSET; write copies the bytes of HEX
// there, read prints the first len(HEX)/2 bytes in hex. Then it prints
// "ok" and keeps the mapping until its stdin closes.
func TestHelperMapper(t *testing.T) {
	spec := os.Getenv(helperEnv)
	if spec == "" {
		t.Skip("helper process only")
	}
	f := strings.Fields(spec)
	off, _ := strconv.ParseInt(f[2], 10, 64)
	want, _ := hexDecode(f[3])
	file, err := os.OpenFile(f[1], os.O_RDWR, 0)
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	mem, err := unix.Mmap(int(file.Fd()), off, 4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	_ = file.Close()
	switch f[0] {
	case "write":
		copy(mem, want)
		fmt.Println("ok")
	case "read":
		fmt.Printf("%x\nok\n", mem[:len(want)])
	}
	_, _ = io.Copy(io.Discard, os.Stdin)
	_ = unix.Munmap(mem)
	os.Exit(0)
}

func hexDecode(s string) ([]byte, error) {
	b := make([]byte, len(s)/2)
	for i := range b {
		v, err := strconv.ParseUint(s[2*i:2*i+2], 16, 8)
		if err != nil {
			return nil, err
		}
		b[i] = byte(v)
	}
	return b, nil
}

// mapper is a running helper program.
type mapper struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	out   string
}

func startMapper(t *testing.T, op string, at agent.Attachment, data []byte) *mapper {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperMapper$")
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s %s %d %x", helperEnv, op, at.Capacity.Path, at.Capacity.Extents[0].Offset, data))
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	m := &mapper{cmd: cmd, stdin: stdin}
	t.Cleanup(func() { m.stop() })
	sc := bufio.NewScanner(stdout)
	var lines []string
	for sc.Scan() {
		if l := sc.Text(); l == "ok" {
			m.out = strings.Join(lines, "\n")
			go func() { _, _ = io.Copy(io.Discard, stdout) }()
			return m
		} else {
			lines = append(lines, l)
		}
	}
	t.Fatalf("mapper %s: %s", op, strings.Join(lines, "\n"))
	return nil
}

func (m *mapper) stop() {
	if m.stdin != nil {
		_ = m.stdin.Close()
		_ = m.cmd.Wait()
		m.stdin = nil
	}
}

// daemon starts a binary and returns once a line of its output contains
// ready; the process is stopped at the end of the test.
func daemon(t *testing.T, env []string, ready string, bin string, args ...string) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	var errBuf bytes.Buffer
	cmd.Stderr = &errBuf
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	timeout := time.After(60 * time.Second)
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("%s exited before %q: %s", filepath.Base(bin), ready, errBuf.String())
			}
			if strings.Contains(l, ready) {
				go func() {
					for range lines {
					}
				}()
				return
			}
		case <-timeout:
			t.Fatalf("%s: no %q within 60 s: %s", filepath.Base(bin), ready, errBuf.String())
		}
	}
}

// poolctl runs bin/poolctl with args and returns stdout and the error.
func poolctl(bin string, args ...string) (string, error) {
	cmd := exec.Command(bin, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if err != nil {
		return out.String(), fmt.Errorf("poolctl %s: %w: %s", strings.Join(args, " "), err, errb.String())
	}
	return out.String(), nil
}

func TestEndToEndProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the daemon, two agents and poolctl")
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go tool to build the binaries")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	build := exec.Command(goBin, "build", "-o", bin+"/", "cxlpool/cmd/cxlpoold", "cxlpool/cmd/cxlhost", "cxlpool/cmd/poolctl")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	const adminPass = "Admin-password-e2e-1"
	h0, h1 := filepath.Join(dir, "h0.sock"), filepath.Join(dir, "h1.sock")
	daemon(t, []string{"CXLPOOL_ADMIN_PASSWORD=" + adminPass}, "Redfish API at", filepath.Join(bin, "cxlpoold"),
		"--device", "sim", "--data", filepath.Join(dir, "var"), "--listen", addr, "--http", "--sim-workload", "none",
		"--external-host", "0=unix:"+h0+",1=unix:"+h1, "--fleet-client-listen", "127.0.0.1:0", "--log-level", "warn")
	box := "http://" + addr
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	admin, err := client.New(client.Config{Server: box, User: "admin", Password: adminPass})
	if err != nil {
		t.Fatal(err)
	}
	const hostPass = "host-password-e2e-1"
	for i, sys := range []string{"Host0", "Host1"} {
		if _, err := admin.CreateAccount(ctx, client.NewAccount{UserName: "h" + strconv.Itoa(i), Password: hostPass, RoleID: "HostUser", SystemID: sys}); err != nil {
			t.Fatal(err)
		}
		if err := admin.AllowShare(ctx, sys, "kv", true); err != nil {
			t.Fatal(err)
		}
	}
	a0, a1 := filepath.Join(dir, "a0.sock"), filepath.Join(dir, "a1.sock")
	for i, hs := range []string{h0, h1} {
		daemon(t, []string{"CXLHOST_PASSWORD=" + hostPass}, "ready on", filepath.Join(bin, "cxlhost"),
			"--box", box, "--user", "h"+strconv.Itoa(i), "--device", "vbox:unix:"+hs, "--listen", []string{a0, a1}[i], "--log-level", "warn")
	}
	pc := filepath.Join(bin, "poolctl")
	attach := func(sock string) agent.Attachment {
		t.Helper()
		out, err := poolctl(pc, "--json", "host", "attach", "256MiB", "--shared", "kv", "--agent", sock)
		if err != nil {
			t.Fatal(err)
		}
		var at agent.Attachment
		if err := json.Unmarshal([]byte(out), &at); err != nil {
			t.Fatalf("attach output %q: %v", out, err)
		}
		return at
	}

	at0 := attach(a0)
	secret := []byte("written by a program on host 0")
	writer := startMapper(t, "write", at0, secret)
	at1 := attach(a1)
	if at1.Tag != at0.Tag {
		t.Fatalf("host 1 joined tag %s, host 0 holds %s", at1.Tag, at0.Tag)
	}
	reader := startMapper(t, "read", at1, secret)
	if want := fmt.Sprintf("%x", secret); reader.out != want {
		t.Errorf("a program on host 1 reads %s, want host 0's %s", reader.out, want)
	}
	reader.stop()

	// Host 0's program still maps the memory: detach is refused, and the
	// box hears it.
	if _, err := poolctl(pc, "host", "detach", at0.Tag, "--agent", a0); err == nil || !strings.Contains(err.Error(), "in use") {
		t.Fatalf("detach while a program maps it: %v, want refused: in use", err)
	}
	// The agent reports the refusal as it happens; the box shows it once
	// the report has arrived.
	for deadline := time.Now().Add(20 * time.Second); ; {
		out, err := poolctl(pc, "--server", box, "--user", "admin", "--password", adminPass, "hosts", "Host0")
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(out, "release refused: in use") && strings.Contains(out, "reporting (cxlhost") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("poolctl hosts Host0 does not show the refused release and the agent:\n%s", out)
		}
		time.Sleep(100 * time.Millisecond)
	}
	writer.stop()
	if out, err := poolctl(pc, "host", "detach", at0.Tag, "--wait", "--agent", a0); err != nil || !strings.Contains(out, "kept") {
		t.Fatalf("detach after the program exited: %q, %v; want detached, the share kept for host 1", out, err)
	}
	if out, err := poolctl(pc, "host", "detach", at1.Tag, "--agent", a1); err != nil || !strings.Contains(out, "freed") {
		t.Fatalf("host 1's detach (the last): %q, %v; want the share freed", out, err)
	}
	again := attach(a1)
	if again.Capacity.Extents[0].Offset != at0.Capacity.Extents[0].Offset {
		t.Fatalf("re-attached at %#x, not the old %#x: the zero check proves nothing", again.Capacity.Extents[0].Offset, at0.Capacity.Extents[0].Offset)
	}
	zero := startMapper(t, "read", again, secret)
	if want := fmt.Sprintf("%x", make([]byte, len(secret))); zero.out != want {
		t.Errorf("after release and re-attach a program reads %s, want zeros", zero.out)
	}
	zero.stop()
	if _, err := poolctl(pc, "host", "detach", again.Tag, "--agent", a1); err != nil {
		t.Fatal(err)
	}
}
