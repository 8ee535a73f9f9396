package api_test

import (
	"errors"
	"net/http"
	"testing"

	"github.com/google/go-cmp/cmp"

	"cxlpool/api"
	"cxlpool/api/apitest"
	"cxlpool/fabric/linuxcxl"
)

// TestLocalCXL: the management computer's CXL memory devices are listed
// beside the DCD as Local-<serial>, with their serial number, firmware,
// capacities and PCI function; a failing reader leaves the DCD alone.
func TestLocalCXL(t *testing.T) {
	devs := []linuxcxl.MemDev{
		{Name: "mem0", Serial: 0x1234, FirmwareVersion: "BWFW VERSION 00", RAMSize: 256 << 20, PMEMSize: 0, Host: "0000:0d:00.0"},
		{Name: "mem1", Serial: 0xabcdef, RAMSize: 0, PMEMSize: 512 << 20, IdentifyError: "mailbox: no such device"},
	}
	var fail error
	env := apitest.NewServer(t, apitest.Options{Config: func(c *api.Config) {
		c.LocalCXL = func() ([]linuxcxl.MemDev, error) { return devs, fail }
	}})
	col := env.ReadOnly.GetOK(api.PCIeDevicesURI + "?$expand=.")
	var ids []string
	for _, m := range col["Members"].([]any) {
		ids = append(ids, m.(map[string]any)["Id"].(string))
	}
	if diff := cmp.Diff([]string{"DCD", "Local-0000000000001234", "Local-0000000000ABCDEF"}, ids); diff != "" {
		t.Errorf("PCIeDevices (-want +got):\n%s", diff)
	}
	d := env.Host0.GetOK(api.PCIeDevicesURI + "/Local-0000000000001234")
	got := map[string]any{"SerialNumber": d["SerialNumber"], "FirmwareVersion": d["FirmwareVersion"],
		"CXLDevice": d["CXLDevice"], "Oem": d["Oem"]}
	want := map[string]any{"SerialNumber": "0000000000001234", "FirmwareVersion": "BWFW VERSION 00",
		"CXLDevice": map[string]any{"DeviceType": "Type3"},
		"Oem": map[string]any{"CxlPool": map[string]any{"@odata.type": "#CxlPool.v1_0_0.LocalCXLDevice", "Name": "mem0", "RAMBytes": float64(256 << 20), "PMEMBytes": float64(0),
			"NUMANode": float64(0), "Host": "0000:0d:00.0"}}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Local-0000000000001234 (-want +got):\n%s", diff)
	}
	if d := env.Admin.GetOK(api.PCIeDevicesURI + "/Local-0000000000ABCDEF"); d["Status"].(map[string]any)["Health"] != "Warning" {
		t.Errorf("a device whose mailbox fails: Status %v, want Health Warning", d["Status"])
	}
	for _, p := range []string{"/Local-0000000000000009", "/Nope"} {
		if r := env.Admin.Get(api.PCIeDevicesURI + p); r.Status != http.StatusNotFound {
			t.Errorf("GET %s: got %s, want 404", p, r)
		}
	}
	env.Admin.GetOK(api.DCDURI)

	fail = errors.New("sysfs: permission denied")
	col = env.Admin.GetOK(api.PCIeDevicesURI)
	if n := col["Members@odata.count"]; n != float64(1) {
		t.Errorf("with a failing reader: %v members, want the DCD only", n)
	}
}
