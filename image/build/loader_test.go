package build

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// loaderDep is the part of Debian 6.1's modules.dep the loader's drivers
// touch.
const loaderDep = `kernel/drivers/virtio/virtio_pci.ko: kernel/drivers/virtio/virtio_pci_legacy_dev.ko kernel/drivers/virtio/virtio_pci_modern_dev.ko kernel/drivers/virtio/virtio.ko kernel/drivers/virtio/virtio_ring.ko
kernel/drivers/virtio/virtio_pci_legacy_dev.ko:
kernel/drivers/virtio/virtio_pci_modern_dev.ko:
kernel/drivers/virtio/virtio.ko:
kernel/drivers/virtio/virtio_ring.ko:
kernel/drivers/block/virtio_blk.ko: kernel/drivers/virtio/virtio.ko kernel/drivers/virtio/virtio_ring.ko
kernel/drivers/nvme/host/nvme.ko: kernel/drivers/nvme/host/nvme-core.ko
kernel/drivers/nvme/host/nvme-core.ko:
kernel/drivers/ata/ahci.ko: kernel/drivers/ata/libahci.ko kernel/drivers/ata/libata.ko kernel/drivers/scsi/scsi_mod.ko kernel/drivers/scsi/scsi_common.ko
kernel/drivers/ata/libahci.ko: kernel/drivers/ata/libata.ko kernel/drivers/scsi/scsi_mod.ko kernel/drivers/scsi/scsi_common.ko
kernel/drivers/ata/libata.ko: kernel/drivers/scsi/scsi_mod.ko kernel/drivers/scsi/scsi_common.ko
kernel/drivers/scsi/scsi_mod.ko: kernel/drivers/scsi/scsi_common.ko
kernel/drivers/scsi/scsi_common.ko:
kernel/drivers/scsi/sd_mod.ko: kernel/drivers/scsi/scsi_mod.ko kernel/drivers/scsi/scsi_common.ko
kernel/drivers/scsi/virtio_scsi.ko: kernel/drivers/scsi/scsi_mod.ko kernel/drivers/scsi/scsi_common.ko kernel/drivers/virtio/virtio.ko kernel/drivers/virtio/virtio_ring.ko
`

func TestLoaderModuleLines(t *testing.T) {
	deps, err := ParseModulesDep(strings.NewReader(loaderDep))
	if err != nil {
		t.Fatal(err)
	}
	short := func(lines []string) []string {
		var out []string
		for _, l := range lines {
			var names []string
			for _, p := range strings.Fields(l) {
				names = append(names, ModuleName(p))
			}
			out = append(out, strings.Join(names, " "))
		}
		return out
	}
	for _, tc := range []struct {
		name      string
		builtin   map[string]bool
		wantLines []string
		wantAll   int
	}{
		{"all modules", nil, []string{
			"virtio_ring virtio virtio_pci_modern_dev virtio_pci_legacy_dev virtio_pci virtio_blk",
			"nvme_core nvme",
			"scsi_common scsi_mod libata libahci ahci sd_mod",
			"virtio_ring virtio scsi_common scsi_mod virtio_scsi sd_mod",
		}, 15},
		// A kernel with NVMe built in loads nothing for it.
		{"nvme built in", map[string]bool{"nvme": true}, []string{
			"virtio_ring virtio virtio_pci_modern_dev virtio_pci_legacy_dev virtio_pci virtio_blk",
			"scsi_common scsi_mod libata libahci ahci sd_mod",
			"virtio_ring virtio scsi_common scsi_mod virtio_scsi sd_mod",
		}, 13},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lines, all, err := LoaderModuleLines(deps, tc.builtin, LoaderModuleGroups())
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.wantLines, short(lines)); diff != "" {
				t.Errorf("lines (-want +got):\n%s", diff)
			}
			if len(all) != tc.wantAll {
				t.Errorf("modules: got %d (%v), want %d", len(all), all, tc.wantAll)
			}
		})
	}
	if _, _, err := LoaderModuleLines(deps, nil, [][]string{{"floppy"}}); err == nil {
		t.Error("unknown module: got nil error")
	}
}

func TestReadBuiltin(t *testing.T) {
	p := filepath.Join(t.TempDir(), "modules.builtin")
	os.WriteFile(p, []byte("kernel/drivers/nvme/host/nvme-core.ko\nkernel/block/t10-pi.ko\n"), 0o644)
	got, err := readBuiltin(p)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string]bool{"nvme_core": true, "t10_pi": true}, got); diff != "" {
		t.Errorf("readBuiltin (-want +got):\n%s", diff)
	}
	if got, err := readBuiltin(filepath.Join(t.TempDir(), "none")); err != nil || len(got) != 0 {
		t.Errorf("missing modules.builtin: got %v, %v; want empty, nil", got, err)
	}
}
