package loader

import (
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"os"
	"runtime"
	"unsafe"

	"github.com/u-root/u-root/pkg/boot/kexec"
	"github.com/u-root/u-root/pkg/boot/purgatory"
	"golang.org/x/sys/unix"
)

// Linux is the System of a running Linux kernel.
//
// KexecLoad uses kexec_load(2) with u-root's memory map and purgatory
// (pkg/boot/kexec, pkg/boot/purgatory), as u-root's linux.KexecLoad does,
// but it takes the uncompressed ELF vmlinux the bundle already carries
// instead of a bzImage: nothing is decompressed at kexec time (under
// emulation the bzImage's own xz decompressor is what makes it boot three
// times slower than the ELF), and the bundle format stays as it is.
// Where kernel lockdown forbids kexec_load (UEFI Secure Boot),
// KexecFileLoad takes the slot's signed bzImage instead.
type Linux struct {
	// Console, when set, is drained before the jump: the serial driver's
	// buffer does not survive the kexec, and the last lines would be lost.
	Console *os.File
}

// LoadModule loads a module with finit_module(2).
func (Linux) LoadModule(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := unix.FinitModule(int(f.Fd()), "", 0); err != nil && !errors.Is(err, unix.EEXIST) {
		return err
	}
	return nil
}

// bootParamsPath is the boot_params (x86 "zero page") this kernel was
// started with: its e820 memory map and firmware pointers are what the
// next kernel needs too.
const bootParamsPath = "/sys/kernel/boot_params/data"

// efiSystabPath lists the EFI configuration tables (ACPI's root pointer)
// when the kernel was booted by UEFI.
const efiSystabPath = "/sys/firmware/efi/systab"

// KexecLoad stages the ELF kernel, the initramfs and cmdline.
func (Linux) KexecLoad(kernel, initramfs, cmdline string) error {
	bp, err := os.ReadFile(bootParamsPath)
	if err != nil {
		return fmt.Errorf("kexec: %w", err)
	}
	mm, err := kexec.MemoryMapFromSysfsMemmap()
	if err != nil {
		return fmt.Errorf("kexec: memory map: %w", err)
	}
	kmem := &kexec.Memory{Phys: mm}
	// The files stay on the tmpfs and are mapped, not read: under
	// emulation every copy of the ~70 MB costs a noticeable part of a
	// second, and kexec_load(2) copies them into the kernel anyway.
	km, kunmap, err := mapFile(kernel)
	if err != nil {
		return fmt.Errorf("kexec: %w", err)
	}
	defer kunmap()
	entry, err := loadELF(kmem, km)
	if err != nil {
		return fmt.Errorf("kexec: kernel %s: %w", kernel, err)
	}
	rd, rdunmap, err := mapFile(initramfs)
	if err != nil {
		return fmt.Errorf("kexec: %w", err)
	}
	defer rdunmap()
	// Low memory: the 32-bit ramdisk fields and every kernel's
	// initrd_addr_max (2 GiB) reach it.
	rdRange, err := kmem.AddPhysSegment(rd, kexec.RangeFromInterval(1<<20, 1<<31))
	if err != nil {
		return fmt.Errorf("kexec: place initramfs: %w", err)
	}
	clRange, err := kmem.AddPhysSegment(append([]byte(cmdline), 0), kexec.RangeFromInterval(1<<20, 1<<31))
	if err != nil {
		return fmt.Errorf("kexec: place command line: %w", err)
	}
	params, err := BootParams(bp, uint64(rdRange.Start), uint64(len(rd)), uint64(clRange.Start))
	if err != nil {
		return fmt.Errorf("kexec: %w", err)
	}
	// Booted by UEFI: the next kernel boots without EFI (see WithoutEFI).
	systab, _ := os.ReadFile(efiSystabPath)
	WithoutEFI(params, ParseEFISystab(string(systab)))
	// The 64-bit entry takes boot_params anywhere below 4 GiB.
	bpRange, err := kmem.AddPhysSegment(params, kexec.RangeFromInterval(4096, 1<<32-1))
	if err != nil {
		return fmt.Errorf("kexec: place boot_params: %w", err)
	}
	// The purgatory jumps to the kernel's 64-bit entry (startup_64, the
	// ELF entry point) with RSI pointing at boot_params.
	pentry, err := purgatory.Load(kmem, entry, bpRange.Start)
	if err != nil {
		return fmt.Errorf("kexec: purgatory: %w", err)
	}
	if err := kexecLoad(pentry, kmem.Segments); err != nil {
		return fmt.Errorf("kexec: %w", err)
	}
	return nil
}

// mapFile maps a file read-only.
func mapFile(path string) ([]byte, func(), error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, nil, err
	}
	if fi.Size() == 0 {
		return nil, nil, fmt.Errorf("%s is empty", path)
	}
	b, err := unix.Mmap(int(f.Fd()), 0, int(fi.Size()), unix.PROT_READ, unix.MAP_PRIVATE)
	if err != nil {
		return nil, nil, fmt.Errorf("mmap %s: %w", path, err)
	}
	return b, func() { _ = unix.Munmap(b) }, nil
}

