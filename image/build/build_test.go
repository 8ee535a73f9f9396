package build

import (
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

const depFixture = `kernel/drivers/cxl/cxl_pmem.ko: kernel/drivers/nvdimm/libnvdimm.ko
kernel/drivers/nvdimm/libnvdimm.ko:
kernel/drivers/usb/serial/ftdi_sio.ko: kernel/drivers/usb/serial/usbserial.ko kernel/drivers/usb/core/usbcore.ko kernel/drivers/usb/common/usb-common.ko
kernel/drivers/usb/serial/usbserial.ko: kernel/drivers/usb/core/usbcore.ko kernel/drivers/usb/common/usb-common.ko
kernel/drivers/usb/core/usbcore.ko: kernel/drivers/usb/common/usb-common.ko
kernel/drivers/usb/common/usb-common.ko:
kernel/arch/x86/crypto/crc32c-intel.ko:
`

func TestLoadOrder(t *testing.T) {
	deps, err := ParseModulesDep(strings.NewReader(depFixture))
	if err != nil {
		t.Fatal(err)
	}
	got, err := LoadOrder(deps, []string{"crc32c-intel", "ftdi_sio", "cxl_pmem", "usbserial"})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"crc32c_intel", "usb_common", "usbcore", "usbserial", "ftdi_sio", "libnvdimm", "cxl_pmem"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("load order (-want +got):\n%s", diff)
	}
	if _, err := LoadOrder(deps, []string{"cxl_port"}); err == nil {
		t.Error("built-in module: got nil error, want one")
	}
	cyc, _ := ParseModulesDep(strings.NewReader("a.ko: b.ko\nb.ko: a.ko\n"))
	if _, err := LoadOrder(cyc, []string{"a"}); err == nil {
		t.Error("cycle: got nil error, want one")
	}
}

func TestBzImagePayload(t *testing.T) {
	b := make([]byte, 8192)
	b[0x1f1] = 3 // setup sectors: protected-mode code at (3+1)*512
	copy(b[0x202:], "HdrS")
	payload := []byte("\xfd7zXZ\x00payload")
	binary.LittleEndian.PutUint32(b[0x248:], 100)
	binary.LittleEndian.PutUint32(b[0x24c:], uint32(len(payload)+4))
	copy(b[4*512+100:], payload)
	got, err := BzImagePayload(b)
	if err != nil || !bytes.Equal(got, payload) {
		t.Fatalf("got %q %v, want %q", got, err, payload)
	}
	if _, err := BzImagePayload(b[:100]); err == nil {
		t.Error("short file: got nil error")
	}
	binary.LittleEndian.PutUint32(b[0x24c:], 1<<30)
	if _, err := BzImagePayload(b); err == nil {
		t.Error("payload beyond the file: got nil error")
	}
}

func TestCompareVersions(t *testing.T) {
	if compareVersions("6.1.0-9-amd64", "6.1.0-57-amd64") >= 0 || compareVersions("6.10.0-1-amd64", "6.9.0-1-amd64") <= 0 {
		t.Error("kernel releases misordered")
	}
}

func TestCopySparse(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	data := make([]byte, 300<<10)
	copy(data[200<<10:], "hello")
	os.WriteFile(src, data, 0o644)
	dst, _ := os.Create(filepath.Join(dir, "dst"))
	dst.Truncate(1 << 20)
	if err := CopySparse(dst, 4096, src); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(data))
	dst.ReadAt(got, 4096)
	dst.Close()
	if !bytes.Equal(got, data) {
		t.Error("sparse copy differs from the source")
	}
}

func TestModuleName(t *testing.T) {
	for in, want := range map[string]string{"kernel/a/crc32c-intel.ko": "crc32c_intel", "x/ext4.ko.xz": "ext4", "virtio_pci.ko": "virtio_pci"} {
		if got := ModuleName(in); got != want {
			t.Errorf("ModuleName(%s) = %s, want %s", in, got, want)
		}
	}
}

func FuzzModules(f *testing.F) {
	f.Add(depFixture, "ftdi_sio")
	f.Add("a.ko: b.ko\nb.ko: a.ko\n", "a")
	f.Fuzz(func(t *testing.T, dep, want string) {
		deps, err := ParseModulesDep(strings.NewReader(dep))
		if err != nil {
			return
		}
		order, err := LoadOrder(deps, []string{want})
		if err != nil {
			return
		}
		seen := map[string]bool{}
		for _, n := range order {
			for _, d := range deps[n].Deps {
				if !seen[d] {
					t.Fatalf("%s loads before its dependency %s", n, d)
				}
			}
			seen[n] = true
		}
	})
}
