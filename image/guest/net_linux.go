package guest

import (
	"encoding/binary"
	"fmt"
	"net"

	"golang.org/x/sys/unix"
)

// configureInterface gives iface the address cidr, brings it up and adds
// a default route via gw (if not empty), with ioctls and one netlink
// message: running u-root's ip three times would cost a second of CPU
// under emulation while the daemon starts.
func configureInterface(iface, cidr, gw string) error {
	ip, ipnet, err := net.ParseCIDR(cidr)
	if err != nil || ip.To4() == nil {
		return fmt.Errorf("address %q: want IPv4 CIDR", cidr)
	}
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	set := func(req uint, addr []byte, what string) error {
		ifr, err := unix.NewIfreq(iface)
		if err != nil {
			return err
		}
		if err := ifr.SetInet4Addr(addr); err != nil {
			return err
		}
		if err := unix.IoctlIfreq(fd, req, ifr); err != nil {
			return fmt.Errorf("%s %s: %w", what, iface, err)
		}
		return nil
	}
	if err := set(unix.SIOCSIFADDR, ip.To4(), "set address"); err != nil {
		return err
	}
	if err := set(unix.SIOCSIFNETMASK, net.IP(ipnet.Mask).To4(), "set netmask"); err != nil {
		return err
	}
	ifr, err := unix.NewIfreq(iface)
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("get flags %s: %w", iface, err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("up %s: %w", iface, err)
	}
	if gw == "" {
		return nil
	}
	g := net.ParseIP(gw).To4()
	if g == nil {
		return fmt.Errorf("gateway %q: want IPv4", gw)
	}
	nif, err := net.InterfaceByName(iface)
	if err != nil {
		return err
	}
	return addDefaultRoute(g, nif.Index)
}

// addDefaultRoute sends RTM_NEWROUTE 0.0.0.0/0 via gw dev index and
// waits for the kernel's acknowledgement.
func addDefaultRoute(gw net.IP, index int) error {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_ROUTE)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return err
	}
	attr := func(typ uint16, data []byte) []byte {
		b := make([]byte, unix.SizeofRtAttr+len(data))
		binary.NativeEndian.PutUint16(b, uint16(len(b)))
		binary.NativeEndian.PutUint16(b[2:], typ)
		copy(b[unix.SizeofRtAttr:], data)
		for len(b)%4 != 0 {
			b = append(b, 0)
		}
		return b
	}
	oif := make([]byte, 4)
	binary.NativeEndian.PutUint32(oif, uint32(index))
	body := []byte{unix.AF_INET, 0, 0, 0, unix.RT_TABLE_MAIN, unix.RTPROT_BOOT, unix.RT_SCOPE_UNIVERSE, unix.RTN_UNICAST,
		0, 0, 0, 0} // struct rtmsg, flags 0
	body = append(body, attr(unix.RTA_GATEWAY, gw)...)
	body = append(body, attr(unix.RTA_OIF, oif)...)
	msg := make([]byte, unix.SizeofNlMsghdr, unix.SizeofNlMsghdr+len(body))
	msg = append(msg, body...)
	binary.NativeEndian.PutUint32(msg, uint32(len(msg)))
	binary.NativeEndian.PutUint16(msg[4:], unix.RTM_NEWROUTE)
	binary.NativeEndian.PutUint16(msg[6:], unix.NLM_F_REQUEST|unix.NLM_F_ACK|unix.NLM_F_CREATE|unix.NLM_F_EXCL)
	binary.NativeEndian.PutUint32(msg[8:], 1)
	if err := unix.Sendto(fd, msg, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return fmt.Errorf("add default route: %w", err)
	}
	buf := make([]byte, 4096)
	n, _, err := unix.Recvfrom(fd, buf, 0)
	if err != nil {
		return fmt.Errorf("add default route: %w", err)
	}
	// The answer is one nlmsghdr of type NLMSG_ERROR whose payload starts
	// with the (negated) errno, 0 for success.
	b := buf[:n]
	if len(b) < unix.SizeofNlMsghdr+4 || binary.NativeEndian.Uint16(b[4:]) != unix.NLMSG_ERROR {
		return fmt.Errorf("add default route: unexpected answer of %d bytes", n)
	}
	if e := int32(binary.NativeEndian.Uint32(b[unix.SizeofNlMsghdr:])); e != 0 && unix.Errno(-e) != unix.EEXIST {
		return fmt.Errorf("add default route via %s: %w", gw, unix.Errno(-e))
	}
	return nil
}
