package guest

import (
	"context"
	"fmt"
	"strings"
	"time"

	"cxlpool/bmc/usblink"
)

// usbStart is a usbLink running in the background for one device address.
type usbStart struct {
	device string
	done   chan error
}

// startUSBLink starts usbLink when cfg's device link is a USB bridge, so
// that the USB modules load and the bridge enumerates while the rest of
// the box starts; nil otherwise.
func (in *Init) startUSBLink(ctx context.Context, cfg Config) *usbStart {
	if !strings.HasPrefix(cfg.Device, "usb:") {
		return nil
	}
	u := &usbStart{device: cfg.Device, done: make(chan error, 1)}
	go func() { u.done <- in.usbLink(ctx, cfg) }()
	return u
}

// forDevice returns the start for cfg's device: u when it is for the
// same address, a new one when the data partition's settings changed it
// to another USB bridge, nil when the link is not USB.
func (u *usbStart) forDevice(ctx context.Context, in *Init, cfg Config) *usbStart {
	if u != nil && u.device == cfg.Device {
		return u
	}
	return in.startUSBLink(ctx, cfg)
}

// usbLink prepares a USB serial bridge as the device link (device =
// usb:VID:PID…): it loads the USB modules now rather than in the late
// stage, waits for the bridge to enumerate (QEMU's usb-serial appears
// only while its chardev has a peer) and for the kernel's driver to bind
// it, so that the daemon's libusb claim detaches a settled ftdi_sio
// instead of racing its probe. The daemon dials once at start and fails
// if the bridge is missing.
func (in *Init) usbLink(ctx context.Context, cfg Config) error {
	ucfg, err := usblink.ParseAddr(cfg.Device)
	if err != nil {
		return err
	}
	vid, pid := ucfg.VID, ucfg.PID
	if vid == 0 && pid == 0 {
		vid, pid = usblink.DefaultVID, usblink.DefaultPID
	}
	start := time.Now()
	in.loadModules(ModulesList, "usb", USBModule)
	ids := fmt.Sprintf("%04x:%04x", vid, pid)
	deadline := time.Now().Add(10 * time.Second)
	dev := ""
	for dev == "" {
		if dev = FindUSBDevice(usblink.SysfsUSB, vid, pid); dev != "" {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no USB device %s within 10s", ids)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	// The kernel binds ftdi_sio to interface 0 soon after; give it a
	// moment (a bridge without a kernel driver is fine too).
	intf := dev + ":1.0"
	drv := ""
	for limit := time.Now().Add(2 * time.Second); drv == "" && time.Now().Before(limit); {
		if drv = usblink.KernelDriver(usblink.SysfsUSB, intf); drv == "" {
			time.Sleep(20 * time.Millisecond)
		}
	}
	if drv == "" {
		drv = "none"
	}
	in.printf("device link: USB %s at %s after %v (kernel driver %s; the daemon detaches it)", ids, dev,
		time.Since(start).Round(time.Millisecond), drv)
	return nil
}
