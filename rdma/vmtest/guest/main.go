//go:build linux

// Command guest is the init (PID 1) of the verbs VM test's initramfs. It
// loads soft-RoCE (rdma_rxe) and veth, makes a veth pair veth0
// (10.0.0.1, the box) – veth1 (10.0.0.2, the remote rack), adds one rxe
// device on each end (rxe0, rxe1), and routes the traffic between the two
// addresses over the pair instead of the loopback device, so that every
// RoCE v2 packet and every TCP segment crosses the link. Then it runs the
// verbs transport's tests (the test binary /verbs.test, built with the
// verbs tag) with rxe0 serving and rxe1 as the client, then the
// appliance's export tests (/appliance.test: the daemon's assembly serving
// over verbs on rxe0), prints their output and the bytes that crossed the
// link, and powers off.
//
// Why one guest and not a network namespace: Linux 6.1's rdma_rxe opens its
// UDP socket (port 4791) and routes only in the initial network namespace,
// so an rxe device on a veth end moved into another namespace never sees
// its packets. Both ends stay in the initial namespace; policy routing
// (rules for locally generated traffic between the two addresses, the
// local table moved behind them, accept_local on the pair) sends what
// would otherwise take the loopback shortcut over the wire.
package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"cxlpool/internal/vmkit"
)

// ResultPrefix starts the guest's last console line (kept in step with
// the host side, rdma/vmtest).
const ResultPrefix = "CXLPOOL-RDMAVM-RESULT "

// mtu is the veth pair's.
const mtu = 9000

var (
	boxAddr  = net.IPv4(10, 0, 0, 1)
	rackAddr = net.IPv4(10, 0, 0, 2)
)

func main() {
	err := run()
	res := "ok"
	if err != nil {
		res = "error: " + err.Error()
		dmesg()
	}
	fmt.Printf("\n%s%s\n", ResultPrefix, res)
	unix.Sync()
	_ = unix.Reboot(unix.LINUX_REBOOT_CMD_POWER_OFF)
	select {}
}

