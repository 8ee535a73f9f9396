// Package vmtest boots the box image under QEMU (TCG: these machines have
// no usable KVM) with the hardware the box expects: an emulated CXL
// Type-3 memory device behind a CXL host bridge with two root ports, the
// virtual box's device link carried from a cxlsim on the host over a
// virtio-serial port (or, with Options.DeviceUSB, an emulated FTDI USB
// serial adapter on xHCI), the disk on virtio-blk and user networking
// (QEMU's DHCP server leases the guest 10.0.2.15) with the API port
// forwarded. The boot loader's part (image/update SelectBoot:
// pick the slot, verify it, extract its kernel and initramfs) runs on the
// host before each QEMU start, as firmware would.
//
// The tests run only with CXLPOOL_VMTEST=1 (make vmtest); they install
// qemu-system-x86 and the kernel when missing and build the image when
// CXLPOOL_IMAGE_DIR has none.
package vmtest

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Options describe one QEMU run.
type Options struct {
	Dir            string // work directory (CXL backing files, sockets)
	Kernel, Initrd string
	Disk           string
	Append         string
	// DeviceAddr is the host:port of the cxlsim the device link connects
	// to ("" for none).
	DeviceAddr string
	// DeviceUSB carries the device link over an emulated USB serial
	// adapter (usb-serial, an FTDI FT232 0403:6001, on a qemu-xhci
	// controller) instead of the virtio-serial port cxlpool.mctp.
	DeviceUSB bool
	// UpdateSocket, when set, adds the maintenance port (cxlpool.update)
	// as a Unix socket QEMU listens on.
	UpdateSocket string
	// APIPort is the host port forwarded to the guest's 8443.
	APIPort int
	// RTCBase starts the guest's hardware clock at this UTC time
	// ("2006-01-02T15:04:05"; "" for the host's time).
	RTCBase string
	// Log receives the console as it arrives (nil: kept only in memory).
	Log io.Writer
	// UEFICode and UEFIVars, when set, boot through UEFI firmware (OVMF:
	// its code read-only, a writable copy of its variable store) from
	// the disk's EFI system partition instead of Kernel/Initrd/Append.
	UEFICode, UEFIVars string
	// SecureBoot runs the firmware as Secure Boot firmware needs: SMM on
	// and the variable store writable only from SMM (OVMF's secboot
	// builds require both).
	SecureBoot bool
	// Extra are more QEMU arguments (TestRDMA's data link: a second NIC).
	Extra []string
}

// VM is a running QEMU.
type VM struct {
	cmd     *exec.Cmd
	Started time.Time
	mu      sync.Mutex
	console bytes.Buffer
	changed chan struct{} // closed and replaced on every console write
	exited  chan struct{}
	err     error
	log     io.Writer
}

// Args returns QEMU's command line for opt.
func Args(opt Options) []string {
	args := []string{
		// RDRAND, as on the x86 boards the box runs on: with it (and
		// Debian's RANDOM_TRUST_CPU) the kernel's random pool is ready at
		// boot. Without it the pool waits for timer jitter, over a
		// second under TCG, and the daemon's first random numbers
		// (SQLite, TLS) wait with it.
		"-M", "q35,cxl=on,cxl-fmw.0.targets.0=cxl.1,cxl-fmw.0.size=4G", "-accel", "tcg", "-cpu", "qemu64,+rdrand", "-smp", "2",
		"-m", "4G,maxmem=8G,slots=8", "-display", "none", "-serial", "stdio", "-monitor", "none", "-no-reboot",
		// Every PCI device sits on pcie.0 explicitly: QEMU would otherwise
		// try the CXL host bridge, which takes only bridges.
		"-drive", "file=" + opt.Disk + ",format=raw,if=none,id=d0", "-device", "virtio-blk-pci,drive=d0,bus=pcie.0",
		"-netdev", fmt.Sprintf("user,id=n0,hostfwd=tcp:127.0.0.1:%d-:8443", opt.APIPort),
		"-device", "virtio-net-pci,netdev=n0,bus=pcie.0",
		"-device", "virtio-serial-pci,bus=pcie.0",
		"-object", "memory-backend-file,id=cxl-mem0,share=on,mem-path=" + filepath.Join(opt.Dir, "cxl-mem0.raw") + ",size=256M",
		"-object", "memory-backend-file,id=cxl-lsa0,share=on,mem-path=" + filepath.Join(opt.Dir, "cxl-lsa0.raw") + ",size=1M",
		"-device", "pxb-cxl,bus_nr=12,bus=pcie.0,id=cxl.1",
		// Two root ports: with one, the 6.1 kernel leaves the host
		// bridge decoder unprogrammed (image-and-vm.md).
		"-device", "cxl-rp,port=0,bus=cxl.1,id=root_port13,chassis=0,slot=2",
		"-device", "cxl-rp,port=1,bus=cxl.1,id=root_port14,chassis=0,slot=3",
		"-device", "cxl-type3,bus=root_port13,memdev=cxl-mem0,lsa=cxl-lsa0,id=cxl-pmem0,sn=0x1000",
	}
	if opt.SecureBoot {
		args[1] = strings.Replace(args[1], "q35,", "q35,smm=on,", 1)
		args = append(args, "-global", "driver=cfi.pflash01,property=secure,value=on")
	}
	if opt.UEFICode != "" {
		args = append(args, "-drive", "if=pflash,format=raw,unit=0,readonly=on,file="+opt.UEFICode,
			"-drive", "if=pflash,format=raw,unit=1,file="+opt.UEFIVars)
	} else {
		args = append(args, "-kernel", opt.Kernel, "-initrd", opt.Initrd, "-append", "console=ttyS0 panic=-1 "+opt.Append)
	}
	if opt.DeviceAddr != "" {
		host, port, _ := splitHostPort(opt.DeviceAddr)
		args = append(args, "-chardev", "socket,id=dev,host="+host+",port="+port)
		if opt.DeviceUSB {
			args = append(args, "-device", "qemu-xhci,id=xhci,bus=pcie.0", "-device", "usb-serial,bus=xhci.0,chardev=dev")
		} else {
			args = append(args, "-device", "virtserialport,chardev=dev,name=cxlpool.mctp")
		}
	}
	if opt.RTCBase != "" {
		args = append(args, "-rtc", "base="+opt.RTCBase)
	}
	args = append(args, opt.Extra...)
	if opt.UpdateSocket != "" {
		args = append(args, "-chardev", "socket,id=upd,path="+opt.UpdateSocket+",server=on,wait=off",
			"-device", "virtserialport,chardev=upd,name=cxlpool.update")
	}
	return args
}

