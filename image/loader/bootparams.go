package loader

import (
	"encoding/binary"
	"errors"
)

// Offsets in the x86 boot_params ("zero page"), Documentation/arch/x86/
// zero-page.rst and boot.rst.
const (
	bpSize         = 4096
	bpExtRamdisk   = 0x0c0 // ext_ramdisk_image, ext_ramdisk_size: the high 32 bits
	bpExtRamdiskSz = 0x0c4
	bpExtCmdline   = 0x0c8 // ext_cmd_line_ptr
	bpSentinel     = 0x1ef
	bpRamdiskImage = 0x218
	bpRamdiskSize  = 0x21c
	bpCmdlinePtr   = 0x228
	bpSetupData    = 0x250
)

// BootParams returns a copy of the running kernel's boot_params (memory
// map, ACPI and EFI pointers as the firmware gave them) pointing at the
// next kernel's initramfs and command line. The setup_data chain is cut:
// it lives in memory the next kernel may reuse. The setup header's magic
// is not required: a kernel started through PVH (QEMU -kernel vmlinux)
// gets boot_params built by its PVH entry code, without it.
func BootParams(orig []byte, ramdisk, ramdiskSize, cmdline uint64) ([]byte, error) {
	if len(orig) < bpSize {
		return nil, errors.New("boot_params: shorter than a page")
	}
	b := make([]byte, bpSize)
	copy(b, orig)
	le := binary.LittleEndian
	le.PutUint32(b[bpRamdiskImage:], uint32(ramdisk))
	le.PutUint32(b[bpExtRamdisk:], uint32(ramdisk>>32))
	le.PutUint32(b[bpRamdiskSize:], uint32(ramdiskSize))
	le.PutUint32(b[bpExtRamdiskSz:], uint32(ramdiskSize>>32))
	le.PutUint32(b[bpCmdlinePtr:], uint32(cmdline))
	le.PutUint32(b[bpExtCmdline:], uint32(cmdline>>32))
	le.PutUint64(b[bpSetupData:], 0)
	// A non-zero sentinel makes the kernel wipe fields a broken loader
	// might have left (sanitize_boot_params): ours are deliberate.
	b[bpSentinel] = 0
	return b, nil
}
