package guest

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/u-root/u-root/pkg/dhclient"
	"github.com/vishvananda/netlink"
)

// The box on a management network takes its address by DHCP (net.dhcp,
// the default), through u-root's dhclient: it brings the link up, runs
// the DHCPv4 exchange (and DHCPv6 with net.dhcpv6) with insomniacslk's
// clients, and gives the lease. boxinit applies the lease itself rather
// than with the lease's Configure, which would also write the lease's
// name servers to /etc/resolv.conf unconditionally: the owner's net.dns
// replaces those, and must never be overwritten, even for a moment.

// ResolvConf is the resolver configuration the daemon's resolver (Go's,
// built with netgo) reads; it lives in the initramfs's tmpfs root.
const ResolvConf = "/etc/resolv.conf"

// dhcpClass is the vendor class (option 60) the box sends: u-root's
// default says "PXE UROOT", which would make a DHCP server take it for a
// network boot client.
const dhcpClass = "cxlpool"

// leaseRetry bounds the wait between failed rounds (no server answered).
const leaseRetry = time.Minute

// dhcp takes a lease on cfg.NetIface and keeps it for the box's life:
// each round asks again (a full exchange) at the lease's renewal time
// (T1, half the lease by default), and a round that gets no answer is
// retried after 2 s, 4 s, … up to a minute, keeping the address it has.
// It returns only when ctx ends or the interface cannot be found.
func (in *Init) dhcp(ctx context.Context, cfg Config) error {
	if err := waitPath(ctx, "/sys/class/net/"+cfg.NetIface, 10*time.Second); err != nil {
		return err
	}
	if cfg.NetAddress != "" {
		in.printf("network: net.address %s not used: net.dhcp is on", cfg.NetAddress)
	}
	if len(cfg.NameServers) > 0 {
		// The owner's name servers do not wait for a lease.
		if err := in.writeResolver(ResolvConf, cfg.NameServers, nil, nil, ""); err != nil {
			in.printf("network: %v", err)
		}
	}
	retry := 2 * time.Second
	for ctx.Err() == nil {
		link, err := dhclient.IfUp(cfg.NetIface, 10*time.Second)
		var renew time.Duration
		if err == nil {
			renew, err = in.dhcpRound(ctx, link, cfg)
		}
		wait := renew
		if err != nil {
			in.printf("network: DHCP on %s: %v; asking again in %v", cfg.NetIface, err, retry)
			wait, retry = retry, min(2*retry, leaseRetry)
		} else {
			retry = 2 * time.Second
		}
		select {
		case <-ctx.Done():
		case <-time.After(wait):
		}
	}
	return ctx.Err()
}

