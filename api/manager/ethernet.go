package manager

import (
	"cmp"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/labstack/echo/v4"

	"cxlpool/api/redfish"
)

// Managers/FM/EthernetInterfaces: the management computer's network
// interfaces (loopback aside), as the system reports them. On the image
// an administrator sets the host name (any interface: it is the box's)
// and whether the configured interface takes a DHCP lease or a static
// IPv4 address; see
// networkprotocol.go for who owns what and when changes apply.

// NetInterface is one network interface of the management computer.
type NetInterface struct {
	Name string
	MAC  net.HardwareAddr
	// Up: administratively enabled; Running: it has a link.
	Up, Running bool
	MTU         int
	// SpeedMbps is the link speed, 0 if unknown.
	SpeedMbps int
	Addrs     []netip.Prefix
}

// SystemInterfaces lists this computer's interfaces except loopback, with
// their link speeds where Linux reports them (/sys/class/net).
func SystemInterfaces() ([]NetInterface, error) {
	ifs, err := net.Interfaces()
	if err != nil {
		return nil, err
	}
	var out []NetInterface
	for _, nif := range ifs {
		if nif.Flags&net.FlagLoopback != 0 {
			continue
		}
		ni := NetInterface{Name: nif.Name, MAC: nif.HardwareAddr, MTU: nif.MTU,
			Up: nif.Flags&net.FlagUp != 0, Running: nif.Flags&net.FlagRunning != 0}
		addrs, _ := nif.Addrs()
		for _, a := range addrs {
			ipn, ok := a.(*net.IPNet)
			if !ok {
				continue
			}
			ip, ok := netip.AddrFromSlice(ipn.IP)
			if !ok {
				continue
			}
			ones, _ := ipn.Mask.Size()
			ni.Addrs = append(ni.Addrs, netip.PrefixFrom(ip.Unmap(), ones))
		}
		// Unknown (no file, not Linux, or -1 while down): left out.
		if b, err := os.ReadFile(filepath.Join("/sys/class/net", nif.Name, "speed")); err == nil {
			if n, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && n > 0 {
				ni.SpeedMbps = n
			}
		}
		out = append(out, ni)
	}
	return out, nil
}

func ethernetURI(name string) string { return ethernetInterfacesURI + "/" + url.PathEscape(name) }

type ipv4StaticPatch struct {
	Address    *string `json:"Address"`
	SubnetMask *string `json:"SubnetMask"`
	Gateway    *string `json:"Gateway"` // "" removes the default route

	AddressOrigin any `json:"AddressOrigin" rf:"readonly"`
}

type dhcpv4Patch struct {
	DHCPEnabled *bool `json:"DHCPEnabled"`
}

type ethernetPatch struct {
	HostName            *string             `json:"HostName"`
	IPv4StaticAddresses *[]*ipv4StaticPatch `json:"IPv4StaticAddresses"`
	DHCPv4              *dhcpv4Patch        `json:"DHCPv4"`

	ID               any `json:"Id" rf:"readonly"`
	Name             any `json:"Name" rf:"readonly"`
	Description      any `json:"Description" rf:"readonly"`
	MACAddress       any `json:"MACAddress" rf:"readonly"`
	LinkStatus       any `json:"LinkStatus" rf:"readonly"`
	InterfaceEnabled any `json:"InterfaceEnabled" rf:"readonly"`
	MTUSize          any `json:"MTUSize" rf:"readonly"`
	SpeedMbps        any `json:"SpeedMbps" rf:"readonly"`
	FQDN             any `json:"FQDN" rf:"readonly"`
	IPv4Addresses    any `json:"IPv4Addresses" rf:"readonly"`
	IPv6Addresses    any `json:"IPv6Addresses" rf:"readonly"`
	Status           any `json:"Status" rf:"readonly"`
}

func (s *Server) ethernetRoutes() {
	s.Handle(http.MethodGet, ethernetInterfacesURI, redfish.PrivApplianceView, func(c echo.Context) error {
		ifs, err := s.netInterfaces()
		if err != nil {
			return err
		}
		ns, owned := s.networkSettings()
		uris := make([]string, len(ifs))
		byURI := map[string]NetInterface{}
		for i, ni := range ifs {
			uris[i] = ethernetURI(ni.Name)
			byURI[uris[i]] = ni
		}
		return s.WriteCollection(c, redfish.Collection{ODataID: ethernetInterfacesURI,
			ODataType: "#EthernetInterfaceCollection.EthernetInterfaceCollection",
			Name:      "Manager Ethernet Interfaces", Members: uris,
			Expand: func(uri string) (any, error) { return s.ethernetBody(byURI[uri], ns, owned), nil }})
	})
	s.Handle(http.MethodGet, ethernetInterfacesURI+"/:id", redfish.PrivApplianceView, func(c echo.Context) error {
		ni, err := s.findInterface(c)
		if err != nil {
			return err
		}
		ns, owned := s.networkSettings()
		return s.WriteResource(c, http.StatusOK, s.ethernetBody(ni, ns, owned))
	})
	s.Handle(http.MethodPatch, ethernetInterfacesURI+"/:id", redfish.PrivConfigureManager, s.patchEthernet)
}

