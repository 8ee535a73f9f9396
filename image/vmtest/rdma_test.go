package vmtest

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"cxlpool/image/build"
	"cxlpool/internal/vmkit"
)

// The rack guest's last console line starts with rackResultPrefix; after
// rackRevokeCue it READs until the test revokes the export (rack.ResultPrefix,
// rack.RevokeCue).
const (
	rackResultPrefix = "CXLPOOL-RACK-RESULT "
	rackRevokeCue    = "rack: READing until the export is revoked"
)

// Addresses on the data link between the box and the rack.
const (
	boxDataAddr  = "10.0.0.1"
	rackDataAddr = "10.0.0.2"
	exportPort   = "7000"
)

// TestRDMA boots the box image with a second NIC on a data link (a QEMU
// socket network over host UDP) to a second guest, the remote rack
// (./rack: Debian's kernel, soft-RoCE, a verbs client), and the daemon
// on the in-process virtual box (cxlpool.device=sim: its memory is
// what the export maps) serving exports on 0.0.0.0:7000 with
// --export-rdma auto: the image's init loads rdma_rxe and makes rxe0 on
// eth1 (cxlpool.rdma.rxe=eth1, cxlpool.rdma.address=10.0.0.1/24) before
// the daemon starts. Over Redfish it grants a chunk to Host0 and exports
// it; the rack, booted with the export's ID and token, reaches it over
// verbs (WRITE/READ, atomics), reads the same bytes over TCP, is refused
// with a wrong token, and READs until the test revokes the export over
// Redfish, when verbs and TCP refuse it (see rack's comment).
//
// make vmtest-rdma runs it with make image; it needs libibverbs-dev for
// the rack's static verbs link, like the image.
func TestRDMA(t *testing.T) {
	e := setup(t)
	start := time.Now()
	boxPort, err := FreePort()
	if err != nil {
		t.Fatal(err)
	}
	rackPort, err := FreePort() // UDP ports: two free TCP ports are free enough on loopback
	if err != nil {
		t.Fatal(err)
	}
	disk := filepath.Join(e.dir, "rdma.img")
	copyFile(t, filepath.Join(e.img, "disk.img"), disk)
	vm, b := e.bootWith(disk, "rdma", func(o *Options) {
		o.Append += " cxlpool.device=sim cxlpool.export.listen=0.0.0.0:" + exportPort +
			" cxlpool.rdma.rxe=eth1 cxlpool.rdma.address=" + boxDataAddr + "/24"
		o.Extra = append(o.Extra, "-netdev", fmt.Sprintf("socket,id=data,udp=127.0.0.1:%d,localaddr=127.0.0.1:%d", rackPort, boxPort),
			"-device", "virtio-net-pci,netdev=data,bus=pcie.0,mac=52:54:00:cc:00:01")
	})
	// The rack's initramfs while the box boots.
	rackInitrd := e.rackInitramfs(t, b.Manifest.Kernel)

	e.waitAPI(vm)
	ctx, cancel := context.WithTimeout(e.ctx, 3*time.Minute)
	defer cancel()
	for _, re := range []string{`cxlpool: rdma: rxe0 active, GID [0-9a-f:]+`, `msg="exports over RDMA verbs too" device=rxe0`} {
		m, _, err := vm.WaitConsole(ctx, regexp.MustCompile(re), 0)
		if err != nil {
			t.Fatalf("%v; console:\n%s", err, tail(vm.Console(), 4000))
		}
		t.Logf("box: %s", m[0])
	}
	m, _, err := vm.WaitConsole(ctx, passwordRE, 0)
	if err != nil {
		t.Fatal(err)
	}
	c := e.client(m[1])
	grant := grantHost0(t, c)
	conn, _ := c.must(http.MethodGet, grant, nil, http.StatusOK)
	chunk := ""
	if infos, ok := conn["MemoryChunkInfo"].([]any); ok && len(infos) > 0 {
		mc, _ := infos[0].(map[string]any)["MemoryChunk"].(map[string]any)
		chunk, _ = mc["@odata.id"].(string)
	}
	if chunk == "" {
		t.Fatalf("grant %s names no chunk: %v", grant, conn)
	}
	x, _ := c.must(http.MethodPost, "/redfish/v1/Fabrics/RDMA/Connections", map[string]any{
		"ConnectionType": "Memory",
		"MemoryChunkInfo": []any{map[string]any{"MemoryChunk": map[string]any{"@odata.id": chunk},
			"AccessCapabilities": []string{"Read", "Write"}}},
		"Oem": map[string]any{"CxlPool": map[string]any{"Client": "rack1"}},
	}, http.StatusCreated)
	id, _ := x["Id"].(string)
	oem, _ := x["Oem"].(map[string]any)["CxlPool"].(map[string]any)
	token, _ := oem["Token"].(string)
	if id == "" || token == "" {
		t.Fatalf("export answer without Id or Token: %v", x)
	}
	t.Logf("box up, %s granted and exported as %s after %v", chunk, id, time.Since(start).Round(time.Second))

	rackStart := time.Now()
	rackLog, _ := os.Create(filepath.Join(e.dir, "rack.console"))
	defer rackLog.Close()
	rack, err := StartArgs([]string{
		"-M", "q35", "-accel", "tcg", "-cpu", "qemu64,+rdrand", "-smp", "1", "-m", "512M",
		"-display", "none", "-serial", "stdio", "-monitor", "none", "-nic", "none", "-no-reboot",
		"-netdev", fmt.Sprintf("socket,id=data,udp=127.0.0.1:%d,localaddr=127.0.0.1:%d", boxPort, rackPort),
		"-device", "virtio-net-pci,netdev=data,mac=52:54:00:cc:00:02",
		"-kernel", filepath.Join(e.img, "vmlinux"), "-initrd", rackInitrd,
		"-append", fmt.Sprintf("console=ttyS0 panic=-1 quiet rack.addr=%s/24 rack.box=%s:%s rack.export=%s rack.token=%s",
			rackDataAddr, boxDataAddr, exportPort, id, token)}, rackLog)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if !rack.Exited() {
			rack.Kill()
		}
	})
	fail := func(format string, args ...any) {
		t.Helper()
		t.Fatalf(format+"\nrack console:\n%s\nbox console:\n%s", append(args, tail(rack.Console(), 6000), tail(vm.Console(), 4000))...)
	}
	// The rack's checks, then the revocation while it READs.
	done := regexp.MustCompile(regexp.QuoteMeta(rackResultPrefix) + `[^\n]*\n`)
	cue := regexp.MustCompile(regexp.QuoteMeta(rackRevokeCue) + "|" + done.String())
	m, _, err = rack.WaitConsole(ctx, cue, 0)
	if err != nil {
		fail("%v", err)
	}
	if strings.HasPrefix(m[0], rackRevokeCue) {
		revoke := time.Now()
		c.must(http.MethodDelete, "/redfish/v1/Fabrics/RDMA/Connections/"+id, nil, http.StatusOK, http.StatusNoContent)
		t.Logf("export %s revoked over Redfish in %v", id, time.Since(revoke).Round(time.Millisecond))
	}
	if _, _, err := rack.WaitConsole(ctx, done, 0); err != nil {
		fail("%v", err)
	}
	out := rack.Console()
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		if line := strings.TrimSpace(sc.Text()); strings.HasPrefix(line, "rack:") {
			t.Log(line)
		}
	}
	i := strings.LastIndex(out, rackResultPrefix)
	verdict, _, _ := strings.Cut(out[i+len(rackResultPrefix):], "\n")
	if verdict = strings.TrimSpace(verdict); verdict != "ok" {
		fail("rack: %s", verdict)
	}
	t.Logf("rack guest ran %v; TestRDMA %v in all (box boot and build included)", time.Since(rackStart).Round(time.Second), time.Since(start).Round(time.Second))
}

