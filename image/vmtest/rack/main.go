//go:build linux

// Command rack is the init (PID 1) of TestRDMA's second guest: the remote
// rack at the other end of the box image's data link (image/vmtest). It
// loads virtio-net and soft-RoCE, gives eth0 its address, makes rxe0 on it
// and reaches the export the test created on the box, as its kernel
// command line names it (rack.addr=CIDR rack.box=HOST:PORT rack.export=ID
// rack.token=TOKEN):
//
//   - verbs.Open must pick verbs (the box's daemon answers CONNECT);
//   - a 1 MiB WRITE and READ back over verbs, 64 B near the export's end,
//     compare-and-swap and fetch-and-add;
//   - the same bytes read over the TCP export (one memory, two paths);
//   - a wrong token refused (rdma.ErrDenied) over verbs and over TCP;
//   - 64 B READ latency and 1 MiB READ throughput, verbs against TCP, as
//     "figure:" lines;
//   - then, while it READs over verbs, the test revokes the export: a
//     READ is refused (rdma.ErrRevoked), and so is TCP.
//
// It prints a last line "CXLPOOL-RACK-RESULT ok" (or the error) and
// powers off. Built with the verbs and verbs_static tags (image/build's
// link: libibverbs and the rxe provider inside the program).
package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"cxlpool/internal/vmkit"
	"cxlpool/rdma"
	"cxlpool/rdma/client"
	"cxlpool/rdma/verbs"
)

// ResultPrefix starts the guest's last console line (kept in step with
// image/vmtest's TestRDMA).
const ResultPrefix = "CXLPOOL-RACK-RESULT "

