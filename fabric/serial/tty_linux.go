//go:build linux

package serial

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// openTTY opens a serial line and puts it into raw 8N1 mode at baud.
//
// The descriptor is opened non-blocking so that os.NewFile registers it with
// the runtime poller: reads then park the goroutine instead of a thread,
// and Close unblocks a pending Read. O_NOCTTY keeps the device from becoming
// our controlling terminal; CLOCAL ignores modem control lines, so neither
// open nor I/O waits for carrier.
func openTTY(path string, baud int) (*os.File, error) {
	speed, ok := baudConst(baud)
	if !ok {
		return nil, fmt.Errorf("unsupported baud rate %d: %w", baud, ErrAddress)
	}
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_NOCTTY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	if err := makeRaw(fd, speed); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return os.NewFile(uintptr(fd), path), nil
}

// openChar opens a character device that needs no line settings (a
// virtio-serial port), non-blocking for the same reasons as openTTY.
func openChar(path string) (*os.File, error) {
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_NOCTTY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	return os.NewFile(uintptr(fd), path), nil
}

// makeRaw applies the equivalent of cfmakeraw plus 8N1, no flow control,
// VMIN=1/VTIME=0, and the line speed. TCSETSF also discards input that
// arrived before we took over the line.
func makeRaw(fd int, speed uint32) error {
	t, err := unix.IoctlGetTermios(fd, unix.TCGETS)
	if err != nil {
		return fmt.Errorf("get termios: %w", err)
	}
	t.Iflag &^= unix.IGNBRK | unix.BRKINT | unix.PARMRK | unix.ISTRIP | unix.INLCR |
		unix.IGNCR | unix.ICRNL | unix.IXON | unix.IXOFF | unix.IXANY | unix.INPCK
	t.Oflag &^= unix.OPOST
	t.Lflag &^= unix.ECHO | unix.ECHONL | unix.ICANON | unix.ISIG | unix.IEXTEN
	t.Cflag &^= unix.CSIZE | unix.PARENB | unix.CSTOPB | unix.CRTSCTS | unix.CBAUD
	t.Cflag |= unix.CS8 | unix.CREAD | unix.CLOCAL | speed
	t.Ispeed, t.Ospeed = speed, speed
	t.Cc[unix.VMIN] = 1
	t.Cc[unix.VTIME] = 0
	if err := unix.IoctlSetTermios(fd, unix.TCSETSF, t); err != nil {
		return fmt.Errorf("set termios: %w", err)
	}
	return nil
}

// baudConst maps a line rate to its termios speed code.
func baudConst(baud int) (uint32, bool) {
	switch baud {
	case 1200:
		return unix.B1200, true
	case 2400:
		return unix.B2400, true
	case 4800:
		return unix.B4800, true
	case 9600:
		return unix.B9600, true
	case 19200:
		return unix.B19200, true
	case 38400:
		return unix.B38400, true
	case 57600:
		return unix.B57600, true
	case 115200:
		return unix.B115200, true
	case 230400:
		return unix.B230400, true
	case 460800:
		return unix.B460800, true
	case 500000:
		return unix.B500000, true
	case 576000:
		return unix.B576000, true
	case 921600:
		return unix.B921600, true
	case 1000000:
		return unix.B1000000, true
	case 1500000:
		return unix.B1500000, true
	case 2000000:
		return unix.B2000000, true
	case 3000000:
		return unix.B3000000, true
	case 4000000:
		return unix.B4000000, true
	}
	return 0, false
}