// rackModules are the rack guest's: its NIC and soft-RoCE (see
// image/guest's rxeModules for crc32_generic).
var rackModules = []string{"virtio_pci", "virtio_net", "crc32_generic", "rdma_rxe"}

// rackInitramfs builds ./rack with verbs linked statically (as the image's
// daemon is) and writes its initramfs: the program as /init, the C
// library it links, and the modules of kernel release kver.
func (e *env) rackInitramfs(t *testing.T, kver string) string {
	t.Helper()
	env, err := build.VerbsLinkEnv(build.LibDir, []string{"rxe"})
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(e.dir, "rack")
	cmd := exec.CommandContext(e.ctx, "go", "build", "-tags", "verbs,verbs_static", "-o", bin, "./rack")
	cmd.Env = append(append(os.Environ(), "CGO_ENABLED=1", "GOOS=linux", "GOARCH=amd64"), env...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build the rack: %v\n%s", err, out)
	}
	modDir := filepath.Join("/lib/modules", kver)
	deps, err := build.ReadModulesDep(filepath.Join(modDir, "modules.dep"))
	if err != nil {
		t.Fatal(err)
	}
	names, err := build.LoadOrder(deps, rackModules)
	if err != nil {
		t.Fatal(err)
	}
	var mods []string
	for _, n := range names {
		mods = append(mods, deps[n].Path)
	}
	out := filepath.Join(e.dir, "rack.cpio")
	f, err := os.Create(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w := vmkit.NewCPIO(f)
	data, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	w.File("init", 0o755, data)
	libs, err := vmkit.SharedLibs(bin)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range libs {
		b, err := os.ReadFile(l)
		if err != nil {
			t.Fatal(err)
		}
		w.File(strings.TrimPrefix(l, "/"), 0o755, b)
	}
	if err := w.Modules(modDir, mods); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	t.Logf("rack initramfs: %s, libraries %v, modules %v", bin, libs, names)
	return out
}
