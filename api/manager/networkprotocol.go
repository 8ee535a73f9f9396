package manager

import (
	"errors"
	"net"
	"net/http"
	"net/netip"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/labstack/echo/v4"

	"cxlpool/api/internal/pool"
	"cxlpool/api/redfish"
)

// The management computer's network and time: ManagerNetworkProtocol
// (host name, the HTTPS service, NTP) and EthernetInterfaces (ethernet.go).
//
// What is shown is read from the running system. What may be changed
// depends on who owns the computer: on the cxlpool image the box's init
// configures the network from cxlpool.conf on the data partition, and
// the daemon passes a NetworkConfig that edits that file (cmd/cxlpoold).
// The host name and NTP apply at once (the daemon sets the host name and
// wakes its SNTP client); an interface's address applies at the next boot
// (the answer carries ResetRequired), because changing it under the
// administrator's connection would cut the connection that made the
// change. Anywhere else (a developer's machine, the simulator) the host's
// operating system owns these settings: PATCH answers PropertyNotWritable
// saying so, and nothing pretends to have changed.

const (
	networkProtocolURI    = pool.ManagerURI + "/NetworkProtocol"
	httpsCertificatesURI  = networkProtocolURI + "/HTTPS/Certificates"
	ethernetInterfacesURI = pool.ManagerURI + "/EthernetInterfaces"

	// maxNTPServers bounds NTP.NTPServers: the client asks them in turn.
	maxNTPServers = 4
	ntpPort       = 123
)

// NetworkConfig is the box's own network and time configuration, which
// the service may change. The daemon provides one only when it runs from
// the cxlpool image.
type NetworkConfig interface {
	// NetworkSettings returns the stored settings (what applies at the
	// next boot).
	NetworkSettings() (NetworkSettings, error)
	// UpdateNetworkSettings calls update with the stored settings and
	// stores what it leaves, atomically with respect to other updates;
	// an error from update is returned as is, and nothing is stored. The
	// host name and NTP settings take effect at once, the interface's
	// address at the next boot.
	UpdateNetworkSettings(update func(*NetworkSettings) error) error
}

// NetworkSettings are the settings a NetworkConfig keeps.
type NetworkSettings struct {
	// HostName is the box's host name; empty: the system's default.
	HostName string
	// NTPEnabled turns time synchronisation with NTPServers on.
	NTPEnabled bool
	NTPServers []string
	// Interface is the one interface the image configures: by DHCP
	// (DHCPv4) or with the static IPv4Address (invalid: the interface is
	// left alone) and the default route via IPv4Gateway (invalid: none).
	Interface   string
	DHCPv4      bool
	IPv4Address netip.Prefix
	IPv4Gateway netip.Addr
}

// errHostOwnsNetwork refuses a change of prop where the host's operating
// system owns the network (no NetworkConfig).
func errHostOwnsNetwork(prop string) *redfish.Error {
	m := redfish.M("Base.PropertyNotWritable", prop).WithRelated(prop)
	m.Resolution = "The network and time settings of this computer belong to its operating system: cxlpoold is not " +
		"running from the cxlpool image here, so change them with the operating system's own tools."
	return redfish.NewError(http.StatusBadRequest, m)
}

// resetRequired is the message of a change that applies at the next boot.
func resetRequired() redfish.Msg {
	return redfish.M("Base.ResetRequired", pool.ManagerURI+"/Actions/Manager.Reset", "GracefulRestart")
}

var (
	hostLabel = `[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?`
	// hostNamePattern is one DNS label (RFC 1123): HostName carries no
	// domain.
	hostNamePattern = regexp.MustCompile(`^` + hostLabel + `$`)
	// dnsNamePattern is a DNS name, as an NTP server may be given.
	dnsNamePattern = regexp.MustCompile(`^` + hostLabel + `(?:\.` + hostLabel + `)*\.?$`)
)

