//go:build linux

// Command guest is the init (PID 1) of the host VM test's initramfs: in a
// QEMU guest with an emulated CXL Type-3 device it loads the CXL, nvdimm
// and DAX modules, then drives host/linux for real: static capacity
// attached and mapped, written and read through /dev/daxX.Y, onlined as
// system-ram (a new NUMA node) and back, release refused while this
// program or another process maps it, released after unmapping, and
// re-attached capacity reading zero. It prints one result line (JSON,
// with the timings) on the console and powers the guest off.
//
// Run as "guest hold PATH SIZE" it is the other process: it maps PATH,
// prints "held", and keeps the mapping until its stdin closes.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"cxlpool/host"
	"cxlpool/host/linux"
	"cxlpool/host/linux/vmtest"
	"cxlpool/internal/vmkit"
)

const (
	regionSize = 256 << 20
	// rounds of attach → map → write → release; the first with the
	// default backend (zeroes at release), the others with KeepContents
	// so that their release→gone is the teardown alone: under TCG every
	// access to emulated CXL memory is trapped, and zeroing 250 MiB
	// takes about a minute.
	rounds = 5
	stride = 1 << 20 // the pattern touches one byte per MiB
)

func main() {
	if len(os.Args) == 4 && os.Args[1] == "hold" {
		if err := hold(os.Args[2], os.Args[3]); err != nil {
			fmt.Fprintln(os.Stderr, "hold:", err)
			os.Exit(1)
		}
		return
	}
	var res vmtest.Result
	if err := run(&res); err != nil {
		res.Error = err.Error()
		debugDump()
	}
	b, _ := json.Marshal(res)
	fmt.Printf("\n%s%s\n", vmtest.ResultPrefix, b)
	unix.Sync()
	_ = unix.Reboot(unix.LINUX_REBOOT_CMD_POWER_OFF)
	select {}
}

func step(r *vmtest.Result, format string, a ...any) {
	s := fmt.Sprintf(format, a...)
	r.Steps = append(r.Steps, s)
	fmt.Println("hostvm:", s)
}