// loadELF adds the loadable segments of the ELF image b at their
// physical addresses and returns its entry point.
func loadELF(kmem *kexec.Memory, b []byte) (uintptr, error) {
	f, err := elf.NewFile(bytes.NewReader(b))
	if err != nil {
		return 0, err
	}
	n := 0
	for _, p := range f.Progs {
		if p.Type != elf.PT_LOAD {
			continue
		}
		if p.Off > uint64(len(b)) || p.Filesz > uint64(len(b))-p.Off || p.Filesz > p.Memsz {
			return 0, fmt.Errorf("segment at %#x: %d bytes beyond the file", p.Off, p.Filesz)
		}
		kmem.Segments.Insert(kexec.NewSegment(b[p.Off:p.Off+p.Filesz], kexec.Range{Start: uintptr(p.Paddr), Size: uint(p.Memsz)}))
		n++
	}
	if n == 0 {
		return 0, errors.New("no loadable segments")
	}
	return uintptr(f.Entry), nil
}

// kexecSegment is struct kexec_segment of kexec_load(2).
type kexecSegment struct {
	buf   uintptr
	bufsz uint
	mem   uintptr
	memsz uint
}

// kexecLoad calls kexec_load(2) with segs as they are: u-root's
// kexec.Load copies every buffer while aligning them, ours are page
// aligned already (ELF load addresses and u-root's allocator), so only the
// sizes are rounded up. Anything unaligned goes through kexec.Load.
func kexecLoad(entry uintptr, segs kexec.Segments) error {
	page := uintptr(os.Getpagesize())
	ks := make([]kexecSegment, 0, len(segs))
	for _, s := range segs {
		if s.Phys.Start%page != 0 {
			return kexec.Load(entry, segs, 0)
		}
		memsz := (uintptr(s.Phys.Size) + page - 1) &^ (page - 1)
		buf := s.Buf
		if uintptr(len(buf)) > memsz {
			buf = buf[:memsz]
		}
		var p uintptr
		if len(buf) > 0 {
			p = uintptr(unsafe.Pointer(&buf[0]))
		}
		ks = append(ks, kexecSegment{buf: p, bufsz: uint(len(buf)), mem: s.Phys.Start, memsz: uint(memsz)})
	}
	if len(ks) == 0 {
		return errors.New("kexec_load: no segments")
	}
	_, _, errno := unix.Syscall6(unix.SYS_KEXEC_LOAD, entry, uintptr(len(ks)), uintptr(unsafe.Pointer(&ks[0])), 0, 0, 0)
	runtime.KeepAlive(segs)
	runtime.KeepAlive(ks)
	if errno != 0 {
		return fmt.Errorf("kexec_load(entry %#x, %d segments): %w", entry, len(ks), errno)
	}
	return nil
}

// KexecFileLoad stages a signed bzImage with kexec_file_load(2).
func (Linux) KexecFileLoad(kernel, initramfs, cmdline string) error {
	k, err := os.Open(kernel)
	if err != nil {
		return fmt.Errorf("kexec_file_load: %w", err)
	}
	defer k.Close()
	rd, err := os.Open(initramfs)
	if err != nil {
		return fmt.Errorf("kexec_file_load: %w", err)
	}
	defer rd.Close()
	if err := kexec.FileLoad(k, rd, cmdline); err != nil {
		if errors.Is(err, unix.EKEYREJECTED) || errors.Is(err, unix.EBADMSG) || errors.Is(err, unix.ENODATA) || errors.Is(err, unix.ENOKEY) {
			return fmt.Errorf("kexec_file_load: the kernel's signature is missing or not trusted (built-in keys, firmware db, MOK): %w", err)
		}
		return fmt.Errorf("kexec_file_load: %w", err)
	}
	return nil
}

// lockdownPath is where the kernel says its lockdown mode, on securityfs.
const lockdownPath = "/sys/kernel/security/lockdown"

// Lockdown reads the kernel's lockdown mode, mounting securityfs first
// where the initramfs has not (u-root's init mounts only /sys).
func (Linux) Lockdown() string {
	b, err := os.ReadFile(lockdownPath)
	if errors.Is(err, os.ErrNotExist) {
		_ = unix.Mount("securityfs", "/sys/kernel/security", "securityfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "")
		b, err = os.ReadFile(lockdownPath)
	}
	if err != nil {
		return ""
	}
	return ParseLockdown(string(b))
}

// KexecReboot syncs and jumps into the staged kernel.
func (l Linux) KexecReboot() error {
	unix.Sync()
	if l.Console != nil {
		_ = unix.IoctlSetInt(int(l.Console.Fd()), unix.TCSBRK, 1) // tcdrain
	}
	return kexec.Reboot()
}

// MountWorkDir puts a tmpfs on dir (creating it) for the extracted
// kernel and initramfs; an already mounted one is kept.
func MountWorkDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=0700"); err != nil && !errors.Is(err, unix.EBUSY) {
		return fmt.Errorf("loader: mount tmpfs on %s: %w", dir, err)
	}
	return nil
}

// KernelRelease is uname -r.
func KernelRelease() string {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return ""
	}
	return unix.ByteSliceToString(u.Release[:])
}
