package appliance

import (
	"errors"
	"fmt"

	"cxlpool/rdma/tcp"
	"cxlpool/rdma/verbs"
	"cxlpool/rdma/wire"
)

// Values of Config.ExportRDMA besides a device name.
const (
	// ExportRDMAOff serves exports over TCP only (the zero value too).
	ExportRDMAOff = "off"
	// ExportRDMAAuto serves them over verbs as well when the binary is
	// built with the verbs tag and the machine has an RDMA device.
	ExportRDMAAuto = "auto"
)

// exportVerbs opens the RDMA device the export server also serves verbs
// on (the OpConnect handshake on the TCP control channel, then one-sided
// READ/WRITE/atomics straight on the registered pool memory), as
// Config.ExportRDMA says. It returns the extensions for the TCP server and
// what closes the device; with auto and no verbs (not built, no device)
// it returns none and logs why. A named device that does not open is an
// error: the operator asked for it.
func (a *Appliance) exportVerbs() (map[wire.Opcode]tcp.Extension, func() error, error) {
	want := a.cfg.ExportRDMA
	if want == "" || want == ExportRDMAOff {
		return nil, func() error { return nil }, nil
	}
	cfg := verbs.Config{GIDIndex: -1, Logger: a.cfg.Logger.With("component", "rdma-verbs")}
	if want != ExportRDMAAuto {
		cfg.Device = want
	}
	vs, err := verbs.NewServer(cfg)
	if err != nil {
		if want == ExportRDMAAuto && (errors.Is(err, verbs.ErrNotBuilt) || errors.Is(err, verbs.ErrNoDevice)) {
			a.cfg.Logger.Info("exports over TCP only", "reason", err)
			return nil, func() error { return nil }, nil
		}
		return nil, nil, fmt.Errorf("appliance: --export-rdma %s: %w", want, err)
	}
	a.cfg.Logger.Info("exports over RDMA verbs too", "device", vs.Device())
	return map[wire.Opcode]tcp.Extension{wire.OpConnect: vs}, vs.Close, nil
}
