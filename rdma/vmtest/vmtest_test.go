// Package vmtest runs the verbs transport (rdma/verbs) for real: one QEMU
// guest (TCG) booting Debian's kernel (the box image's) with a small
// initramfs: ./guest as init, soft-RoCE (rdma_rxe and what it needs, veth),
// rdma-core's libibverbs with the rxe provider and its driver file, and the
// verbs package's and the appliance's test binaries built with the verbs
// tag. The guest makes a veth pair with an rxe device on each end and
// runs the tests with the
// server on one end and the client on the other (see guest's comment for
// why both ends share a network namespace). The host side reads the
// console: the tests' verdicts, the measured figures, the bytes that
// crossed the link.
//
// Only with CXLPOOL_VMTEST=1 (make vmtest-rdma; CXLPOOL_VMTEST_CONSOLE=FILE
// copies the guest's console there as it runs); it needs
// qemu-system-x86_64, xz, gcc, libibverbs-dev and ibverbs-providers, and
// /boot/vmlinuz-* with its /lib/modules.
package vmtest

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"cxlpool/internal/vmkit"
)

// resultPrefix starts the guest's last console line (guest.ResultPrefix).
const resultPrefix = "CXLPOOL-RDMAVM-RESULT "

// wanted are the modules the guest loads, with their dependencies from
// modules.dep. rdma_rxe asks the crypto API for "crc32" (its ICRC) at
// device creation, which modules.dep does not say: without crc32_generic
// "rdma link add" fails with ENOENT ("failed to init crc32 algorithm").
var wanted = []string{"kernel/crypto/crc32_generic.ko", "kernel/drivers/infiniband/sw/rxe/rdma_rxe.ko", "kernel/drivers/net/veth.ko"}

// provider is rdma-core's soft-RoCE provider, which libibverbs dlopens
// (ldd does not name it) after reading /etc/libibverbs.d/rxe.driver.
const (
	provider   = "/usr/lib/x86_64-linux-gnu/libibverbs/librxe-rdmav34.so"
	driverFile = "/etc/libibverbs.d/rxe.driver"
)