func splitHostPort(a string) (string, string, error) {
	for i := len(a) - 1; i >= 0; i-- {
		if a[i] == ':' {
			return a[:i], a[i+1:], nil
		}
	}
	return "", "", fmt.Errorf("vmtest: address %q", a)
}

// Start boots QEMU. The CXL backing files are created in opt.Dir when
// missing (sparse).
func Start(opt Options) (*VM, error) {
	for name, size := range map[string]int64{"cxl-mem0.raw": 256 << 20, "cxl-lsa0.raw": 1 << 20} {
		p := filepath.Join(opt.Dir, name)
		if _, err := os.Stat(p); err == nil {
			continue
		}
		f, err := os.Create(p)
		if err != nil {
			return nil, err
		}
		err = f.Truncate(size)
		f.Close()
		if err != nil {
			return nil, err
		}
	}
	return StartArgs(Args(opt), opt.Log)
}

// StartArgs boots QEMU with args as they are (TestRDMA's second guest);
// log is as Options.Log.
func StartArgs(args []string, log io.Writer) (*VM, error) {
	v := &VM{changed: make(chan struct{}), exited: make(chan struct{}), log: log}
	v.cmd = exec.Command("qemu-system-x86_64", args...)
	v.cmd.Stdout = (*consoleWriter)(v)
	v.cmd.Stderr = (*consoleWriter)(v)
	v.Started = time.Now()
	if err := v.cmd.Start(); err != nil {
		return nil, fmt.Errorf("vmtest: qemu: %w", err)
	}
	go func() {
		v.err = v.cmd.Wait()
		close(v.exited)
	}()
	return v, nil
}

type consoleWriter VM

func (w *consoleWriter) Write(p []byte) (int, error) {
	v := (*VM)(w)
	v.mu.Lock()
	v.console.Write(p)
	close(v.changed)
	v.changed = make(chan struct{})
	v.mu.Unlock()
	if v.log != nil {
		v.log.Write(p)
	}
	return len(p), nil
}

// Console returns everything QEMU printed so far.
func (v *VM) Console() string {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.console.String()
}

// WaitConsole waits until the console matches re (searching from byte
// offset from) and returns the submatches and the offset after the match.
func (v *VM) WaitConsole(ctx context.Context, re *regexp.Regexp, from int) ([]string, int, error) {
	for {
		v.mu.Lock()
		s := v.console.String()
		ch := v.changed
		v.mu.Unlock()
		if from > len(s) {
			from = len(s)
		}
		if loc := re.FindStringSubmatchIndex(s[from:]); loc != nil {
			var subs []string
			for i := 0; i+1 < len(loc); i += 2 {
				if loc[i] < 0 {
					subs = append(subs, "")
					continue
				}
				subs = append(subs, s[from+loc[i]:from+loc[i+1]])
			}
			return subs, from + loc[1], nil
		}
		select {
		case <-ch:
		case <-v.exited:
			return nil, 0, fmt.Errorf("vmtest: qemu exited (%v) before the console showed %q", v.err, re)
		case <-ctx.Done():
			return nil, 0, fmt.Errorf("vmtest: waiting for %q: %w", re, ctx.Err())
		}
	}
}

// Kill cuts the power: SIGKILL, no shutdown of any kind.
func (v *VM) Kill() {
	_ = v.cmd.Process.Kill()
	<-v.exited
}

// Wait waits for QEMU to exit by itself (the guest rebooted or powered
// off: -no-reboot turns a reboot into an exit).
func (v *VM) Wait(ctx context.Context) error {
	select {
	case <-v.exited:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Exited reports whether QEMU has exited.
func (v *VM) Exited() bool {
	select {
	case <-v.exited:
		return true
	default:
		return false
	}
}

// FreePort returns a TCP port number that was free a moment ago.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	_, p, _ := splitHostPort(l.Addr().String())
	return strconv.Atoi(p)
}
