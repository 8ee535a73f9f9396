//go:build !linux

package serial

import (
	"fmt"
	"os"
)

// openTTY is only implemented for Linux, the appliance's operating system;
// the termios ioctl numbers differ elsewhere.
func openTTY(path string, baud int) (*os.File, error) {
	return nil, fmt.Errorf("tty %s at %d baud: not supported on this OS: %w", path, baud, ErrAddress)
}

// openChar is only implemented for Linux, like openTTY.
func openChar(path string) (*os.File, error) {
	return nil, fmt.Errorf("character device %s: not supported on this OS: %w", path, ErrAddress)
}