type ntpPatch struct {
	ProtocolEnabled *bool     `json:"ProtocolEnabled"`
	NTPServers      *[]string `json:"NTPServers"`

	Port                   any `json:"Port" rf:"readonly"`
	NetworkSuppliedServers any `json:"NetworkSuppliedServers" rf:"readonly"`
}

type networkProtocolPatch struct {
	NTP *ntpPatch `json:"NTP"`

	ID          any `json:"Id" rf:"readonly"`
	Name        any `json:"Name" rf:"readonly"`
	Description any `json:"Description" rf:"readonly"`
	HostName    any `json:"HostName" rf:"readonly"` // EthernetInterface.HostName sets it
	FQDN        any `json:"FQDN" rf:"readonly"`
	HTTPS       any `json:"HTTPS" rf:"readonly"`
	HTTP        any `json:"HTTP" rf:"readonly"`
	Status      any `json:"Status" rf:"readonly"`
}

func (s *Server) networkRoutes() {
	s.Handle(http.MethodGet, networkProtocolURI, redfish.PrivApplianceView, func(c echo.Context) error {
		return s.WriteResource(c, http.StatusOK, s.networkProtocol(c))
	})
	s.Handle(http.MethodPatch, networkProtocolURI, redfish.PrivConfigureManager, s.patchNetworkProtocol)
	s.ethernetRoutes()
}

// managerNetworkLinks adds the Manager's links to its network resources,
// for the principals that may read them.
func (s *Server) managerNetworkLinks(o redfish.Obj, p *redfish.Principal) {
	if !p.Has(redfish.PrivApplianceView) {
		return
	}
	if s.HasRoute(networkProtocolURI) {
		o["NetworkProtocol"] = redfish.Link(networkProtocolURI)
	}
	if s.HasRoute(ethernetInterfacesURI) {
		o["EthernetInterfaces"] = redfish.Link(ethernetInterfacesURI)
	}
}

// networkSettings returns the stored settings and whether there are any
// (false: the host's operating system owns them).
func (s *Server) networkSettings() (NetworkSettings, bool) {
	if s.cfg.Network == nil {
		return NetworkSettings{}, false
	}
	ns, err := s.cfg.Network.NetworkSettings()
	if err != nil {
		s.log.Warn("reading the network settings", "err", err)
		return NetworkSettings{}, false
	}
	return ns, true
}

// hostNames returns the host name (one label) and, when the name the
// system knows has a domain, the fully qualified name.
func (s *Server) hostNames(ns NetworkSettings) (host, fqdn string) {
	h := ns.HostName
	if h == "" {
		h, _ = os.Hostname()
	}
	host, _, dotted := strings.Cut(h, ".")
	if dotted {
		fqdn = strings.TrimSuffix(h, ".")
	}
	return host, fqdn
}

// servedPort is the local port and scheme the request arrived on: the
// service's own listener.
func servedPort(r *http.Request) (tls bool, port int) {
	tls = r.TLS != nil
	port = 80
	if tls {
		port = 443
	}
	hostport := r.Host
	if a, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok {
		hostport = a.String()
	}
	if _, p, err := net.SplitHostPort(hostport); err == nil {
		if n, err := strconv.Atoi(p); err == nil {
			port = n
		}
	}
	return tls, port
}