func main() {
	err := run()
	res := "ok"
	if err != nil {
		res = "error: " + err.Error()
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
	args := map[string]string{}
	cl, _ := os.ReadFile("/proc/cmdline")
	for _, w := range strings.Fields(string(cl)) {
		if k, v, ok := strings.Cut(w, "="); ok && strings.HasPrefix(k, "rack.") {
			args[strings.TrimPrefix(k, "rack.")] = v
		}
	}
	token, err := rdma.ParseToken(args["token"])
	if err != nil {
		return err
	}
	if err := vmkit.LoadModules("/modules.order"); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	if err := network(ctx, args["addr"]); err != nil {
		return fmt.Errorf("network: %w", err)
	}
	ccfg := client.Config{Addr: args["box"], Export: rdma.ExportID(args["export"]), Token: token, Conns: 1}
	vcfg := verbs.Config{Device: "rxe0", GIDIndex: -1}
	return exercise(ctx, ccfg, vcfg)
}

// network brings eth0 up with addr and makes rxe0 on it.
func network(ctx context.Context, addr string) error {
	ip, ipnet, err := net.ParseCIDR(addr)
	if err != nil {
		return fmt.Errorf("rack.addr: %w", err)
	}
	var l netlink.Link
	for l == nil {
		if l, err = netlink.LinkByName("eth0"); err != nil {
			if ctx.Err() != nil {
				return fmt.Errorf("eth0: %w", err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	ipnet.IP = ip
	if err := netlink.AddrAdd(l, &netlink.Addr{IPNet: ipnet}); err != nil {
		return err
	}
	if err := netlink.LinkSetUp(l); err != nil {
		return err
	}
	if err := netlink.RdmaLinkAdd("rxe0", "rxe", "eth0"); err != nil {
		return fmt.Errorf("rdma link add rxe0 type rxe netdev eth0: %w", err)
	}
	for {
		gids, _ := filepath.Glob("/sys/class/infiniband/rxe0/ports/1/gids/*")
		state, _ := os.ReadFile("/sys/class/infiniband/rxe0/ports/1/state")
		for _, g := range gids {
			b, _ := os.ReadFile(g)
			if strings.HasPrefix(string(b), "0000:0000:0000:0000:0000:ffff:") && strings.Contains(string(state), "ACTIVE") {
				fmt.Printf("rack: rxe0 on eth0 %s, GID %s", addr, b)
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("rxe0: no active port with an IPv4 GID: %w", ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// exercise runs the checks of the package comment.
func exercise(ctx context.Context, ccfg client.Config, vcfg verbs.Config) error {
	conn, why, err := verbs.Open(ctx, ccfg, vcfg)
	if err != nil {
		return fmt.Errorf("open export %s: %w", ccfg.Export, err)
	}
	defer conn.Close()
	if why != "" {
		return fmt.Errorf("verbs.Open fell back: %s", why)
	}
	size := conn.Size()
	fmt.Printf("rack: export %s open over verbs (%d bytes)\n", ccfg.Export, size)
	big := make([]byte, 1<<20)
	for i := range big {
		big[i] = byte(i*7 + i>>12)
	}
	if err := conn.Write(ctx, big, 0); err != nil {
		return fmt.Errorf("verbs WRITE 1 MiB: %w", err)
	}
	got := make([]byte, len(big))
	if err := conn.Read(ctx, got, 0); err != nil {
		return fmt.Errorf("verbs READ 1 MiB: %w", err)
	}
	if !bytes.Equal(got, big) {
		return errors.New("verbs READ 1 MiB: not what was written")
	}
	small, end := []byte("the last 64 bytes of the export, written over RDMA verbs........"), size-64
	if err := conn.Write(ctx, small, end); err != nil {
		return fmt.Errorf("verbs WRITE 64 B at %d: %w", end, err)
	}
	const word = 2 << 20 // an 8-byte word past the 1 MiB pattern, zero after the grant
	if old, err := conn.CompareAndSwap(ctx, word, 0, 42); err != nil || old != 0 {
		return fmt.Errorf("verbs CAS 0→42: old %d, %v (want 0)", old, err)
	}
	if old, err := conn.FetchAdd(ctx, word, 8); err != nil || old != 42 {
		return fmt.Errorf("verbs FAA +8: old %d, %v (want 42)", old, err)
	}
	fmt.Println("rack: verbs WRITE/READ 1 MiB, WRITE 64 B at the end, CAS and FAA: ok")

	// The TCP export sees what verbs wrote: the same pool memory.
	tc, err := client.Dial(ctx, ccfg)
	if err != nil {
		return fmt.Errorf("TCP dial: %w", err)
	}
	defer tc.Close()
	clear(got)
	if err := tc.Read(ctx, got, 0); err != nil || !bytes.Equal(got, big) {
		return fmt.Errorf("TCP READ of what verbs wrote: equal %v, %v", bytes.Equal(got, big), err)
	}
	tail, w := make([]byte, 64), make([]byte, 8)
	if err := tc.Read(ctx, tail, end); err != nil || !bytes.Equal(tail, small) {
		return fmt.Errorf("TCP READ of the last 64 B: %q, %v", tail, err)
	}
	if err := tc.Read(ctx, w, word); err != nil || w[0] != 50 {
		return fmt.Errorf("TCP READ of the atomics' word: % x, %v (want 50)", w, err)
	}
	fmt.Println("rack: the TCP export reads the same bytes")

	// A wrong token is refused on both paths.
	bad := ccfg
	bad.Token[0] ^= 1
	if c, _, err := verbs.Open(ctx, bad, vcfg); !errors.Is(err, rdma.ErrDenied) {
		if c != nil {
			c.Close()
		}
		return fmt.Errorf("verbs with a wrong token: %v, want %v", err, rdma.ErrDenied)
	}
	if c, err := client.Dial(ctx, bad); !errors.Is(err, rdma.ErrDenied) {
		if c != nil {
			c.Close()
		}
		return fmt.Errorf("TCP with a wrong token: %v, want %v", err, rdma.ErrDenied)
	}
	fmt.Println("rack: a wrong token refused over verbs and TCP")

	// 64 B READ latency over each path, same link, one after the other.
	for _, p := range []struct {
		name string
		c    verbs.Conn
	}{{"verbs", conn}, {"TCP", tc}} {
		p50, err := readP50(ctx, p.c, 200)
		if err != nil {
			return fmt.Errorf("%s 64 B READs: %w", p.name, err)
		}
		mbps, err := readMBps(ctx, p.c, 8, len(big))
		if err != nil {
			return fmt.Errorf("%s 1 MiB READs: %w", p.name, err)
		}
		fmt.Printf("rack: figure: 64 B READ p50 over %s %v (200 READs); 1 MiB READ %.1f MB/s (8 READs)\n", p.name, p50, mbps)
	}

	// The test revokes the export now (Redfish DELETE): READs over verbs
	// go on until one is refused, and TCP is refused after it.
	fmt.Println(RevokeCue)
	b := make([]byte, 64)
	t0 := time.Now()
	for n := 0; ; n++ {
		err := conn.Read(ctx, b, 0)
		if err == nil {
			time.Sleep(20 * time.Millisecond)
			continue
		}
		if !errors.Is(err, rdma.ErrRevoked) {
			return fmt.Errorf("verbs READ after %d while the export is revoked: %w, want %v", n, err, rdma.ErrRevoked)
		}
		fmt.Printf("rack: verbs READ refused after %d more READs (%v): %v\n", n, time.Since(t0).Round(time.Millisecond), err)
		break
	}
	if err := tc.Read(ctx, b, 0); err == nil {
		return errors.New("TCP READ of the revoked export: no error")
	} else {
		fmt.Printf("rack: TCP READ of the revoked export refused: %v\n", err)
	}
	return nil
}

// RevokeCue is the line after which the test revokes the export.
const RevokeCue = "rack: READing until the export is revoked"

// readMBps is the throughput of n READs of size bytes, one after the other.
func readMBps(ctx context.Context, c verbs.Conn, n, size int) (float64, error) {
	b := make([]byte, size)
	t0 := time.Now()
	for i := range n {
		if err := c.Read(ctx, b, uint64(i%4)*uint64(size)); err != nil {
			return 0, err
		}
	}
	return float64(n*size) / time.Since(t0).Seconds() / 1e6, nil
}

func readP50(ctx context.Context, c verbs.Conn, n int) (time.Duration, error) {
	b := make([]byte, 64)
	ds := make([]time.Duration, n)
	for i := range ds {
		t0 := time.Now()
		if err := c.Read(ctx, b, uint64(i%64)*4096); err != nil {
			return 0, err
		}
		ds[i] = time.Since(t0)
	}
	slices.Sort(ds)
	return ds[n/2], nil
}