func run(res *vmtest.Result) error {
	for _, m := range []struct{ src, dir, fs string }{
		{"proc", "/proc", "proc"}, {"sysfs", "/sys", "sysfs"}, {"devtmpfs", "/dev", "devtmpfs"},
	} {
		_ = os.MkdirAll(m.dir, 0o755)
		if err := unix.Mount(m.src, m.dir, m.fs, 0, ""); err != nil && !errors.Is(err, unix.EBUSY) {
			return fmt.Errorf("mount %s: %w", m.dir, err)
		}
	}
	var uts unix.Utsname
	_ = unix.Uname(&uts)
	res.Kernel = unix.ByteSliceToString(uts.Release[:])
	if err := vmkit.LoadModules("/modules.order"); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	// The port topology (root, host bridge, endpoint) enumerates
	// asynchronously after the modules load.
	wctx, wcancel := context.WithTimeout(ctx, time.Minute)
	err := waitFor(wctx, func() bool {
		m, _ := filepath.Glob("/sys/bus/cxl/devices/endpoint*/uport")
		return len(m) > 0
	})
	wcancel()
	if err != nil {
		m, _ := filepath.Glob("/sys/bus/cxl/devices/*")
		return fmt.Errorf("no CXL endpoint port (/sys/bus/cxl/devices: %v): %w", m, err)
	}
	log := slog.New(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{Level: slog.LevelInfo}))
	zeroing, err := linux.New(linux.Config{LD: 0, Logger: log})
	if err != nil {
		return err
	}
	keeping, err := linux.New(linux.Config{LD: 0, Logger: log, KeepContents: true})
	if err != nil {
		return err
	}
	b := zeroing
	id, err := b.Identity(ctx)
	if err != nil {
		return err
	}
	res.Serial = fmt.Sprintf("%#x", id.Serial)
	step(res, "memory device serial %s (LD %d from the configuration)", res.Serial, id.LD)

	for i := range rounds {
		if i > 0 {
			b = keeping
		}
		tag := fmt.Sprintf("6a1f0000-0000-4000-8000-%012x", i+1)
		t0 := time.Now()
		c, err := b.Attach(ctx, tag, regionSize, linux.DevDAX)
		if err != nil {
			return fmt.Errorf("round %d: attach: %w", i, err)
		}
		m, err := b.Map(ctx, tag)
		if err != nil {
			return fmt.Errorf("round %d: map: %w", i, err)
		}
		res.Attach = append(res.Attach, time.Since(t0).Microseconds())
		res.Dax, res.Size = c.Path, c.Size
		mem := m.Bytes()
		switch {
		case i == 1:
			// Round 0 wrote a pattern over the same device memory and
			// the default backend zeroed it at release.
			for off := 0; off < len(mem); off += stride {
				if mem[off] != 0 {
					return fmt.Errorf("round %d: re-attached memory at %d reads %#x, want zeros", i, off, mem[off])
				}
			}
			step(res, "round 1: memory zeroed at round 0's release reads zero")
		case i == 2:
			// The control: round 1 released with KeepContents, and its
			// bytes are still there (the device is persistent memory),
			// which is why zeroing is the default.
			if err := check(mem, byte(i)); err != nil {
				return fmt.Errorf("round 2: without zeroing the previous round's bytes should remain: %w", err)
			}
			step(res, "round 2: without zeroing, round 1's bytes are still there (the control)")
		}
		pattern(mem, byte(i+1))
		// A second mapping reads what the first wrote: both are the device.
		m2, err := b.Map(ctx, tag)
		if err != nil {
			return err
		}
		if err := check(m2.Bytes(), byte(i+1)); err != nil {
			return fmt.Errorf("round %d: %w", i, err)
		}
		_ = m2.Close()
		step(res, "round %d: %s (%d bytes) attached, mapped, written and read back in %v", i, c.Path, c.Size, time.Since(t0).Round(time.Millisecond))

		if err := b.Release(ctx, tag, false); !errors.Is(err, host.ErrBusy) {
			return fmt.Errorf("round %d: release while mapped = %v, want ErrBusy", i, err)
		} else if i == 0 {
			res.BusySelf = err.Error()
		}
		if err := m.Close(); err != nil {
			return err
		}
		if i == 0 {
			if err := peerBusy(ctx, b, tag, c, res); err != nil {
				return err
			}
			if err := systemRAM(ctx, b, tag, res); err != nil {
				return err
			}
		}
		t1 := time.Now()
		if err := b.Release(ctx, tag, false); err != nil {
			return fmt.Errorf("round %d: release after unmap: %w", i, err)
		}
		if err := b.WaitGone(ctx, tag); err != nil {
			return fmt.Errorf("round %d: wait gone: %w", i, err)
		}
		took := time.Since(t1)
		if i == 0 {
			res.Zeroed = append(res.Zeroed, took.Microseconds())
		} else {
			res.Release = append(res.Release, took.Microseconds())
		}
		if _, err := os.Stat(c.Path); err == nil {
			return fmt.Errorf("round %d: %s still exists after release", i, c.Path)
		}
		if m, _ := filepath.Glob("/sys/bus/cxl/devices/region*/commit"); len(m) > 0 {
			for _, p := range m {
				if v, _ := os.ReadFile(p); strings.TrimSpace(string(v)) == "1" {
					return fmt.Errorf("round %d: %s still committed after release", i, p)
				}
			}
		}
		step(res, "round %d: released and torn down in %v (zeroed first: %v)", i, took.Round(time.Millisecond), i == 0)
	}
	if r, _ := os.ReadFile("/sys/bus/cxl/devices/mem0/pmem/size"); len(r) > 0 {
		res.Region = "pmem (kernel " + res.Kernel + ": no ram regions)"
	}
	return nil
}

// peerBusy maps the device from another process and checks that release
// is refused naming it, then ends that process.
func peerBusy(ctx context.Context, b *linux.Backend, tag string, c host.Capacity, res *vmtest.Result) error {
	cmd := exec.CommandContext(ctx, "/init", "hold", c.Path, strconv.FormatUint(c.Size, 10))
	in, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return err
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || strings.TrimSpace(line) != "held" {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return fmt.Errorf("holder: %q %v", line, err)
	}
	err = b.Release(ctx, tag, false)
	_ = in.Close()
	werr := cmd.Wait()
	if !errors.Is(err, host.ErrBusy) {
		return fmt.Errorf("release while another process maps it = %v, want ErrBusy", err)
	}
	if werr != nil {
		return fmt.Errorf("holder: %w", werr)
	}
	res.BusyPeer = err.Error()
	step(res, "release refused while process %d mapped %s: %v", cmd.Process.Pid, c.Path, err)
	return nil
}

