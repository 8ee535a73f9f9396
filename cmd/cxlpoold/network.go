package main

import (
	"log/slog"
	"net/http"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"

	"cxlpool/api"
	"cxlpool/api/redfish"
	"cxlpool/image/guest"
)

// confNetwork is the API's NetworkConfig on the box image: the settings
// live in the data partition's cxlpool.conf, which the image's init reads
// at boot (the interface's address), and the daemon applies the host name
// and NTP at once.
type confNetwork struct {
	// The init's three configuration layers (guest.Config.LoadLayers);
	// changes are written to data.
	defaults, data, cmdline string
	// setHostname sets the kernel's host name.
	setHostname func(string) error
	// ntpChanged wakes the time synchronisation after a change.
	ntpChanged func()
	// resolvConf is the resolver's configuration, which boxinit writes
	// from the DHCP lease or net.dns: without any of them NTP servers can
	// only be given by address.
	resolvConf string
	log        *slog.Logger

	mu sync.Mutex
}

func (n *confNetwork) load() (guest.Config, error) {
	var c guest.Config
	err := c.LoadLayers(n.defaults, n.data, n.cmdline)
	return c, err
}

func settingsOf(c guest.Config) api.NetworkSettings {
	s := api.NetworkSettings{HostName: c.HostName, NTPEnabled: c.NTPEnabled,
		NTPServers: slices.Clone(c.NTPServers), Interface: c.NetIface, DHCPv4: c.NetDHCP}
	if p, err := netip.ParsePrefix(c.NetAddress); err == nil {
		s.IPv4Address = p
	}
	if g, err := netip.ParseAddr(c.NetGateway); err == nil {
		s.IPv4Gateway = g
	}
	return s
}

// NetworkSettings returns what the layers say now.
func (n *confNetwork) NetworkSettings() (api.NetworkSettings, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	c, err := n.load()
	if err != nil {
		return api.NetworkSettings{}, err
	}
	return settingsOf(c), nil
}

// UpdateNetworkSettings writes the settings update changed to the data
// partition's file, then sets the host name and wakes the NTP client if
// theirs changed. A host name the kernel refuses now is still stored: the
// next start applies it.
func (n *confNetwork) UpdateNetworkSettings(update func(*api.NetworkSettings) error) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	c, err := n.load()
	if err != nil {
		return err
	}
	old := settingsOf(c)
	s := settingsOf(c)
	if err := update(&s); err != nil {
		return err
	}
	_, noResolver := os.Stat(n.resolvConf)
	if noResolver != nil && !s.DHCPv4 && len(c.NameServers) == 0 && !slices.Equal(s.NTPServers, old.NTPServers) {
		for i, srv := range s.NTPServers {
			if _, err := netip.ParseAddr(srv); err != nil {
				prop := "NTP/NTPServers/" + strconv.Itoa(i)
				m := redfish.M("Base.PropertyValueIncorrect", prop, srv).WithRelated(prop)
				m.Resolution = "This box has no DNS resolver configured (no DHCP lease, no net.dns name servers): give NTP servers by IP address."
				return redfish.NewError(http.StatusBadRequest, m)
			}
		}
	}
	set := map[string]string{}
	if s.HostName != old.HostName {
		set["net.hostname"] = s.HostName
	}
	if s.NTPEnabled != old.NTPEnabled {
		set["ntp.enabled"] = strconv.FormatBool(s.NTPEnabled)
	}
	if !slices.Equal(s.NTPServers, old.NTPServers) {
		set["ntp.servers"] = strings.Join(s.NTPServers, " ")
	}
	if s.Interface != old.Interface {
		set["net.iface"] = s.Interface
	}
	if s.DHCPv4 != old.DHCPv4 {
		set["net.dhcp"] = strconv.FormatBool(s.DHCPv4)
	}
	if s.IPv4Address != old.IPv4Address {
		set["net.address"] = ""
		if s.IPv4Address.IsValid() {
			set["net.address"] = s.IPv4Address.String()
		}
	}
	if s.IPv4Gateway != old.IPv4Gateway {
		set["net.gateway"] = ""
		if s.IPv4Gateway.IsValid() {
			set["net.gateway"] = s.IPv4Gateway.String()
		}
	}
	if len(set) == 0 {
		return nil
	}
	if err := guest.SetConfigValues(n.data, set); err != nil {
		return err
	}
	if _, ok := set["net.hostname"]; ok && s.HostName != "" {
		if err := n.setHostname(s.HostName); err != nil {
			n.log.Warn("host name stored, not set now: it applies at the next start", "name", s.HostName, "err", err)
		}
	}
	_, en := set["ntp.enabled"]
	_, srv := set["ntp.servers"]
	if (en || srv) && n.ntpChanged != nil {
		n.ntpChanged()
	}
	return nil
}

// ntpSettings is the time synchronisation's view of the settings.
func (n *confNetwork) ntpSettings() (bool, []string) {
	s, err := n.NetworkSettings()
	if err != nil {
		n.log.Warn("reading the NTP settings", "err", err)
		return false, nil
	}
	return s.NTPEnabled, s.NTPServers
}

// applyHostname sets the configured host name, at start.
func (n *confNetwork) applyHostname() {
	s, err := n.NetworkSettings()
	if err != nil || s.HostName == "" {
		return
	}
	if err := n.setHostname(s.HostName); err != nil {
		n.log.Warn("setting the host name", "name", s.HostName, "err", err)
	}
}
