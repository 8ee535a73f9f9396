package linuxcxl

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// The Linux CXL mailbox uAPI (include/uapi/linux/cxl_mem.h; cxl-wire.md
// §6.1). Both ioctls are issued on /dev/cxl/memX.
const (
	// IoctlQueryCommands is _IOR(0xCE, 1, struct cxl_mem_query_commands).
	IoctlQueryCommands = 0x8008CE01
	// IoctlSendCommand is _IOWR(0xCE, 2, struct cxl_send_command).
	IoctlSendCommand = 0xC030CE02
)

// Kernel command IDs (not opcodes): the ioctl names commands by these.
const (
	CmdIdentify         = 1
	CmdRaw              = 2
	CmdGetSupportedLogs = 3
	CmdGetFWInfo        = 4
	CmdGetPartitionInfo = 5
	CmdGetLSA           = 6
	CmdGetHealthInfo    = 7
)

// Struct sizes.
const (
	commandInfoSize = 16
	queryHeaderSize = 8
	sendCommandSize = 48
)

// CommandInfo is struct cxl_command_info.
type CommandInfo struct {
	ID      uint32 `json:"id"`
	Flags   uint32 `json:"flags"`
	SizeIn  uint32 `json:"size_in"`
	SizeOut uint32 `json:"size_out"` // 0xFFFFFFFF: variable
}

// Command info flags.
const (
	FlagEnabled   = 1 << 0
	FlagExclusive = 1 << 1
)

// ErrDevice is a mailbox command the device answered with a non-zero
// return code.
var ErrDevice = errors.New("linuxcxl: device returned an error")

// parseQuery decodes struct cxl_mem_query_commands: n_commands u32,
// rsvd u32, then n_commands × 16-byte cxl_command_info.
func parseQuery(b []byte) ([]CommandInfo, error) {
	if len(b) < queryHeaderSize {
		return nil, fmt.Errorf("linuxcxl: query commands: %d bytes", len(b))
	}
	n := binary.LittleEndian.Uint32(b)
	if uint64(n)*commandInfoSize > uint64(len(b)-queryHeaderSize) {
		return nil, fmt.Errorf("linuxcxl: query commands: %d commands in %d bytes", n, len(b))
	}
	out := make([]CommandInfo, n)
	for i := range out {
		e := b[queryHeaderSize+i*commandInfoSize:]
		out[i] = CommandInfo{ID: binary.LittleEndian.Uint32(e), Flags: binary.LittleEndian.Uint32(e[4:]),
			SizeIn: binary.LittleEndian.Uint32(e[8:]), SizeOut: binary.LittleEndian.Uint32(e[12:])}
	}
	return out, nil
}

// sendCommand is struct cxl_send_command.
type sendCommand struct {
	ID         uint32
	Flags      uint32
	RawOpcode  uint16
	Retval     uint32
	InSize     uint32
	InPayload  uint64 // user pointer
	OutSize    uint32
	OutPayload uint64 // user pointer
}

// marshal lays the struct out: 0 id; 4 flags; 8 raw.opcode u16, 10
// raw.rsvd; 12 retval; 16 in.size; 20 in.rsvd; 24 in.payload; 32
// out.size; 36 out.rsvd; 40 out.payload.
func (c *sendCommand) marshal(b *[sendCommandSize]byte) {
	*b = [sendCommandSize]byte{}
	binary.LittleEndian.PutUint32(b[0:], c.ID)
	binary.LittleEndian.PutUint32(b[4:], c.Flags)
	binary.LittleEndian.PutUint16(b[8:], c.RawOpcode)
	binary.LittleEndian.PutUint32(b[12:], c.Retval)
	binary.LittleEndian.PutUint32(b[16:], c.InSize)
	binary.LittleEndian.PutUint64(b[24:], c.InPayload)
	binary.LittleEndian.PutUint32(b[32:], c.OutSize)
	binary.LittleEndian.PutUint64(b[40:], c.OutPayload)
}

func (c *sendCommand) unmarshal(b *[sendCommandSize]byte) {
	c.ID = binary.LittleEndian.Uint32(b[0:])
	c.Flags = binary.LittleEndian.Uint32(b[4:])
	c.RawOpcode = binary.LittleEndian.Uint16(b[8:])
	c.Retval = binary.LittleEndian.Uint32(b[12:])
	c.InSize = binary.LittleEndian.Uint32(b[16:])
	c.InPayload = binary.LittleEndian.Uint64(b[24:])
	c.OutSize = binary.LittleEndian.Uint32(b[32:])
	c.OutPayload = binary.LittleEndian.Uint64(b[40:])
}
