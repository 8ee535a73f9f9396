package apitest

import (
	"path/filepath"
	"testing"

	"cxlpool/appliance"
)

// boardConfig is the Env's board management configuration: the virtual
// box's board controller as it comes, and the management computer's
// sensors from bmc/hwmon's fixture tree rather than the test machine's,
// so that every run sees the same sensors.
func boardConfig(t testing.TB, o Options) appliance.BoardConfig {
	t.Helper()
	var cfg appliance.BoardConfig
	if root, err := RepoRoot(); err == nil {
		cfg.HwmonRoot = filepath.Join(root, "bmc", "hwmon", "testdata", "basic")
	} else {
		t.Logf("hwmon fixture not found (%v): the management computer's sensors come from this machine", err)
	}
	if o.Board != nil {
		o.Board(&cfg)
	}
	return cfg
}
