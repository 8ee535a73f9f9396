//go:build !linux

package linuxcxl

import "errors"

// Mailbox is an open /dev/cxl/memX (Linux only).
type Mailbox struct{}

var errNotLinux = errors.New("linuxcxl: the CXL mailbox ioctls exist only on Linux")

func openMailbox(string) (*Mailbox, error) { return nil, errNotLinux }

// OpenMailbox opens a memory device's mailbox (Linux only).
func OpenMailbox(path string) (*Mailbox, error) { return openMailbox(path) }

// Close does nothing.
func (m *Mailbox) Close() error { return nil }

// Query is Linux only.
func (m *Mailbox) Query() ([]CommandInfo, error) { return nil, errNotLinux }

// Send is Linux only.
func (m *Mailbox) Send(uint32, []byte, int) ([]byte, error) { return nil, errNotLinux }