func TestVerbsVM(t *testing.T) {
	if os.Getenv("CXLPOOL_VMTEST") != "1" {
		t.Skip("set CXLPOOL_VMTEST=1 (make vmtest-rdma) to boot the QEMU guest")
	}
	for _, tool := range []string{"qemu-system-x86_64", "xz", "ldd", "gcc"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s: %v (apt-get install qemu-system-x86 xz-utils gcc)", tool, err)
		}
	}
	for _, f := range []string{provider, driverFile, "/usr/include/infiniband/verbs.h"} {
		if _, err := os.Stat(f); err != nil {
			t.Fatalf("%v (apt-get install libibverbs-dev ibverbs-providers)", err)
		}
	}
	bz, kver, err := vmkit.NewestKernel()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()

	vmlinux := filepath.Join(dir, "vmlinux")
	if err := vmkit.Extract(bz, vmlinux); err != nil {
		t.Fatal(err)
	}
	initBin := filepath.Join(dir, "init")
	goBuild(t, []string{"CGO_ENABLED=0"}, "build", "-o", initBin, "./guest")
	testBin := filepath.Join(dir, "verbs.test")
	goBuild(t, []string{"CGO_ENABLED=1"}, "test", "-c", "-tags", "verbs", "-o", testBin, "../verbs")
	appBin := filepath.Join(dir, "appliance.test")
	goBuild(t, []string{"CGO_ENABLED=1"}, "test", "-c", "-tags", "verbs", "-o", appBin, "../../appliance")

	files := map[string]string{"init": initBin, "verbs.test": testBin, "appliance.test": appBin,
		strings.TrimPrefix(provider, "/"): provider, strings.TrimPrefix(driverFile, "/"): driverFile}
	for _, bin := range []string{testBin, appBin, provider} {
		libs, err := vmkit.SharedLibs(bin)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range libs {
			files[strings.TrimPrefix(l, "/")] = l
		}
	}
	modDir := "/lib/modules/" + kver
	mods, err := moduleOrder(filepath.Join(modDir, "modules.dep"), wanted)
	if err != nil {
		t.Fatal(err)
	}
	initrd := filepath.Join(dir, "initrd.cpio")
	if err := makeInitramfs(initrd, files, modDir, mods); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(initrd); err == nil {
		t.Logf("initramfs %.1f MB uncompressed: %d files, modules %v", float64(fi.Size())/1e6, len(files), mods)
	}

	ctx, cancel := context.WithTimeout(t.Context(), 12*time.Minute)
	defer cancel()
	var console bytes.Buffer
	q := exec.CommandContext(ctx, "qemu-system-x86_64",
		"-M", "q35", "-accel", "tcg", "-cpu", "qemu64,+rdrand", "-smp", "2", "-m", "1G",
		"-display", "none", "-serial", "stdio", "-monitor", "none", "-nic", "none", "-no-reboot",
		"-kernel", vmlinux, "-initrd", initrd, "-append", "console=ttyS0 panic=-1 quiet")
	q.Stdout, q.Stderr = &console, &console
	if path := os.Getenv("CXLPOOL_VMTEST_CONSOLE"); path != "" { // to follow a slow run
		f, err := os.Create(path)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		w := io.MultiWriter(&console, f)
		q.Stdout, q.Stderr = w, w
	}
	start := time.Now()
	qerr := q.Run()
	out := console.String()
	t.Logf("guest ran %v (kernel %s)", time.Since(start).Round(time.Second), kver)
	i := strings.LastIndex(out, resultPrefix)
	if i < 0 {
		t.Fatalf("no result from the guest (qemu: %v); console:\n%s", qerr, tail(out, 12000))
	}
	verdict, _, _ := strings.Cut(out[i+len(resultPrefix):], "\n")
	verdict = strings.TrimSpace(verdict)
	// The guest's own lines and the tests' verdicts and figures.
	sc := bufio.NewScanner(strings.NewReader(out))
	var passed, failed, skipped []string
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case strings.HasPrefix(line, "rdmavm:"), strings.Contains(line, "figure:"):
			t.Log(line)
		case strings.HasPrefix(line, "--- PASS"):
			passed = append(passed, line)
		case strings.HasPrefix(line, "--- FAIL"):
			failed = append(failed, line)
		case strings.HasPrefix(line, "--- SKIP"):
			skipped = append(skipped, line)
		}
	}
	t.Logf("guest tests: %d passed, %d skipped, %d failed", len(passed), len(skipped), len(failed))
	if verdict != "ok" || len(failed) > 0 || len(skipped) > 0 {
		t.Fatalf("guest: %s; failed %v; skipped %v\nconsole:\n%s", verdict, failed, skipped, tail(out, 16000))
	}
	if len(passed) == 0 {
		t.Fatalf("no test ran in the guest; console:\n%s", tail(out, 8000))
	}
}

func goBuild(t *testing.T, env []string, args ...string) {
	t.Helper()
	cmd := exec.Command("go", args...)
	cmd.Env = append(append(os.Environ(), "GOOS=linux", "GOARCH=amd64"), env...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go %v: %v\n%s", args, err, out)
	}
}

// moduleOrder returns want and their dependencies (modules.dep paths),
// each once, every module after what it needs.
func moduleOrder(depFile string, want []string) ([]string, error) {
	b, err := os.ReadFile(depFile)
	if err != nil {
		return nil, err
	}
	deps := map[string][]string{}
	for line := range strings.Lines(string(b)) {
		mod, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok {
			deps[mod] = strings.Fields(rest)
		}
	}
	var order []string
	seen := map[string]bool{}
	var visit func(m string) error
	visit = func(m string) error {
		if seen[m] {
			return nil
		}
		seen[m] = true
		d, ok := deps[m]
		if !ok {
			return fmt.Errorf("%s: %s is not a module of this kernel", depFile, m)
		}
		// modules.dep lists every dependency, nearest first: load from
		// the far end.
		for _, x := range slices.Backward(d) {
			if err := visit(x); err != nil {
				return err
			}
		}
		order = append(order, m)
		return nil
	}
	for _, m := range want {
		if err := visit(m); err != nil {
			return nil, err
		}
	}
	return order, nil
}

// makeInitramfs writes a newc cpio: files (archive path → host path), the
// modules under /lib/modules and their load order.
func makeInitramfs(out string, files map[string]string, modDir string, mods []string) error {
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	defer f.Close()
	w := vmkit.NewCPIO(f)
	for _, name := range slices.Sorted(maps.Keys(files)) {
		data, err := os.ReadFile(files[name])
		if err != nil {
			return err
		}
		w.File(name, 0o755, data)
	}
	if err := w.Modules(modDir, mods); err != nil {
		return err
	}
	if err := w.Close(); err != nil {
		return err
	}
	return f.Close()
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}
