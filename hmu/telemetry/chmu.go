package telemetry

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/bits"
	"os"
	"slices"
	"strconv"
	"strings"

	"cxlpool/hmu"
	"cxlpool/hmu/mmio"
	"cxlpool/sim"
)

// Sim workload names for Config.Workload besides the sim kinds.
const (
	// SimWorkloadNone starts no workload.
	SimWorkloadNone = "none"
	// SimWorkloadMixed runs a KV-cache workload on hosts that share
	// capacity and Zipf or moving-hot-set workloads on the others.
	SimWorkloadMixed = "mixed"
)

// CHMUFile is the persisted CHMU configuration inside the data directory.
const CHMUFile = "chmu.json"

// ParseSimWorkload checks a --sim-workload value.
func ParseSimWorkload(s string) (string, error) {
	switch s {
	case "", SimWorkloadNone:
		return SimWorkloadNone, nil
	case SimWorkloadMixed:
		return s, nil
	}
	if slices.Contains(sim.WorkloadKinds, sim.WorkloadKind(s)) {
		return s, nil
	}
	return "", fmt.Errorf("workload %q: want none, mixed or one of %v", s, sim.WorkloadKinds)
}

// CHMULocation is where a real device's CHMU register block is.
type CHMULocation struct {
	Path   string // a PCI BAR resource file (or any file, for tests)
	Offset int64  // the block's offset in it
}

// ParseCHMU reads --chmu: PATH[@OFFSET] (offset decimal or 0x-hex), or
// pci:BDF to find the block through the device's Register Locator under
// /sys.
func ParseCHMU(s string) (CHMULocation, error) {
	if bdf, ok := strings.CutPrefix(s, "pci:"); ok {
		path, off, err := mmio.FindCHMU("/sys", bdf, 0)
		if err != nil {
			return CHMULocation{}, err
		}
		return CHMULocation{Path: path, Offset: off}, nil
	}
	path, offs, hasOff := strings.Cut(s, "@")
	if path == "" {
		return CHMULocation{}, fmt.Errorf("chmu %q: want PATH[@OFFSET] or pci:BDF", s)
	}
	var off int64
	if hasOff {
		v, err := strconv.ParseInt(offs, 0, 64)
		if err != nil || v < 0 {
			return CHMULocation{}, fmt.Errorf("chmu %q: offset %q is not a non-negative number", s, offs)
		}
		off = v
	}
	return CHMULocation{Path: path, Offset: off}, nil
}

// persisted is the CHMUFile content.
type persisted struct {
	Enabled bool
	Config  hmu.Config
}

// DefaultCHMUConfig is the configuration the pipeline starts with: every
// read and write, 4 KiB units, 100 ms epochs, a unit is hot at 4 accesses
// in an epoch, both interrupts, the ring's level at half — each adjusted
// to what the instance offers.
func DefaultCHMUConfig(c hmu.Caps) hmu.Config {
	cfg := hmu.Config{Access: hmu.AccessReadWrite, Threshold: 4, UnitSize: 4096, Mode: hmu.ModeEpoch,
		Epoch: hmu.Epoch{Scale: 4, Multiplier: 1}, OverflowIRQ: c.OverflowIRQ, LevelIRQ: c.LevelIRQ,
		FillThreshold: c.HotlistSize / 2}
	if !c.CanTrack(cfg.Access) {
		for _, a := range []hmu.AccessType{hmu.AccessNonTEEReadWrite, hmu.AccessRead, hmu.AccessNonTEERead, hmu.AccessWrite, hmu.AccessNonTEEWrite} {
			if c.CanTrack(a) {
				cfg.Access = a
				break
			}
		}
	}
	if !c.SupportsUnit(cfg.UnitSize) && c.UnitSizes != 0 {
		cfg.UnitSize = 256 << bits.TrailingZeros32(c.UnitSizes)
	}
	if c.DownSampling&1 == 0 && c.DownSampling != 0 {
		cfg.DSFactor = uint8(bits.TrailingZeros16(c.DownSampling))
	}
	switch {
	case !c.EpochMode && c.AlwaysOn:
		cfg.Mode, cfg.Epoch = hmu.ModeAlwaysOn, hmu.Epoch{}
	case cfg.Epoch.Duration() < c.MinEpoch.Duration():
		cfg.Epoch = c.MinEpoch
	case c.MaxEpoch.Duration() > 0 && cfg.Epoch.Duration() > c.MaxEpoch.Duration():
		cfg.Epoch = c.MaxEpoch
	}
	return cfg
}

