package usblink

import (
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
)

// ErrNoUSB is returned by Open in builds without the usb build tag (the
// default: go build, make build, make run) or without cgo, which leave
// libusb out.
var ErrNoUSB = errors.New("usblink: built without USB device links: usb: devices need a build with -tags usb and cgo (libusb-1.0), as the box image's cxlpoold or go build -tags usb ./cmd/cxlpoold")

// ParseAddr reads a device address of the form
//
//	usb:[VID:PID][?serial=S&baud=N&latency=MS&rtscts=1]
//
// (hexadecimal IDs, e.g. usb:0403:6001?serial=FT1234). Omitted values take
// Open's defaults.
func ParseAddr(addr string) (Config, error) {
	var cfg Config
	rest, ok := strings.CutPrefix(addr, "usb:")
	if !ok {
		return cfg, fmt.Errorf("usblink: address %q: want the usb: scheme", addr)
	}
	ids, query, _ := strings.Cut(rest, "?")
	if ids != "" {
		v, p, ok := strings.Cut(ids, ":")
		if !ok {
			return cfg, fmt.Errorf("usblink: address %q: want usb:VID:PID", addr)
		}
		vid, err1 := strconv.ParseUint(v, 16, 16)
		pid, err2 := strconv.ParseUint(p, 16, 16)
		if err := errors.Join(err1, err2); err != nil {
			return cfg, fmt.Errorf("usblink: address %q: VID and PID are 4 hex digits: %w", addr, err)
		}
		cfg.VID, cfg.PID = uint16(vid), uint16(pid)
	}
	q, err := url.ParseQuery(query)
	if err != nil {
		return cfg, fmt.Errorf("usblink: address %q: %w", addr, err)
	}
	for k, vs := range q {
		v := vs[len(vs)-1]
		switch k {
		case "serial":
			cfg.Serial = v
		case "baud":
			n, err := strconv.Atoi(v)
			if err != nil || n <= 0 {
				return cfg, fmt.Errorf("usblink: address %q: baud %q: %w", addr, v, ErrBaud)
			}
			cfg.Baud = n
		case "latency":
			n, err := strconv.ParseUint(v, 10, 8)
			if err != nil || n == 0 {
				return cfg, fmt.Errorf("usblink: address %q: latency %q: want 1–255 ms", addr, v)
			}
			cfg.LatencyMs = uint8(n)
		case "rtscts":
			b, err := strconv.ParseBool(v)
			if err != nil {
				return cfg, fmt.Errorf("usblink: address %q: rtscts %q: %w", addr, v, err)
			}
			cfg.RTSCTS = b
		default:
			return cfg, fmt.Errorf("usblink: address %q: unknown option %q", addr, k)
		}
	}
	return cfg, nil
}