// netInterfaces lists the interfaces, ordered by name.
func (s *Server) netInterfaces() ([]NetInterface, error) {
	list := s.cfg.NetInterfaces
	if list == nil {
		list = SystemInterfaces
	}
	ifs, err := list()
	if err != nil {
		return nil, redfish.ErrInternal(err)
	}
	slices.SortFunc(ifs, func(a, b NetInterface) int { return cmp.Compare(a.Name, b.Name) })
	return ifs, nil
}

func (s *Server) findInterface(c echo.Context) (NetInterface, error) {
	id, err := url.PathUnescape(c.Param("id"))
	if err != nil {
		id = c.Param("id")
	}
	ifs, err := s.netInterfaces()
	if err != nil {
		return NetInterface{}, err
	}
	for _, ni := range ifs {
		if ni.Name == id {
			return ni, nil
		}
	}
	return NetInterface{}, redfish.ErrResourceNotFound("EthernetInterface", id)
}

func (s *Server) ethernetBody(ni NetInterface, ns NetworkSettings, owned bool) redfish.Obj {
	host, fqdn := s.hostNames(ns)
	configured := owned && ns.Interface == ni.Name
	v4, v6 := []redfish.Obj{}, []redfish.Obj{}
	for _, p := range ni.Addrs {
		a := p.Addr()
		if a.Is4() {
			e := redfish.Obj{"Address": a.String(), "SubnetMask": subnetMask(p.Bits())}
			switch {
			case configured && ns.IPv4Address.IsValid() && ns.IPv4Address.Addr() == a:
				e["AddressOrigin"] = "Static"
				if ns.IPv4Gateway.IsValid() {
					e["Gateway"] = ns.IPv4Gateway.String()
				}
			case a.IsLinkLocalUnicast():
				e["AddressOrigin"] = "IPv4LinkLocal"
			case configured && ns.DHCPv4:
				e["AddressOrigin"] = "DHCP"
			}
			v4 = append(v4, e)
			continue
		}
		e := redfish.Obj{"Address": a.String(), "PrefixLength": p.Bits()}
		if a.IsLinkLocalUnicast() {
			e["AddressOrigin"] = "LinkLocal"
		}
		v6 = append(v6, e)
	}
	state, link := "Disabled", "NoLink"
	if ni.Up {
		state = "Enabled"
	}
	if ni.Running {
		link = "LinkUp"
	}
	o := redfish.Obj{
		"@odata.id":        ethernetURI(ni.Name),
		"@odata.type":      "#EthernetInterface.v1_12_4.EthernetInterface",
		"Id":               ni.Name,
		"Name":             "Manager Ethernet Interface " + ni.Name,
		"Description":      "A network interface of the management computer",
		"InterfaceEnabled": ni.Up,
		"LinkStatus":       link,
		"HostName":         host,
		"IPv4Addresses":    v4,
		"IPv6Addresses":    v6,
		"Status":           redfish.Obj{"State": state, "Health": "OK"},
	}
	if len(ni.MAC) == 6 {
		o["MACAddress"] = ni.MAC.String()
	}
	if ni.MTU > 0 {
		o["MTUSize"] = ni.MTU
	}
	if ni.SpeedMbps > 0 {
		o["SpeedMbps"] = ni.SpeedMbps
	}
	// The OCP baseline profile expects FQDN; without a domain the name
	// is the host name alone.
	if o["FQDN"] = fqdn; fqdn == "" {
		o["FQDN"] = host
	}
	if owned {
		// What the image configures (at the next boot): one interface,
		// by DHCP or statically.
		static := []redfish.Obj{}
		if configured && ns.IPv4Address.IsValid() {
			e := redfish.Obj{"Address": ns.IPv4Address.Addr().String(), "SubnetMask": subnetMask(ns.IPv4Address.Bits())}
			if ns.IPv4Gateway.IsValid() {
				e["Gateway"] = ns.IPv4Gateway.String()
			}
			static = append(static, e)
		}
		o["IPv4StaticAddresses"] = static
		o["DHCPv4"] = redfish.Obj{"DHCPEnabled": configured && ns.DHCPv4}
	}
	return o
}