// systemRAM onlines the tag as system-ram, checks the new NUMA node has
// its memory, and goes back to devdax.
func systemRAM(ctx context.Context, b *linux.Backend, tag string, res *vmtest.Result) error {
	before, _ := filepath.Glob("/sys/devices/system/node/node[0-9]*")
	t0 := time.Now()
	if err := b.SetMode(ctx, tag, linux.SystemRAM); err != nil {
		return fmt.Errorf("system-ram: %w", err)
	}
	node, err := b.Node(tag)
	if err != nil {
		return err
	}
	res.Node = node
	mib, err := nodeMemMiB(node)
	if err != nil {
		return err
	}
	res.NodeMiB = mib
	after, _ := filepath.Glob("/sys/devices/system/node/node[0-9]*")
	cpus, _ := os.ReadFile(fmt.Sprintf("/sys/devices/system/node/node%d/cpulist", node))
	if mib == 0 {
		return fmt.Errorf("system-ram: node %d has no memory", node)
	}
	if strings.TrimSpace(string(cpus)) != "" {
		return fmt.Errorf("system-ram: node %d has CPUs %q, want a CPU-less node", node, cpus)
	}
	step(res, "system-ram: NUMA node %d online with %d MiB, no CPUs (nodes %d → %d) in %v", node, mib, len(before), len(after), time.Since(t0).Round(time.Millisecond))
	if _, err := b.Map(ctx, tag); !errors.Is(err, linux.ErrMode) {
		return fmt.Errorf("map of system-ram = %v, want ErrMode", err)
	}
	t1 := time.Now()
	if err := b.SetMode(ctx, tag, linux.DevDAX); err != nil {
		return fmt.Errorf("back to devdax: %w", err)
	}
	if mib, _ := nodeMemMiB(node); mib != 0 {
		return fmt.Errorf("devdax again: node %d still has %d MiB", node, mib)
	}
	m, err := b.Map(ctx, tag)
	if err != nil {
		return fmt.Errorf("map after devdax again: %w", err)
	}
	_ = m.Close()
	step(res, "devdax again: memory offlined, %s mappable in %v", res.Dax, time.Since(t1).Round(time.Millisecond))
	return nil
}

// nodeMemMiB is MemTotal of a NUMA node (0 if the node is gone).
func nodeMemMiB(node int) (uint64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/sys/devices/system/node/node%d/meminfo", node))
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	for line := range strings.Lines(string(b)) {
		f := strings.Fields(line)
		if len(f) >= 4 && f[2] == "MemTotal:" {
			kb, err := strconv.ParseUint(f[3], 10, 64)
			return kb / 1024, err
		}
	}
	return 0, fmt.Errorf("node %d meminfo: no MemTotal", node)
}

func pattern(b []byte, seed byte) {
	for i := 0; i < len(b); i += stride {
		b[i] = seed ^ byte(i>>20)
	}
	b[len(b)-1] = seed
}

func check(b []byte, seed byte) error {
	for i := 0; i < len(b); i += stride {
		if b[i] != seed^byte(i>>20) {
			return fmt.Errorf("offset %d reads %#x, want %#x", i, b[i], seed^byte(i>>20))
		}
	}
	if b[len(b)-1] != seed {
		return fmt.Errorf("last byte reads %#x, want %#x", b[len(b)-1], seed)
	}
	return nil
}

// hold maps path and keeps it mapped until stdin closes.
func hold(path, size string) error {
	n, err := strconv.Atoi(size)
	if err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	mem, err := unix.Mmap(int(f.Fd()), 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return err
	}
	_ = f.Close()
	fmt.Println("held")
	_, _ = io.Copy(io.Discard, os.Stdin)
	return unix.Munmap(mem)
}

func waitFor(ctx context.Context, cond func() bool) error {
	for !cond() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
	return nil
}

// debugDump prints the kernel log and the CXL, nvdimm and DAX devices, for
// a failed run's console.
func debugDump() {
	buf := make([]byte, 1<<20)
	if n, err := unix.Klogctl(unix.SYSLOG_ACTION_READ_ALL, buf); err == nil {
		fmt.Printf("--- kernel log\n%s\n", buf[:n])
	}
	for _, g := range []string{"/sys/bus/cxl/devices/*", "/sys/bus/nd/devices/*", "/sys/bus/dax/devices/*"} {
		m, _ := filepath.Glob(g)
		fmt.Printf("--- %s: %v\n", g, m)
	}
}
