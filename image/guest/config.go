// Package guest is the box's init (the u-root "uinit": the image's
// cxlpoold started as `cxlpoold boxinit`): it loads the kernel modules (side by side, each after
// the ones it depends on), brings up the network, mounts the data
// partition, links the virtio-serial port of the device link, then runs
// cxlpoold under a supervisor that checks that it answers on its API,
// commits a trial boot (image/update) once it does, and restarts it if it
// dies; once it answers, the console gets the operator's shell.
//
// Configuration comes from three places, later ones winning:
//
//  1. /etc/cxlpool/boxinit.conf in the initramfs (DefaultConfig),
//  2. cxlpool.conf at the root of the data partition (the owner's
//     settings; the build writes DataConfigTemplate there),
//  3. the kernel command line, as cxlpool.KEY=VALUE (the boot loader
//     passes cxlpool.slot=a|b; tests pass cxlpool.bare=1 and others).
//
// The files hold "key = value" lines; # starts a comment.
package guest

import (
	"bufio"
	"fmt"
	"io"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"time"
)

// DefaultConfig is /etc/cxlpool/boxinit.conf: the built-in settings.
const DefaultConfig = `# cxlpool box init defaults (see image/README.md). Override them in
# cxlpool.conf on the data partition or with cxlpool.KEY=VALUE on the
# kernel command line.
device = virtio:/dev/virtio-ports/cxlpool.mctp
listen = 0.0.0.0:8443
http = false
data = /data/cxlpool
log-level = info
disk = /dev/vda
net.iface = eth0
net.dhcp = true
health.timeout = 180s
data.sync = false
daemon.env = GOGC=400
`

// DataConfigTemplate is the cxlpool.conf the build puts on the data
// partition.
const DataConfigTemplate = `# cxlpool settings for this box; they override /etc/cxlpool/boxinit.conf.
# device = tty:/dev/ttyUSB0?baud=115200
# listen = 0.0.0.0:8443
# net.dhcp = true             (DHCPv4 lease, renewed; false: the static address below)
# net.dhcpv6 = false
# net.address = 192.168.1.50/24
# net.gateway = 192.168.1.1
# net.dns = 192.168.1.1        (name servers; they replace the lease's)
# net.hostname = cxlpool-1
# ntp.enabled = true
# ntp.servers = 192.168.1.1 pool.ntp.org
# admin-password = (first start only; otherwise one is generated and shown on the console)
# export.listen = 0.0.0.0:7000  (serve exports to remote racks: TCP, and RDMA verbs when there is a device)
# export.rdma = auto           (auto, off, or a device name: rxe0, mlx5_0)
# rdma.rxe = eth1              (make a soft-RoCE device, rxe0, on this NIC; not with a real RDMA NIC)
# rdma.address = 10.0.0.1/24   (static address of the rdma.rxe NIC when it is not net.iface)
# rdma.modules = mlx5_ib       (kernel modules of a real RDMA NIC, loaded before the daemon starts)
`

// Config is the init's settings.
type Config struct {
	Device        string        // fabric/serial address of the device link
	Listen        string        // API listen address
	HTTP          bool          // plain HTTP (development only)
	Data          string        // daemon data directory (on the data partition)
	LogLevel      string        // daemon log level
	Disk          string        // the box disk (GPT, image/disk)
	NetIface      string        // interface to configure
	NetDHCP       bool          // net.dhcp: take a DHCPv4 lease (the static address is then not used)
	NetDHCPv6     bool          // net.dhcpv6: take a DHCPv6 lease too
	NetAddress    string        // CIDR; empty: leave the interface alone (without DHCP)
	NetGateway    string        // default route; empty: none
	NameServers   []string      // net.dns: name servers for /etc/resolv.conf, space-separated IP addresses; they replace the lease's
	HealthTimeout time.Duration // how long the daemon may take to answer
	AdminPassword string        // first start's admin password
	Slot          string        // booted slot (from the boot loader)
	Bare          bool          // only the shell: the boot-time baseline
	Extra         []string      // more daemon flags (daemon.args)
	Env           []string      // more daemon environment, KEY=VALUE (daemon.env)
	DataSync      bool          // mount the data partition synchronously (data.sync; slow, and not needed for the daemon's files)
	// Host name and time: the daemon applies them (cmd/cxlpoold) and
	// changes them through the Redfish API (settings.go).
	HostName   string   // net.hostname; empty: the kernel's default
	NTPEnabled bool     // ntp.enabled
	NTPServers []string // ntp.servers, space-separated
	// Exports to remote racks (the daemon's --export-listen and
	// --export-rdma) and the RDMA device they are served over.
	ExportListen string   // export.listen; empty: no export server
	ExportRDMA   string   // export.rdma; empty: the daemon's default (auto)
	RDMARxe      string   // rdma.rxe: the NIC to put soft-RoCE (rxe0) on; empty: none
	RDMAAddress  string   // rdma.address: the rdma.rxe NIC's static IPv4 CIDR (when it is not net.iface)
	RDMAModules  []string // rdma.modules: a real RDMA NIC's kernel modules, loaded before the daemon's start
}