// subnetMask is an IPv4 prefix length as a dotted mask.
func subnetMask(bits int) string {
	return net.IP(net.CIDRMask(bits, 32)).String()
}

func (s *Server) patchEthernet(c echo.Context) error {
	ni, err := s.findInterface(c)
	if err != nil {
		return err
	}
	var req ethernetPatch
	if err := s.Decode(c, &req); err != nil {
		return err
	}
	ns, owned := s.networkSettings()
	if err := s.IfMatch(c, s.ethernetBody(ni, ns, owned)); err != nil {
		return err
	}
	if req.HostName == nil && req.IPv4StaticAddresses == nil && req.DHCPv4 == nil {
		return s.WriteResource(c, http.StatusOK, s.ethernetBody(ni, ns, owned))
	}
	if s.cfg.Network == nil {
		switch {
		case req.HostName != nil:
			return errHostOwnsNetwork("HostName")
		case req.IPv4StaticAddresses != nil:
			return errHostOwnsNetwork("IPv4StaticAddresses")
		default:
			return errHostOwnsNetwork("DHCPv4")
		}
	}
	if req.HostName != nil && !hostNamePattern.MatchString(*req.HostName) {
		return redfish.ErrPropertyValueFormat(*req.HostName, "HostName")
	}
	setDHCP := req.DHCPv4 != nil && req.DHCPv4.DHCPEnabled != nil
	addressChanged := false
	err = s.cfg.Network.UpdateNetworkSettings(func(ns *NetworkSettings) error {
		if req.HostName != nil {
			ns.HostName = *req.HostName
		}
		if req.IPv4StaticAddresses == nil && !setDHCP {
			return nil
		}
		mine := ns.Interface == ni.Name
		dhcp := mine && ns.DHCPv4
		if setDHCP {
			dhcp = *req.DHCPv4.DHCPEnabled
		}
		var current []netip.Prefix
		if mine && ns.IPv4Address.IsValid() {
			current = []netip.Prefix{ns.IPv4Address}
		}
		addr, gw := netip.Prefix{}, netip.Addr{}
		if len(current) > 0 {
			addr, gw = current[0], ns.IPv4Gateway
		}
		if req.IPv4StaticAddresses != nil {
			var err error
			if addr, gw, err = mergeIPv4Static(*req.IPv4StaticAddresses, current, gw, dhcp); err != nil {
				return err
			}
			// The image uses the lease or the static address, never
			// both: a static address waiting behind DHCP would be
			// shown as configured and not be.
			if dhcp && addr.IsValid() {
				m := redfish.M("Base.PropertyValueConflict", "IPv4StaticAddresses", "DHCPv4/DHCPEnabled").WithRelated("IPv4StaticAddresses")
				m.Resolution = "Set DHCPv4/DHCPEnabled to false in the same request to use a static address, or send IPv4StaticAddresses [] to keep DHCP."
				return redfish.NewError(http.StatusBadRequest, m)
			}
		}
		switch {
		case dhcp:
			// The lease replaces the static address.
			addr, gw = netip.Prefix{}, netip.Addr{}
		case !addr.IsValid():
			m := redfish.M("Base.PropertyValueConflict", "DHCPv4/DHCPEnabled", "IPv4StaticAddresses").WithRelated("DHCPv4/DHCPEnabled")
			m.Resolution = "Give the interface a static address in IPv4StaticAddresses in the same request: with neither DHCP nor a static address the box is unreachable after the next boot."
			return redfish.NewError(http.StatusBadRequest, m)
		}
		if ns.Interface != ni.Name || ns.IPv4Address != addr || ns.IPv4Gateway != gw || ns.DHCPv4 != dhcp {
			addressChanged = true
		}
		// The image configures one interface: this one from now on.
		ns.Interface, ns.DHCPv4, ns.IPv4Address, ns.IPv4Gateway = ni.Name, dhcp, addr, gw
		return nil
	})
	if err != nil {
		return networkUpdateError(err)
	}
	s.log.Info("network settings changed", "interface", ni.Name, "user", redfish.PrincipalOf(c).User, "at next boot", addressChanged)
	s.Publish(redfish.Event{MessageKey: redfish.MsgResourceChanged, Origin: ethernetURI(ni.Name)})
	ns, owned = s.networkSettings()
	body := s.ethernetBody(ni, ns, owned)
	if addressChanged {
		reg := s.Registries()
		body["@Message.ExtendedInfo"] = []redfish.Message{reg.Resolve(resetRequired())}
	}
	return s.WriteResource(c, http.StatusOK, body)
}

