//go:build linux

package linuxcxl

import (
	"encoding/binary"
	"fmt"
	"os"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"

	"cxlpool/fabric/cci"
)

// Mailbox is an open /dev/cxl/memX.
type Mailbox struct {
	f *os.File
}

func openMailbox(path string) (*Mailbox, error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("linuxcxl: %w", err)
	}
	return &Mailbox{f: f}, nil
}

// OpenMailbox opens a memory device's mailbox, e.g. /dev/cxl/mem0.
func OpenMailbox(path string) (*Mailbox, error) { return openMailbox(path) }

// Close closes the device.
func (m *Mailbox) Close() error { return m.f.Close() }

func (m *Mailbox) ioctl(req uintptr, arg unsafe.Pointer) error {
	rc, err := m.f.SyscallConn()
	if err != nil {
		return err
	}
	var errno unix.Errno
	if err := rc.Control(func(fd uintptr) {
		_, _, errno = unix.Syscall(unix.SYS_IOCTL, fd, req, uintptr(arg))
	}); err != nil {
		return err
	}
	if errno != 0 {
		return errno
	}
	return nil
}

// Query lists the commands the kernel lets through (CXL_MEM_QUERY_COMMANDS:
// first with n_commands 0 for the count, then for the entries).
func (m *Mailbox) Query() ([]CommandInfo, error) {
	hdr := make([]byte, queryHeaderSize)
	if err := m.ioctl(IoctlQueryCommands, unsafe.Pointer(&hdr[0])); err != nil {
		return nil, fmt.Errorf("linuxcxl: query commands: %w", err)
	}
	count := int(binary.LittleEndian.Uint32(hdr))
	if count == 0 || count > 4096 {
		return nil, nil
	}
	buf := make([]byte, queryHeaderSize+count*commandInfoSize)
	copy(buf, hdr[:4])
	if err := m.ioctl(IoctlQueryCommands, unsafe.Pointer(&buf[0])); err != nil {
		return nil, fmt.Errorf("linuxcxl: query commands: %w", err)
	}
	return parseQuery(buf)
}

// Send issues kernel command id with input in and an output buffer of
// outSize bytes (CXL_MEM_SEND_COMMAND). It returns the bytes the device
// wrote; a non-zero device return code is an error wrapping ErrDevice
// and the cci.ReturnCode.
func (m *Mailbox) Send(id uint32, in []byte, outSize int) ([]byte, error) {
	out := make([]byte, max(outSize, 1))
	cmd := sendCommand{ID: id, OutSize: uint32(outSize)}
	if outSize > 0 {
		cmd.OutPayload = uint64(uintptr(unsafe.Pointer(&out[0])))
	}
	if len(in) > 0 {
		cmd.InSize = uint32(len(in))
		cmd.InPayload = uint64(uintptr(unsafe.Pointer(&in[0])))
	}
	var raw [sendCommandSize]byte
	cmd.marshal(&raw)
	err := m.ioctl(IoctlSendCommand, unsafe.Pointer(&raw))
	// The kernel reads and writes the payloads through the pointers in
	// raw: keep the buffers alive until it is done.
	runtime.KeepAlive(in)
	runtime.KeepAlive(out)
	if err != nil {
		return nil, fmt.Errorf("linuxcxl: send command %d: %w", id, err)
	}
	cmd.unmarshal(&raw)
	if cmd.Retval != 0 {
		return nil, fmt.Errorf("linuxcxl: command %d: %w: %w", id, ErrDevice, cci.ReturnCode(uint16(cmd.Retval)))
	}
	return out[:min(int(cmd.OutSize), outSize)], nil
}
