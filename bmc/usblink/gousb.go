//go:build usb && cgo

package usblink

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/gousb"
)

// controlTimeout bounds every control request (gousb's default 0 waits
// forever).
const controlTimeout = time.Second

// Open finds the bridge, claims interface 0 (bulk IN 0x81, OUT 0x02),
// detaching the kernel's ftdi_sio driver if it is bound, sets the chip up
// and returns its byte stream. (nil, error) when no matching device is
// present: QEMU's usb-serial is attached only while its chardev has a
// peer.
func Open(cfg Config) (*Port, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	uctx, err := newContext()
	if err != nil {
		return nil, fmt.Errorf("usblink: open %04x:%04x: %w", cfg.VID, cfg.PID, err)
	}
	devs, err := uctx.OpenDevices(func(d *gousb.DeviceDesc) bool {
		return d.Vendor == gousb.ID(cfg.VID) && d.Product == gousb.ID(cfg.PID)
	})
	var dev *gousb.Device
	for _, d := range devs {
		if dev == nil && (cfg.Serial == "" || serialOf(d) == cfg.Serial) {
			dev = d
			continue
		}
		_ = d.Close()
	}
	if dev == nil {
		_ = uctx.Close()
		if err == nil {
			err = errors.New("no such device")
		}
		return nil, fmt.Errorf("usblink: open %04x:%04x %q: %w", cfg.VID, cfg.PID, cfg.Serial, err)
	}
	g := &gousbDevice{ctx: uctx, dev: dev}
	// Which kernel driver held the bridge (ftdi_sio, as a ttyUSB), for
	// the log: claim detaches it.
	intf := InterfaceName(dev.Desc.Bus, dev.Desc.Path, 1, 0)
	held := KernelDriver(SysfsUSB, intf)
	if err := g.claim(); err != nil {
		_ = g.Close()
		return nil, fmt.Errorf("usblink: open %04x:%04x: %w", cfg.VID, cfg.PID, err)
	}
	p, err := newPort(g, cfg)
	if err != nil {
		return nil, err
	}
	cfg.Logger.Info("usblink: bridge open", "usb", fmt.Sprintf("%04x:%04x", cfg.VID, cfg.PID), "interface", intf,
		"bus", dev.Desc.Bus, "address", dev.Desc.Address, "detached", held, "baud", cfg.Baud, "max_packet", g.MaxPacket())
	return p, nil
}

// newContext is gousb.NewContext, which panics when libusb cannot
// initialise (no usbfs, say): a daemon given usb: on such a machine fails
// its dial with the reason instead.
func newContext() (ctx *gousb.Context, err error) {
	defer func() {
		if r := recover(); r != nil {
			ctx, err = nil, fmt.Errorf("libusb init: %v", r)
		}
	}()
	return gousb.NewContext(), nil
}

func serialOf(d *gousb.Device) string {
	s, err := d.SerialNumber()
	if err != nil {
		return ""
	}
	return s
}

// gousbDevice adapts gousb to usbDevice.
type gousbDevice struct {
	ctx  *gousb.Context
	dev  *gousb.Device
	cfg  *gousb.Config
	intf *gousb.Interface
	in   *gousb.InEndpoint
	out  *gousb.OutEndpoint
}

func (g *gousbDevice) claim() error {
	g.dev.ControlTimeout = controlTimeout
	if err := g.dev.SetAutoDetach(true); err != nil {
		return fmt.Errorf("auto-detach: %w", err)
	}
	var err error
	if g.cfg, err = g.dev.Config(1); err != nil {
		return fmt.Errorf("config 1: %w", err)
	}
	if g.intf, err = g.cfg.Interface(0, 0); err != nil {
		return fmt.Errorf("interface 0: %w", err)
	}
	if g.in, err = g.intf.InEndpoint(1); err != nil {
		return fmt.Errorf("IN endpoint 0x81: %w", err)
	}
	if g.out, err = g.intf.OutEndpoint(2); err != nil {
		return fmt.Errorf("OUT endpoint 0x02: %w", err)
	}
	return nil
}

func (g *gousbDevice) Control(rType, request uint8, val, idx uint16, data []byte) (int, error) {
	return g.dev.Control(rType, request, val, idx, data)
}

func (g *gousbDevice) BulkIn(ctx context.Context, buf []byte) (int, error) {
	return g.in.ReadContext(ctx, buf)
}

func (g *gousbDevice) BulkOut(ctx context.Context, p []byte) (int, error) {
	return g.out.WriteContext(ctx, p)
}

func (g *gousbDevice) MaxPacket() int { return g.in.Desc.MaxPacketSize }

// Close releases in reverse order: Device.Close fails while a config is
// claimed.
func (g *gousbDevice) Close() error {
	if g.intf != nil {
		g.intf.Close()
	}
	var errs []error
	if g.cfg != nil {
		errs = append(errs, g.cfg.Close())
	}
	errs = append(errs, g.dev.Close(), g.ctx.Close())
	return errors.Join(errs...)
}