// mergeIPv4Static applies an IPv4StaticAddresses PATCH to the current
// list (at most one address, with the default gateway): by Redfish array
// rules an element {} keeps the current one, null removes it, and an
// object's properties replace the current ones, [] clears the list. The
// result must be one address, or none (an invalid prefix) when dhcp: an
// interface with neither would leave the box unreachable after the next
// boot.
func mergeIPv4Static(patch []*ipv4StaticPatch, current []netip.Prefix, gw netip.Addr, dhcp bool) (netip.Prefix, netip.Addr, error) {
	const prop = "IPv4StaticAddresses"
	type entry struct {
		addr, mask, gw string
	}
	var list []entry
	for i, p := range patch {
		var e entry
		if i < len(current) {
			e = entry{current[i].Addr().String(), subnetMask(current[i].Bits()), ""}
			if gw.IsValid() {
				e.gw = gw.String()
			}
		}
		if p == nil {
			continue // removed
		}
		if p.Address != nil {
			e.addr = *p.Address
		}
		if p.SubnetMask != nil {
			e.mask = *p.SubnetMask
		}
		if p.Gateway != nil {
			e.gw = *p.Gateway
		}
		path := prop + "/" + strconv.Itoa(i)
		if e.addr == "" {
			return netip.Prefix{}, netip.Addr{}, redfish.ErrPropertyMissing(path + "/Address")
		}
		if e.mask == "" {
			return netip.Prefix{}, netip.Addr{}, redfish.ErrPropertyMissing(path + "/SubnetMask")
		}
		list = append(list, e)
	}
	// Elements past the request's end stay, except that an empty array
	// clears the list.
	for i := len(patch); len(patch) > 0 && i < len(current); i++ {
		list = append(list, entry{current[i].Addr().String(), subnetMask(current[i].Bits()), gw.String()})
	}
	if len(list) < 1 && dhcp {
		return netip.Prefix{}, netip.Addr{}, nil
	}
	if len(list) < 1 {
		m := redfish.M("Base.ArraySizeTooShort", prop, 1).WithRelated(prop)
		m.Resolution = "Keep one static address, or set DHCPv4/DHCPEnabled to true in the same request: with neither the box is unreachable after the next boot."
		return netip.Prefix{}, netip.Addr{}, redfish.NewError(http.StatusBadRequest, m)
	}
	if len(list) > 1 {
		return netip.Prefix{}, netip.Addr{}, redfish.NewError(http.StatusBadRequest, redfish.M("Base.ArraySizeTooLong", prop, 1).WithRelated(prop))
	}
	e, path := list[0], prop+"/0"
	a, err := netip.ParseAddr(e.addr)
	if err != nil || !a.Is4() {
		return netip.Prefix{}, netip.Addr{}, redfish.ErrPropertyValueFormat(e.addr, path+"/Address")
	}
	m, err := netip.ParseAddr(e.mask)
	if err != nil || !m.Is4() {
		return netip.Prefix{}, netip.Addr{}, redfish.ErrPropertyValueFormat(e.mask, path+"/SubnetMask")
	}
	mb := m.As4()
	bits, size := net.IPMask(mb[:]).Size()
	if size != 32 || bits == 0 {
		return netip.Prefix{}, netip.Addr{}, incorrect(path+"/SubnetMask", e.mask)
	}
	pfx := netip.PrefixFrom(a, bits)
	net4 := pfx.Masked().Addr()
	// Global unicast covers the private ranges; it excludes loopback,
	// link-local, multicast and broadcast.
	if !a.IsGlobalUnicast() || (bits <= 30 && (a == net4 || a == lastAddr(pfx))) {
		return netip.Prefix{}, netip.Addr{}, incorrect(path+"/Address", e.addr)
	}
	var g netip.Addr
	if e.gw != "" {
		if g, err = netip.ParseAddr(e.gw); err != nil || !g.Is4() {
			return netip.Prefix{}, netip.Addr{}, redfish.ErrPropertyValueFormat(e.gw, path+"/Gateway")
		}
		if !pfx.Masked().Contains(g) || g == a {
			return netip.Prefix{}, netip.Addr{}, redfish.ErrPropertyValueConflict(path+"/Gateway", path+"/Address")
		}
	}
	return pfx, g, nil
}

func incorrect(prop, value string) *redfish.Error {
	return redfish.NewError(http.StatusBadRequest, redfish.M("Base.PropertyValueIncorrect", prop, value).WithRelated(prop))
}

// lastAddr is the broadcast address of an IPv4 prefix.
func lastAddr(p netip.Prefix) netip.Addr {
	b := p.Masked().Addr().As4()
	for i := p.Bits(); i < 32; i++ {
		b[i/8] |= 0x80 >> (i % 8)
	}
	return netip.AddrFrom4(b)
}