func run() error {
	if err := vmkit.MountPseudo(); err != nil {
		return err
	}
	t0 := time.Now()
	if err := vmkit.LoadModules("/modules.order"); err != nil {
		return err
	}
	fmt.Printf("rdmavm: modules loaded in %v\n", time.Since(t0).Round(time.Millisecond))
	if err := network(); err != nil {
		return fmt.Errorf("network: %w", err)
	}
	for _, l := range []struct{ rdma, net string }{{"rxe0", "veth0"}, {"rxe1", "veth1"}} {
		if err := netlink.RdmaLinkAdd(l.rdma, "rxe", l.net); err != nil {
			return fmt.Errorf("rdma link add %s type rxe netdev %s: %w", l.rdma, l.net, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, d := range []string{"rxe0", "rxe1"} {
		if err := waitGID(ctx, d); err != nil {
			return err
		}
	}
	before := linkBytes()
	var errs []error
	for _, args := range [][]string{
		{"/verbs.test"},
		// The daemon's assembly (appliance: the virtual box, the ledger,
		// the export server with --export-rdma rxe0) serving the rack.
		{"/appliance.test", "-test.run", "^(TestExportServedByTheDaemon|TestExportRDMANamedDeviceMustOpen)$"},
	} {
		cmd := exec.Command(args[0], append(args[1:], "-test.v", "-test.count=1", "-test.timeout=8m")...)
		cmd.Env = []string{
			"PATH=/", "TMPDIR=/tmp", "HOME=/tmp", "CXLPOOL_VERBS_SERVER_DEV=rxe0", "CXLPOOL_VERBS_CLIENT_DEV=rxe1",
			"CXLPOOL_VERBS_SERVER_ADDR=" + boxAddr.String(), "CXLPOOL_VERBS_CLIENT_ADDR=" + rackAddr.String(),
			"CXLPOOL_VERBS_BENCH=1",
		}
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stdout
		if err := cmd.Run(); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", args[0], err))
		}
	}
	fmt.Printf("rdmavm: the rack's end (veth1) sent %d bytes over the link during the tests\n", linkBytes()-before)
	return errors.Join(errs...)
}

// linkBytes is what veth1 (the rack's end) has sent.
func linkBytes() int64 {
	b, _ := os.ReadFile("/sys/class/net/veth1/statistics/tx_bytes")
	var n int64
	fmt.Sscan(strings.TrimSpace(string(b)), &n)
	return n
}

// network makes the veth pair and its routing (see the package comment).
func network() error {
	lo, err := netlink.LinkByName("lo")
	if err != nil {
		return err
	}
	if err := netlink.LinkSetUp(lo); err != nil {
		return err
	}
	// Jumbo frames, as RoCE links are run: soft-RoCE's path MTU is the
	// largest IB MTU under the netdev's (1024 at 1500, 4096 at 9000),
	// and a 1 MiB READ is a quarter of the packets at 4096. TCP on the
	// same link gets the same MTU.
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "veth0", MTU: mtu}, PeerName: "veth1"}
	if err := netlink.LinkAdd(veth); err != nil {
		return fmt.Errorf("veth: %w", err)
	}
	ends := map[string]netlink.Link{}
	for name, ip := range map[string]net.IP{"veth0": boxAddr, "veth1": rackAddr} {
		l, err := netlink.LinkByName(name)
		if err != nil {
			return err
		}
		ends[name] = l
		if err := netlink.LinkSetMTU(l, mtu); err != nil {
			return fmt.Errorf("MTU of %s: %w", name, err)
		}
		if err := netlink.AddrAdd(l, &netlink.Addr{IPNet: &net.IPNet{IP: ip, Mask: net.CIDRMask(32, 32)}}); err != nil {
			return fmt.Errorf("address %s on %s: %w", ip, name, err)
		}
		if err := netlink.LinkSetUp(l); err != nil {
			return err
		}
		for _, k := range []string{"accept_local", "rp_filter"} {
			v := "1"
			if k == "rp_filter" {
				v = "0"
			}
			for _, dev := range []string{"all", name} {
				if err := os.WriteFile(filepath.Join("/proc/sys/net/ipv4/conf", dev, k), []byte(v), 0o644); err != nil {
					return err
				}
			}
		}
	}
	// Each end reaches the other's address through its own device, from
	// its own address, for locally generated traffic only (iif lo):
	// arriving packets still find the local table and are delivered.
	for i, r := range []struct {
		dev      string
		src, dst net.IP
	}{{"veth1", rackAddr, boxAddr}, {"veth0", boxAddr, rackAddr}} {
		table := 10 + i
		l := ends[r.dev]
		if err := netlink.RouteAdd(&netlink.Route{LinkIndex: l.Attrs().Index, Dst: &net.IPNet{IP: r.dst, Mask: net.CIDRMask(32, 32)},
			Src: r.src, Scope: netlink.SCOPE_LINK, Table: table}); err != nil {
			return fmt.Errorf("route to %s in table %d: %w", r.dst, table, err)
		}
		rule := netlink.NewRule()
		rule.Priority, rule.Table, rule.IifName = 10+i, table, "lo"
		rule.Src = &net.IPNet{IP: r.src, Mask: net.CIDRMask(32, 32)}
		rule.Dst = &net.IPNet{IP: r.dst, Mask: net.CIDRMask(32, 32)}
		if err := netlink.RuleAdd(rule); err != nil {
			return fmt.Errorf("rule from %s to %s: %w", r.src, r.dst, err)
		}
		peer := ends["veth0"]
		if r.dev == "veth0" {
			peer = ends["veth1"]
		}
		if err := netlink.NeighAdd(&netlink.Neigh{LinkIndex: l.Attrs().Index, Family: netlink.FAMILY_V4, State: netlink.NUD_PERMANENT,
			IP: r.dst, HardwareAddr: peer.Attrs().HardwareAddr}); err != nil {
			return fmt.Errorf("neighbour %s on %s: %w", r.dst, r.dev, err)
		}
	}
	// The local table after those rules (it is rule 0 at boot).
	local := netlink.NewRule()
	local.Priority, local.Table = 100, unix.RT_TABLE_LOCAL
	if err := netlink.RuleAdd(local); err != nil {
		return fmt.Errorf("local rule at 100: %w", err)
	}
	first := netlink.NewRule()
	first.Priority, first.Table = 0, unix.RT_TABLE_LOCAL
	if err := netlink.RuleDel(first); err != nil {
		return fmt.Errorf("local rule at 0: %w", err)
	}
	return nil
}

// waitGID waits for dev's port to be active with an IPv4 GID (the GID
// table fills in as the address shows up).
func waitGID(ctx context.Context, dev string) error {
	for {
		state, _ := os.ReadFile("/sys/class/infiniband/" + dev + "/ports/1/state")
		gids, _ := filepath.Glob("/sys/class/infiniband/" + dev + "/ports/1/gids/*")
		for _, g := range gids {
			b, _ := os.ReadFile(g)
			if strings.HasPrefix(string(b), "0000:0000:0000:0000:0000:ffff:") && strings.Contains(string(state), "ACTIVE") {
				fmt.Printf("rdmavm: %s port 1 %s, GID %s %s", dev, strings.TrimSpace(string(state)), filepath.Base(g), b)
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: no active port with an IPv4 GID (state %q, %d GIDs): %w", dev, state, len(gids), ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func dmesg() {
	buf := make([]byte, 1<<20)
	if n, err := unix.Klogctl(unix.SYSLOG_ACTION_READ_ALL, buf); err == nil {
		fmt.Printf("--- kernel log\n%s\n", buf[max(0, n-8000):n])
	}
}