// dhcpRound runs one exchange per protocol and applies the leases; it
// returns when to ask again.
func (in *Init) dhcpRound(ctx context.Context, link netlink.Link, cfg Config) (time.Duration, error) {
	mods := []dhcpv4.Modifier{
		dhcpv4.WithOption(dhcpv4.OptClassIdentifier(dhcpClass)),
		dhcpv4.WithRequestedOptions(dhcpv4.OptionSubnetMask, dhcpv4.OptionRouter, dhcpv4.OptionDomainNameServer,
			dhcpv4.OptionDomainName, dhcpv4.OptionDNSDomainSearchList, dhcpv4.OptionNTPServers),
	}
	if cfg.HostName != "" {
		// The server may register the name in its DNS.
		mods = append(mods, dhcpv4.WithOption(dhcpv4.OptHostName(cfg.HostName)))
	}
	c := dhclient.Config{Timeout: 3 * time.Second, Retries: 2, Modifiers4: mods}
	start := time.Now()
	var dns []net.IP
	var search []string
	var domain string
	renew := 12 * time.Hour
	var errs []string
	got := false
	for r := range dhclient.SendRequests(ctx, []netlink.Link{link}, true, cfg.NetDHCPv6, c, 10*time.Second) {
		if r.Err != nil {
			errs = append(errs, fmt.Sprintf("%v: %v", r.Protocol, r.Err))
			continue
		}
		switch l := r.Lease.(type) {
		case *dhclient.Packet4:
			if err := applyLease4(link, l); err != nil {
				errs = append(errs, fmt.Sprintf("IPv4: %v", err))
				continue
			}
			got = true
			ns, sl, dom := l.GatherDNSSettings()
			dns, search, domain = append(ns, dns...), sl, dom
			lease := l.P.IPAddressLeaseTime(24 * time.Hour)
			renew = min(renew, l.P.IPAddressRenewalTime(lease/2))
			in.printf("network: %s DHCPv4 lease %s from %v for %v (router %v, DNS %v) in %v", cfg.NetIface,
				l.Lease(), l.P.ServerIdentifier(), lease, l.P.Router(), l.P.DNS(), time.Since(start).Round(time.Millisecond))
		case *dhclient.Packet6:
			ia := l.Lease()
			if ia == nil {
				errs = append(errs, "IPv6: lease without an address")
				continue
			}
			if err := netlink.AddrReplace(link, &netlink.Addr{IPNet: &net.IPNet{IP: ia.IPv6Addr, Mask: net.CIDRMask(128, 128)}}); err != nil {
				errs = append(errs, fmt.Sprintf("IPv6: %v", err))
				continue
			}
			got = true
			dns = append(dns, l.DNS()...)
			if t := ia.PreferredLifetime / 2; t > 0 {
				renew = min(renew, t)
			}
			in.printf("network: %s DHCPv6 lease %s (DNS %v)", cfg.NetIface, ia.IPv6Addr, l.DNS())
		}
	}
	if !got {
		if len(errs) == 0 {
			errs = append(errs, "no answer")
		}
		return 0, fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	for _, e := range errs {
		in.printf("network: DHCP on %s: %s", cfg.NetIface, e)
	}
	if len(cfg.NameServers) == 0 {
		if err := in.writeResolver(ResolvConf, nil, dns, search, domain); err != nil {
			in.printf("network: %v", err)
		}
	}
	return max(renew, 10*time.Second), nil
}

// applyLease4 gives the interface the lease's address and routes (the
// lease's classless static routes when it has them, RFC 3442, else its
// first router as the default route), as dhclient's Configure does but
// without its resolv.conf.
func applyLease4(link netlink.Link, p *dhclient.Packet4) error {
	if err := netlink.AddrReplace(link, &netlink.Addr{IPNet: p.Lease()}); err != nil {
		return fmt.Errorf("address %s: %w", p.Lease(), err)
	}
	var routes []*netlink.Route
	if rs := p.P.ClasslessStaticRoute(); rs != nil {
		for _, r := range rs {
			nr := &netlink.Route{LinkIndex: link.Attrs().Index, Dst: r.Dest, Gw: r.Router}
			if nr.Gw == nil || nr.Gw.Equal(net.IPv4zero) {
				nr.Scope = netlink.SCOPE_LINK
			}
			routes = append(routes, nr)
		}
	} else if gw := p.P.Router(); len(gw) > 0 {
		routes = append(routes, &netlink.Route{LinkIndex: link.Attrs().Index, Gw: gw[0]})
	}
	for _, r := range routes {
		if err := netlink.RouteReplace(r); err != nil {
			return fmt.Errorf("route %s: %w", r, err)
		}
	}
	return nil
}

// writeResolver writes the resolver configuration: the configured name
// servers (net.dns) if there are any, else the leases'. It is replaced
// atomically, so the daemon's resolver never reads half a file.
func (in *Init) writeResolver(path string, static []string, lease []net.IP, search []string, domain string) error {
	ns, from := lease, "the lease"
	if len(static) > 0 {
		ns, from = nil, "net.dns"
		for _, a := range static {
			if ip := net.ParseIP(a); ip != nil {
				ns = append(ns, ip)
			}
		}
	}
	ns = slices.CompactFunc(ns, func(a, b net.IP) bool { return a.Equal(b) })
	if len(ns) == 0 {
		return nil
	}
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".new")
	if err := dhclient.WriteDNSSettings(ns, search, domain, tmp); err != nil {
		return fmt.Errorf("resolver: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("resolver: %w", err)
	}
	in.printf("network: resolver %s: name servers %v (from %s)", path, ns, from)
	return nil
}
