package guest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestSetConfigValues(t *testing.T) {
	for _, tc := range []struct {
		name, before string
		set          map[string]string
		after        string
	}{
		{
			name:   "template: appended after the comments",
			before: DataConfigTemplate,
			set:    map[string]string{"ntp.servers": "10.0.0.1 pool.ntp.org", "ntp.enabled": "true"},
			after:  DataConfigTemplate + "ntp.enabled = true\nntp.servers = 10.0.0.1 pool.ntp.org\n",
		},
		{
			name:   "replaced in place, the last line of a key",
			before: "# mine\nnet.address = 10.1.1.1/24\ndevice = tty:/dev/ttyUSB0\nnet.address = 10.2.2.2/24\n# end",
			set:    map[string]string{"net.address": "192.168.7.9/24", "net.gateway": ""},
			after:  "# mine\nnet.address = 10.1.1.1/24\ndevice = tty:/dev/ttyUSB0\nnet.address = 192.168.7.9/24\n# end\nnet.gateway = \n",
		},
		{
			name:  "new file",
			set:   map[string]string{"net.hostname": "box-7"},
			after: "net.hostname = box-7\n",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "cxlpool.conf")
			if tc.before != "" {
				if err := os.WriteFile(path, []byte(tc.before), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if err := SetConfigValues(path, tc.set); err != nil {
				t.Fatalf("SetConfigValues: %v", err)
			}
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.after, string(b)); diff != "" {
				t.Errorf("file (-want +got):\n%s", diff)
			}
			st, _ := os.Stat(path)
			wantMode := os.FileMode(0o600)
			if tc.before != "" {
				wantMode = 0o644
			}
			if st.Mode().Perm() != wantMode {
				t.Errorf("mode: got %v, want %v", st.Mode().Perm(), wantMode)
			}
			// The init reads back what was written.
			var c Config
			if err := c.LoadFile(path); err != nil {
				t.Errorf("reading the result: %v", err)
			}
			entries, _ := os.ReadDir(filepath.Dir(path))
			if len(entries) != 1 {
				t.Errorf("directory holds %d files, want 1 (no temporary left)", len(entries))
			}
		})
	}
}

func TestSetConfigValuesRefuses(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cxlpool.conf")
	const before = "net.address = 10.1.1.1/24\n"
	if err := os.WriteFile(path, []byte(before), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, set := range []map[string]string{
		{"colour": "blue"},
		{"ntp.enabled": "maybe"},
		{"net.hostname": "a\nadmin-password = x"},
		{"net.address": "10.3.3.3/24", "ntp.enabled": "perhaps"},
	} {
		if err := SetConfigValues(path, set); err == nil {
			t.Errorf("SetConfigValues(%v): got nil error, want one", set)
		}
	}
	if b, _ := os.ReadFile(path); string(b) != before {
		t.Errorf("file after refused changes: got %q, want it unchanged", b)
	}
}

func TestLoadLayers(t *testing.T) {
	dir := t.TempDir()
	write := func(name, s string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	defaults := write("boxinit.conf", DefaultConfig)
	data := write("cxlpool.conf", "ntp.enabled = true\nntp.servers = a.example b.example\nnet.hostname = box\nnet.dns = 10.0.0.53 2001:db8::53\n")
	cmdline := write("cmdline", "console=ttyS0 cxlpool.slot=a cxlpool.net.hostname=override\n")
	var c Config
	if err := c.LoadLayers(defaults, data, cmdline); err != nil {
		t.Fatal(err)
	}
	if !c.NTPEnabled || strings.Join(c.NTPServers, ",") != "a.example,b.example" || c.HostName != "override" ||
		!c.NetDHCP || c.NetAddress != "" || strings.Join(c.NameServers, ",") != "10.0.0.53,2001:db8::53" || c.Slot != "a" {
		t.Errorf("layers: got %+v", c)
	}
	var none Config
	if err := none.LoadLayers(filepath.Join(dir, "no1"), filepath.Join(dir, "no2"), filepath.Join(dir, "no3")); err != nil {
		t.Errorf("missing files: got %v, want nil", err)
	}
}
