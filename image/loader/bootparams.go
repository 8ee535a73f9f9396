package loader

import (
	"encoding/binary"
	"errors"
	"strconv"
	"strings"
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

// Offsets of the EFI hand-over in boot_params.
const (
	bpACPIRSDP = 0x070 // acpi_rsdp_addr (boot protocol 2.14)
	bpEFIInfo  = 0x1c0 // struct efi_info, 32 bytes
	bpEFIEnd   = 0x1e0
)

// WithoutEFI makes boot_params of a kernel booted by UEFI (its EFI stub
// filled efi_info) fit for a kexec'd kernel: the firmware's runtime
// services were already switched to the first kernel's virtual mapping
// (SetVirtualAddressMap runs once per boot), and without the runtime map
// as setup_data the next kernel hangs before its console when it tries
// again. It boots as on a BIOS machine instead, its e820 map the stub's
// copy of the EFI memory map, with the ACPI root pointer (rsdp, from the
// EFI system table; 0: leave the field) it would otherwise find through
// EFI. It reports whether efi_info was set.
func WithoutEFI(b []byte, rsdp uint64) bool {
	if len(b) < bpSize {
		return false
	}
	efi := false
	for _, c := range b[bpEFIInfo:bpEFIEnd] {
		efi = efi || c != 0
	}
	if !efi {
		return false
	}
	clear(b[bpEFIInfo:bpEFIEnd])
	if rsdp != 0 && binary.LittleEndian.Uint64(b[bpACPIRSDP:]) == 0 {
		binary.LittleEndian.PutUint64(b[bpACPIRSDP:], rsdp)
	}
	return true
}

// ParseEFISystab returns the ACPI 2.0 (else 1.0) root pointer's address
// from /sys/firmware/efi/systab ("ACPI20=0x…" lines); 0 if none.
func ParseEFISystab(s string) uint64 {
	var acpi10 uint64
	for _, l := range strings.Split(s, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(l), "=")
		if !ok {
			continue
		}
		n, err := strconv.ParseUint(strings.TrimPrefix(v, "0x"), 16, 64)
		if err != nil {
			continue
		}
		switch k {
		case "ACPI20":
			return n
		case "ACPI":
			acpi10 = n
		}
	}
	return acpi10
}