// Apply sets key to value.
func (c *Config) Apply(key, value string) error {
	var err error
	switch key {
	case "device":
		c.Device = value
	case "listen":
		c.Listen = value
	case "http":
		c.HTTP, err = strconv.ParseBool(value)
	case "data":
		c.Data = value
	case "log-level":
		c.LogLevel = value
	case "disk":
		c.Disk = value
	case "net.iface":
		c.NetIface = value
	case "net.address":
		c.NetAddress = value
	case "net.gateway":
		c.NetGateway = value
	case "net.dhcp":
		c.NetDHCP, err = strconv.ParseBool(value)
	case "net.dhcpv6":
		c.NetDHCPv6, err = strconv.ParseBool(value)
	case "net.dns":
		c.NameServers = nil
		for _, a := range strings.Fields(value) {
			if _, perr := netip.ParseAddr(a); perr != nil {
				err = fmt.Errorf("%q is not an IP address", a)
				break
			}
			c.NameServers = append(c.NameServers, a)
		}
	case "health.timeout":
		c.HealthTimeout, err = time.ParseDuration(value)
	case "admin-password":
		c.AdminPassword = value
	case "slot":
		c.Slot = value
	case "bare":
		c.Bare, err = strconv.ParseBool(value)
	case "daemon.args":
		c.Extra = strings.Fields(value)
	case "data.sync":
		c.DataSync, err = strconv.ParseBool(value)
	case "daemon.env":
		c.Env = strings.Fields(value)
	case "net.hostname":
		c.HostName = value
	case "ntp.enabled":
		c.NTPEnabled, err = strconv.ParseBool(value)
	case "ntp.servers":
		c.NTPServers = strings.Fields(value)
	case "export.listen":
		c.ExportListen = value
	case "export.rdma":
		c.ExportRDMA = value
	case "rdma.rxe":
		c.RDMARxe = value
	case "rdma.address":
		if _, perr := netip.ParsePrefix(value); perr != nil && value != "" {
			err = fmt.Errorf("%q is not an address with its prefix length (10.0.0.1/24)", value)
		}
		c.RDMAAddress = value
	case "rdma.modules":
		c.RDMAModules = strings.FieldsFunc(value, func(r rune) bool { return r == ',' || r == ' ' })
	default:
		return fmt.Errorf("guest: unknown setting %q", key)
	}
	if err != nil {
		return fmt.Errorf("guest: setting %s: %w", key, err)
	}
	return nil
}

// ParseFile applies "key = value" lines from r; name labels errors.
func (c *Config) ParseFile(name string, r io.Reader) error {
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			return fmt.Errorf("guest: %s:%d: want key = value", name, n)
		}
		if err := c.Apply(strings.TrimSpace(k), strings.TrimSpace(v)); err != nil {
			return fmt.Errorf("%s:%d: %w", name, n, err)
		}
	}
	return sc.Err()
}

// LoadFile applies a config file; a missing file is not an error.
func (c *Config) LoadFile(path string) error {
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("guest: %w", err)
	}
	defer f.Close()
	return c.ParseFile(path, f)
}

// ParseCmdline applies the cxlpool.KEY=VALUE words of a kernel command
// line and ignores the rest. Unknown cxlpool keys are errors.
func (c *Config) ParseCmdline(cmdline string) error {
	for _, w := range strings.Fields(cmdline) {
		kv, ok := strings.CutPrefix(w, "cxlpool.")
		if !ok {
			continue
		}
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			v = "true"
		}
		if err := c.Apply(k, strings.Trim(v, `"`)); err != nil {
			return fmt.Errorf("kernel command line: %w", err)
		}
	}
	return nil
}

// DaemonArgs are cxlpoold's flags for this configuration.
func (c *Config) DaemonArgs() []string {
	args := []string{"--device", c.Device, "--data", c.Data, "--listen", c.Listen}
	if c.LogLevel != "" {
		args = append(args, "--log-level", c.LogLevel)
	}
	if c.HTTP {
		args = append(args, "--http")
	}
	if c.ExportListen != "" {
		args = append(args, "--export-listen", c.ExportListen)
		if c.ExportRDMA != "" {
			args = append(args, "--export-rdma", c.ExportRDMA)
		}
	}
	return append(args, c.Extra...)
}
