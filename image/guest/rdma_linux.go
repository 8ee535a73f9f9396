package guest

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// setupRDMA prepares the RDMA device for cfg (see rdma.go): the modules,
// the rxe NIC's address, rxe0, and a port with an IPv4 GID, each step
// bounded so that a box without the device still starts (serving TCP).
func (in *Init) setupRDMA(ctx context.Context, cfg Config) error {
	start := time.Now()
	want := map[string]bool{}
	for _, n := range RDMAModuleNames(cfg) {
		want[n] = true
	}
	in.loadModules(ModulesList, "rdma", func(name string) bool { return want[name] })
	if cfg.RDMARxe != "" {
		if err := waitPath(ctx, "/sys/class/net/"+cfg.RDMARxe, 10*time.Second); err != nil {
			return err
		}
		if cfg.RDMAAddress != "" && cfg.RDMARxe != cfg.NetIface {
			if err := configureInterface(cfg.RDMARxe, cfg.RDMAAddress, ""); err != nil {
				return err
			}
		}
		// rdma link add rxe0 type rxe netdev IFACE
		if err := netlink.RdmaLinkAdd(RxeDevice, "rxe", cfg.RDMARxe); err != nil && !errors.Is(err, unix.EEXIST) {
			return fmt.Errorf("rdma link add %s type rxe netdev %s: %w", RxeDevice, cfg.RDMARxe, err)
		}
	}
	// The GID table fills in as the NIC's address appears (a DHCP lease
	// may take a while; a real NIC's driver probes asynchronously).
	deadline := time.Now().Add(20 * time.Second)
	for {
		if dev, gid, ok := RDMAReady("/sys/class/infiniband"); ok {
			in.printf("rdma: %s active, GID %s, after %v", dev, gid, time.Since(start).Round(time.Millisecond))
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no RDMA device with an active port and an IPv4 GID after %v", time.Since(start).Round(time.Second))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}