func (s *Server) networkProtocol(c echo.Context) redfish.Obj {
	ns, owned := s.networkSettings()
	host, fqdn := s.hostNames(ns)
	tls, port := servedPort(c.Request())
	https := redfish.Obj{"ProtocolEnabled": tls, "Port": nil}
	plain := redfish.Obj{"ProtocolEnabled": !tls, "Port": nil}
	if tls {
		https["Port"] = port
	} else {
		plain["Port"] = port
	}
	if s.HasRoute(httpsCertificatesURI) {
		https["Certificates"] = redfish.Link(httpsCertificatesURI)
	}
	// Without the image the host's own time service (if any) is
	// unknown to the service: null, not a guess.
	ntp := redfish.Obj{"ProtocolEnabled": nil, "NTPServers": []string{}}
	if owned {
		servers := ns.NTPServers
		if servers == nil {
			servers = []string{}
		}
		ntp = redfish.Obj{"ProtocolEnabled": ns.NTPEnabled, "NTPServers": servers, "Port": ntpPort}
	}
	o := redfish.Obj{
		"@odata.id":   networkProtocolURI,
		"@odata.type": "#ManagerNetworkProtocol.v1_12_0.ManagerNetworkProtocol",
		"Id":          "NetworkProtocol",
		"Name":        "Manager Network Protocol",
		"Description": "The management computer's host name, the Redfish service's protocol and time synchronisation",
		"HostName":    host,
		"HTTPS":       https,
		"HTTP":        plain,
		"NTP":         ntp,
		"Status":      redfish.Obj{"State": "Enabled", "Health": "OK"},
	}
	if fqdn != "" {
		o["FQDN"] = fqdn
	}
	return o
}

func (s *Server) patchNetworkProtocol(c echo.Context) error {
	var req networkProtocolPatch
	if err := s.Decode(c, &req); err != nil {
		return err
	}
	if err := s.IfMatch(c, s.networkProtocol(c)); err != nil {
		return err
	}
	if req.NTP == nil || (req.NTP.ProtocolEnabled == nil && req.NTP.NTPServers == nil) {
		return s.WriteResource(c, http.StatusOK, s.networkProtocol(c))
	}
	if s.cfg.Network == nil {
		return errHostOwnsNetwork("NTP")
	}
	var servers []string
	if req.NTP.NTPServers != nil {
		var err *redfish.Error
		if servers, err = parseNTPServers(*req.NTP.NTPServers); err != nil {
			return err
		}
	}
	err := s.cfg.Network.UpdateNetworkSettings(func(ns *NetworkSettings) error {
		if req.NTP.NTPServers != nil {
			ns.NTPServers = servers
		}
		if req.NTP.ProtocolEnabled != nil {
			ns.NTPEnabled = *req.NTP.ProtocolEnabled
		}
		if ns.NTPEnabled && len(ns.NTPServers) == 0 {
			return redfish.ErrPropertyValueConflict("NTP/ProtocolEnabled", "NTP/NTPServers")
		}
		return nil
	})
	if err != nil {
		return networkUpdateError(err)
	}
	s.log.Info("NTP settings changed", "user", redfish.PrincipalOf(c).User)
	s.Publish(redfish.Event{MessageKey: redfish.MsgResourceChanged, Origin: networkProtocolURI})
	return s.WriteResource(c, http.StatusOK, s.networkProtocol(c))
}

// parseNTPServers checks NTP.NTPServers: host names or IP addresses, at
// most maxNTPServers; empty strings (a client's way of clearing a slot)
// and repeats are dropped.
func parseNTPServers(in []string) ([]string, *redfish.Error) {
	out := []string{}
	for i, srv := range in {
		srv = strings.TrimSpace(srv)
		if srv == "" || slices.Contains(out, srv) {
			continue
		}
		if _, err := netip.ParseAddr(srv); err != nil && (len(srv) > 253 || !dnsNamePattern.MatchString(srv)) {
			return nil, redfish.ErrPropertyValueFormat(srv, "NTP/NTPServers/"+strconv.Itoa(i))
		}
		out = append(out, srv)
	}
	if len(out) > maxNTPServers {
		return nil, redfish.NewError(http.StatusBadRequest, redfish.M("Base.ArraySizeTooLong", "NTP/NTPServers", maxNTPServers).WithRelated("NTP/NTPServers"))
	}
	return out, nil
}

// networkUpdateError passes validation errors through and reports a
// failure to store the settings.
func networkUpdateError(err error) error {
	var e *redfish.Error
	if errors.As(err, &e) {
		return e
	}
	return redfish.ErrInternal(err)
}
