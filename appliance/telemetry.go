package appliance

import (
	"context"
	"fmt"

	"cxlpool/hmu/mmio"
	"cxlpool/hmu/telemetry"
)

// The hot-page pipeline is hmu/telemetry's Service; the appliance only
// picks its register block (the virtual box's CHMU, or --chmu) and starts
// it. The names below keep cmd/cxlpoold's and api's spelling.

// Telemetry is the running hot-page pipeline.
type Telemetry = telemetry.Service

// TelemetryConfig tunes the pipeline (telemetry.Tuning).
type TelemetryConfig = telemetry.Tuning

// SimWorkloadNone and SimWorkloadMixed are the --sim-workload names
// besides the sim kinds.
const (
	SimWorkloadNone  = telemetry.SimWorkloadNone
	SimWorkloadMixed = telemetry.SimWorkloadMixed
)

// ParseSimWorkload checks a --sim-workload value.
func ParseSimWorkload(s string) (string, error) { return telemetry.ParseSimWorkload(s) }

// ParseCHMU reads --chmu (telemetry.ParseCHMU).
func ParseCHMU(s string) (telemetry.CHMULocation, error) { return telemetry.ParseCHMU(s) }

// startTelemetry opens the CHMU the device offers and starts the pipeline;
// without one (a real device and no --chmu) it logs why and leaves
// a.Telemetry nil.
func (a *Appliance) startTelemetry(ctx context.Context) error {
	log := a.cfg.Logger.With("component", "telemetry")
	c := telemetry.Config{Manager: a.Manager, DataDir: a.cfg.DataDir, Workload: a.cfg.SimWorkload,
		Tuning: a.cfg.Telemetry, Clock: a.cfg.Clock, Logger: log}
	switch {
	case a.Box != nil:
		c.Registers, c.Sim = a.Box.CHMU(), a.Box
	case a.cfg.CHMU != "":
		loc, err := telemetry.ParseCHMU(a.cfg.CHMU)
		if err != nil {
			return fmt.Errorf("appliance: telemetry: %w", err)
		}
		regs, err := mmio.Open(loc.Path, loc.Offset, 0)
		if err != nil {
			return fmt.Errorf("appliance: telemetry: %w", err)
		}
		c.Registers, c.CloseRegisters = regs, regs.Close
	default:
		log.Info("telemetry disabled: no CHMU register block given (--chmu PATH[@OFFSET] or pci:BDF)")
		return nil
	}
	t, err := telemetry.New(ctx, c)
	if err != nil {
		if c.CloseRegisters != nil {
			_ = c.CloseRegisters()
		}
		return fmt.Errorf("appliance: %w", err)
	}
	a.Telemetry = t
	a.closers = append(a.closers, t.Close)
	return nil
}
