package guest

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestConfigLayers(t *testing.T) {
	var c Config
	if err := c.ParseFile("defaults", strings.NewReader(DefaultConfig)); err != nil {
		t.Fatal(err)
	}
	owner := "# owner\ndevice = tty:/dev/ttyUSB0?baud=115200\nnet.address = 192.168.1.50/24\nadmin-password = s3cret-Passw0rd\n"
	if err := c.ParseFile("cxlpool.conf", strings.NewReader(owner)); err != nil {
		t.Fatal(err)
	}
	if err := c.ParseCmdline("console=ttyS0 panic=-1 cxlpool.slot=b cxlpool.http cxlpool.daemon.args=\"--sim-heads=4\" quiet"); err != nil {
		t.Fatal(err)
	}
	want := Config{Device: "tty:/dev/ttyUSB0?baud=115200", Listen: "0.0.0.0:8443", HTTP: true, Data: "/data/cxlpool",
		LogLevel: "info", Disk: "/dev/vda", NetIface: "eth0", NetDHCP: true, NetAddress: "192.168.1.50/24",
		HealthTimeout: 180 * time.Second, DataSync: false, Env: []string{"GOGC=400"}, AdminPassword: "s3cret-Passw0rd", Slot: "b", Extra: []string{"--sim-heads=4"}}
	if diff := cmp.Diff(want, c); diff != "" {
		t.Errorf("config (-want +got):\n%s", diff)
	}
	wantArgs := []string{"--device", "tty:/dev/ttyUSB0?baud=115200", "--data", "/data/cxlpool", "--listen", "0.0.0.0:8443",
		"--log-level", "info", "--http", "--sim-heads=4"}
	if diff := cmp.Diff(wantArgs, c.DaemonArgs()); diff != "" {
		t.Errorf("daemon args (-want +got):\n%s", diff)
	}
}

// TestConfigExports: the export and RDMA settings reach the daemon's
// flags (--export-rdma only with an export server) and the init's.
func TestConfigExports(t *testing.T) {
	for _, tt := range []struct {
		name, file, cmdline string
		wantArgs            []string
		wantRxe, wantAddr   string
		wantModules         []string
	}{
		{name: "none", wantArgs: nil},
		{name: "soft-RoCE from the command line", cmdline: "cxlpool.export.listen=0.0.0.0:7000 cxlpool.rdma.rxe=eth1 cxlpool.rdma.address=10.0.0.1/24",
			wantArgs: []string{"--export-listen", "0.0.0.0:7000"}, wantRxe: "eth1", wantAddr: "10.0.0.1/24"},
		{name: "a real NIC's driver, device named", file: "export.listen = :7000\nexport.rdma = mlx5_0\nrdma.modules = mlx5_ib, ib_umad\n",
			wantArgs: []string{"--export-listen", ":7000", "--export-rdma", "mlx5_0"}, wantModules: []string{"mlx5_ib", "ib_umad"}},
		{name: "rdma without exports", file: "export.rdma = off\n", wantArgs: nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var c Config
			if err := c.ParseFile("f", strings.NewReader(tt.file)); err != nil {
				t.Fatal(err)
			}
			if err := c.ParseCmdline(tt.cmdline); err != nil {
				t.Fatal(err)
			}
			base := []string{"--device", "", "--data", "", "--listen", ""}
			if diff := cmp.Diff(append(base, tt.wantArgs...), c.DaemonArgs()); diff != "" {
				t.Errorf("daemon args (-want +got):\n%s", diff)
			}
			if c.RDMARxe != tt.wantRxe || c.RDMAAddress != tt.wantAddr {
				t.Errorf("rdma.rxe %q rdma.address %q, want %q %q", c.RDMARxe, c.RDMAAddress, tt.wantRxe, tt.wantAddr)
			}
			if diff := cmp.Diff(tt.wantModules, c.RDMAModules); diff != "" {
				t.Errorf("rdma.modules (-want +got):\n%s", diff)
			}
		})
	}
}

func TestConfigErrors(t *testing.T) {
	for _, tt := range []struct{ name, file, cmdline string }{
		{"unknown key", "colour = blue\n", ""},
		{"no equals", "device\n", ""},
		{"bad bool", "http = maybe\n", ""},
		{"bad duration", "health.timeout = soon\n", ""},
		{"name server by name", "net.dns = 10.0.0.1 dns.example\n", ""},
		{"unknown cmdline key", "", "cxlpool.nope=1"},
		{"rdma address without prefix", "rdma.address = 10.0.0.1\n", ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var c Config
			err := c.ParseFile("f", strings.NewReader(tt.file))
			if err == nil {
				err = c.ParseCmdline(tt.cmdline)
			}
			if err == nil {
				t.Fatal("got nil error, want one")
			}
		})
	}
}

func FuzzConfig(f *testing.F) {
	f.Add(DefaultConfig, "console=ttyS0 cxlpool.slot=a cxlpool.bare=1")
	f.Add("http = yes\n", "cxlpool.health.timeout=3s")
	f.Fuzz(func(t *testing.T, file, cmdline string) {
		var c Config
		_ = c.ParseFile("f", strings.NewReader(file))
		_ = c.ParseCmdline(cmdline)
		_ = c.DaemonArgs()
	})
}
