package guest

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Exports over RDMA verbs: the daemon (built with the verbs tag,
// libibverbs and the rxe provider linked in) opens an RDMA device when
// its export server starts (--export-rdma auto takes the first one) and
// routes with the GID of the NIC's IPv4 address it finds then. So the
// init makes the device before it opens the daemon's start gate: it loads
// the modules (rdma.modules, a real NIC's driver; with rdma.rxe also
// soft-RoCE's), gives the rxe NIC its static address (rdma.address),
// adds rxe0 on it and waits until a device's port is active with an IPv4
// GID.

// RxeDevice is the soft-RoCE device the init makes on rdma.rxe.
const RxeDevice = "rxe0"

// rxeModules are soft-RoCE's modules: rdma_rxe with what modules.dep
// says it needs, and crc32_generic, its ICRC's "crc32", which it asks the
// crypto API for when a device is made (modules.dep does not say so: "rdma
// link add" then fails with ENOENT).
var rxeModules = []string{"crc32_generic", "udp_tunnel", "ip6_udp_tunnel", "ib_core", "ib_uverbs", "rdma_rxe"}

// RDMAModuleNames are the modules the RDMA stage loads for cfg, in order.
func RDMAModuleNames(cfg Config) []string {
	names := slices.Clone(cfg.RDMAModules)
	if cfg.RDMARxe != "" {
		names = append(names, "crc32_generic", "rdma_rxe")
	}
	return names
}

// WantsRDMA says whether cfg has the init prepare an RDMA device.
func (c *Config) WantsRDMA() bool { return c.RDMARxe != "" || len(c.RDMAModules) > 0 }

// RDMAReady looks under sysClass (/sys/class/infiniband) for a device
// whose port 1 is ACTIVE with an IPv4-mapped GID, the one the daemon's
// verbs server routes with; it returns the device and GID.
func RDMAReady(sysClass string) (dev, gid string, ok bool) {
	devs, _ := filepath.Glob(filepath.Join(sysClass, "*"))
	slices.Sort(devs)
	for _, d := range devs {
		state, err := os.ReadFile(filepath.Join(d, "ports", "1", "state"))
		if err != nil || !strings.Contains(string(state), "ACTIVE") {
			continue
		}
		gids, _ := filepath.Glob(filepath.Join(d, "ports", "1", "gids", "*"))
		for _, g := range gids {
			b, err := os.ReadFile(g)
			if s := strings.TrimSpace(string(b)); err == nil && strings.HasPrefix(s, "0000:0000:0000:0000:0000:ffff:") {
				return filepath.Base(d), s, true
			}
		}
	}
	return "", "", false
}
