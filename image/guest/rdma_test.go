package guest

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestRDMAReady: a device counts once its port 1 is ACTIVE with an
// IPv4-mapped GID (the daemon routes with it); the link-local GID alone,
// or a port still down, does not.
func TestRDMAReady(t *testing.T) {
	const linkLocal, ipv4 = "fe80:0000:0000:0000:5054:00ff:fe12:3457", "0000:0000:0000:0000:0000:ffff:0a00:0001"
	for _, tt := range []struct {
		name    string
		devs    map[string][2]string // device → port state, GID 1 (GID 0 is link-local)
		wantDev string
		wantGID string
	}{
		{name: "no device"},
		{name: "port down", devs: map[string][2]string{"rxe0": {"1: DOWN", ipv4}}},
		{name: "link-local only", devs: map[string][2]string{"rxe0": {"4: ACTIVE", "0000:0000:0000:0000:0000:0000:0000:0000"}}},
		{name: "ready", devs: map[string][2]string{"rxe0": {"4: ACTIVE", ipv4}}, wantDev: "rxe0", wantGID: ipv4},
		{name: "second device ready", devs: map[string][2]string{"mlx5_0": {"1: DOWN", ipv4}, "rxe0": {"4: ACTIVE", ipv4}}, wantDev: "rxe0", wantGID: ipv4},
	} {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			for dev, p := range tt.devs {
				port := filepath.Join(root, dev, "ports", "1")
				if err := os.MkdirAll(filepath.Join(port, "gids"), 0o755); err != nil {
					t.Fatal(err)
				}
				for name, body := range map[string]string{"state": p[0] + "\n", "gids/0": linkLocal + "\n", "gids/1": p[1] + "\n"} {
					if err := os.WriteFile(filepath.Join(port, name), []byte(body), 0o644); err != nil {
						t.Fatal(err)
					}
				}
			}
			dev, gid, ok := RDMAReady(root)
			if got, want := [3]any{dev, gid, ok}, [3]any{tt.wantDev, tt.wantGID, tt.wantDev != ""}; got != want {
				t.Errorf("RDMAReady: got %v, want %v", got, want)
			}
		})
	}
}

// TestRDMAModules: soft-RoCE's modules load only in the RDMA stage, and
// only when rdma.rxe asks; a real NIC's come from rdma.modules.
func TestRDMAModules(t *testing.T) {
	for _, m := range rxeModules {
		if got := ModuleStage(m); got != StageRDMA {
			t.Errorf("ModuleStage(%s) = %d, want the RDMA stage %d", m, got, StageRDMA)
		}
	}
	for _, tt := range []struct {
		cfg  Config
		want []string
		rdma bool
	}{
		{Config{}, nil, false},
		{Config{RDMARxe: "eth1"}, []string{"crc32_generic", "rdma_rxe"}, true},
		{Config{RDMAModules: []string{"mlx5_ib"}}, []string{"mlx5_ib"}, true},
	} {
		if diff := cmp.Diff(tt.want, RDMAModuleNames(tt.cfg)); diff != "" {
			t.Errorf("RDMAModuleNames(%+v) (-want +got):\n%s", tt.cfg, diff)
		}
		if got := tt.cfg.WantsRDMA(); got != tt.rdma {
			t.Errorf("WantsRDMA(%+v) = %v, want %v", tt.cfg, got, tt.rdma)
		}
	}
}