// loadConfig reads the persisted configuration, falling back to the
// default when there is none or it no longer fits the device.
func (t *Service) loadConfig() (hmu.Config, bool) {
	def := DefaultCHMUConfig(t.insts[0].Caps())
	b, err := os.ReadFile(t.file)
	if errors.Is(err, os.ErrNotExist) {
		return def, true
	}
	var p persisted
	if err == nil {
		err = json.Unmarshal(b, &p)
	}
	if err == nil {
		err = t.ValidateCHMU(p.Config)
	}
	if err != nil {
		t.log.Warn("saved CHMU configuration unusable; using the default", "file", t.file, "err", err)
		return def, true
	}
	return p.Config, p.Enabled
}

// apply writes c into every instance and enables or disables counting.
func (t *Service) apply(ctx context.Context, c hmu.Config, enabled bool) error {
	for _, in := range t.insts {
		if enabled {
			if err := in.Start(ctx, c); err != nil {
				return err
			}
			continue
		}
		if err := in.Disable(ctx); err != nil {
			return err
		}
		if err := in.Configure(ctx, c); err != nil {
			return err
		}
	}
	return nil
}

// CHMUConfig returns instance 0's configuration (every instance gets the
// same) and whether it is counting.
func (t *Service) CHMUConfig() (hmu.Config, bool, error) {
	c, err := t.insts[0].Config()
	if err != nil {
		return hmu.Config{}, false, err
	}
	st, err := t.insts[0].Status()
	if err != nil {
		return hmu.Config{}, false, err
	}
	return c, st.Enabled, nil
}

// CHMUCaps returns instance 0's capabilities and the number of instances.
func (t *Service) CHMUCaps() (hmu.Caps, int) { return t.insts[0].Caps(), len(t.insts) }

// ValidateCHMU checks c against every instance's capabilities.
func (t *Service) ValidateCHMU(c hmu.Config) error {
	for _, in := range t.insts {
		if err := in.Validate(c); err != nil {
			return err
		}
	}
	return nil
}

// SetCHMU validates c, writes it into every instance (a reset: counting
// starts over), enables or disables counting, and saves it in the data
// directory so a restart keeps it. A FillThreshold of 0 means half the
// ring.
func (t *Service) SetCHMU(ctx context.Context, c hmu.Config, enabled bool) error {
	if c.FillThreshold == 0 {
		c.FillThreshold = t.insts[0].Caps().HotlistSize / 2
	}
	if err := t.ValidateCHMU(c); err != nil {
		return err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := t.apply(ctx, c, enabled); err != nil {
		return err
	}
	b, err := json.MarshalIndent(persisted{Enabled: enabled, Config: c}, "", "  ")
	if err != nil {
		return err
	}
	tmp := t.file + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o600); err != nil {
		return fmt.Errorf("telemetry: save CHMU configuration: %w", err)
	}
	if err := os.Rename(tmp, t.file); err != nil {
		return fmt.Errorf("telemetry: save CHMU configuration: %w", err)
	}
	t.log.Info("CHMU configuration changed", "enabled", enabled, "unit", c.UnitSize, "threshold", c.Threshold,
		"epoch", c.Epoch.Duration(), "access", c.Access)
	return nil
}
