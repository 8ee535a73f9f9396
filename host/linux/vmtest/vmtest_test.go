package vmtest

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"cxlpool/internal/vmkit"
)

// modules is what the guest loads, dependencies first (CXL_BUS, CXL_PORT
// and CXL_REGION are built into Debian's 6.1).
var modules = []string{
	"kernel/drivers/nvdimm/libnvdimm.ko",
	"kernel/drivers/cxl/cxl_acpi.ko",
	"kernel/drivers/cxl/cxl_pci.ko",
	"kernel/drivers/cxl/cxl_mem.ko",
	"kernel/drivers/cxl/cxl_pmem.ko",
	"kernel/drivers/dax/device_dax.ko",
	"kernel/drivers/dax/dax_pmem.ko",
	"kernel/drivers/dax/kmem.ko",
}

func TestHostVM(t *testing.T) {
	if os.Getenv("CXLPOOL_VMTEST") != "1" {
		t.Skip("set CXLPOOL_VMTEST=1 (make vmtest-host) to boot the QEMU guest")
	}
	for _, tool := range []string{"qemu-system-x86_64", "xz"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s: %v (apt-get install qemu-system-x86 xz-utils)", tool, err)
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
	cmd := exec.Command("go", "build", "-o", initBin, "./guest")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build guest: %v\n%s", err, out)
	}
	initrd := filepath.Join(dir, "initrd.cpio")
	if err := makeInitramfs(initrd, initBin, "/lib/modules/"+kver); err != nil {
		t.Fatal(err)
	}
	for name, size := range map[string]int64{"cxl-mem0.raw": 256 << 20, "cxl-lsa0.raw": 1 << 20} {
		f, err := os.Create(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if err := f.Truncate(size); err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()
	var console bytes.Buffer
	q := exec.CommandContext(ctx, "qemu-system-x86_64", qemuArgs(dir, vmlinux, initrd)...)
	q.Stdout, q.Stderr = &console, &console
	start := time.Now()
	err = q.Run()
	out := console.String()
	t.Logf("guest ran %v (kernel %s)", time.Since(start).Round(time.Second), kver)
	i := strings.LastIndex(out, ResultPrefix)
	if i < 0 {
		t.Fatalf("no result from the guest (qemu: %v); console:\n%s", err, tail(out, 6000))
	}
	line, _, _ := strings.Cut(out[i+len(ResultPrefix):], "\n")
	var res Result
	if err := json.Unmarshal([]byte(strings.TrimSpace(line)), &res); err != nil {
		t.Fatalf("result %q: %v", line, err)
	}
	for _, s := range res.Steps {
		t.Log(s)
	}
	if res.Error != "" {
		t.Fatalf("guest: %s\nconsole:\n%s", res.Error, tail(out, 6000))
	}
	if res.Serial != "0x1000" {
		t.Errorf("serial = %s, want 0x1000 (the cxl-type3 sn)", res.Serial)
	}
	if res.BusySelf == "" || res.BusyPeer == "" {
		t.Errorf("busy refusals: self %q, peer %q; want both", res.BusySelf, res.BusyPeer)
	}
	if res.NodeMiB == 0 {
		t.Errorf("system-ram: node %d had no memory", res.Node)
	}
	t.Logf("attach→usable (region + namespace + DAX device + mmap; TCG) p50 %v p99 %v over %d rounds",
		pct(res.Attach, 50), pct(res.Attach, 99), len(res.Attach))
	t.Logf("release→gone (busy check, teardown in reverse; TCG) p50 %v p99 %v over %d rounds",
		pct(res.Release, 50), pct(res.Release, 99), len(res.Release))
	t.Logf("release→gone with zeroing %d MiB first (the default; TCG traps every access to CXL memory): %v",
		res.Size>>20, pct(res.Zeroed, 50))
}

func qemuArgs(dir, kernel, initrd string) []string {
	return []string{
		"-M", "q35,cxl=on,cxl-fmw.0.targets.0=cxl.1,cxl-fmw.0.size=4G", "-accel", "tcg", "-cpu", "qemu64,+rdrand",
		"-smp", "1", "-m", "1G,maxmem=8G,slots=4", "-display", "none", "-serial", "stdio", "-monitor", "none",
		"-no-reboot", "-kernel", kernel, "-initrd", initrd,
		"-append", "console=ttyS0 panic=-1 quiet",
		"-object", "memory-backend-file,id=cxl-mem0,share=on,mem-path=" + filepath.Join(dir, "cxl-mem0.raw") + ",size=256M",
		"-object", "memory-backend-file,id=cxl-lsa0,share=on,mem-path=" + filepath.Join(dir, "cxl-lsa0.raw") + ",size=1M",
		"-device", "pxb-cxl,bus_nr=12,bus=pcie.0,id=cxl.1",
		// Two root ports: with one, kernel 6.1 leaves the host bridge's
		// decoder unprogrammed and the region reads back zeros.
		"-device", "cxl-rp,port=0,bus=cxl.1,id=root_port13,chassis=0,slot=2",
		"-device", "cxl-rp,port=1,bus=cxl.1,id=root_port14,chassis=0,slot=3",
		"-device", "cxl-type3,bus=root_port13,memdev=cxl-mem0,lsa=cxl-lsa0,id=cxl-pmem0,sn=0x1000",
	}
}

// makeInitramfs writes a newc cpio: /init, the modules and their load
// order.
func makeInitramfs(out, initBin, modDir string) error {
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	defer f.Close()
	w := vmkit.NewCPIO(f)
	data, err := os.ReadFile(initBin)
	if err != nil {
		return err
	}
	w.File("init", 0o755, data)
	if err := w.Modules(modDir, modules); err != nil {
		return err
	}
	if err := w.Close(); err != nil {
		return err
	}
	return f.Close()
}

func pct(us []int64, p int) time.Duration {
	if len(us) == 0 {
		return 0
	}
	s := slices.Clone(us)
	slices.Sort(s)
	i := (len(s)*p + 99) / 100
	return time.Duration(s[max(0, min(i, len(s))-1)]) * time.Microsecond
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}
