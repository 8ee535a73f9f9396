// Package linuxcxl reads the CXL memory devices the Linux CXL driver has
// bound on this machine: the sysfs attributes under
// /sys/bus/cxl/devices/memX (cxl-wire.md §6.2) and, through the mailbox
// ioctls on /dev/cxl/memX (§6.1), the device's own Identify Memory Device
// answer. It is pure Go (golang.org/x/sys/unix, no cgo) and works with
// the kernel's known commands only: CONFIG_CXL_MEM_RAW_COMMANDS is off in
// distribution kernels.
//
// The box uses it to list its local CXL memory (a QEMU cxl-type3 device in
// the VM test, the board's expanders on hardware) beside the pooled
// device it manages over MCTP. memN names follow probe order; identify
// devices by Serial.
package linuxcxl

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"cxlpool/fabric/cci"
)

// Options locate sysfs and /dev; tests point them at fixture trees.
type Options struct {
	SysRoot string // default "/sys"
	DevRoot string // default "/dev"
	// NoMailbox skips the ioctls (sysfs only).
	NoMailbox bool
}

// Reader lists memory devices.
type Reader struct {
	opt Options
}

// New returns a Reader.
func New(opt Options) *Reader {
	if opt.SysRoot == "" {
		opt.SysRoot = "/sys"
	}
	if opt.DevRoot == "" {
		opt.DevRoot = "/dev"
	}
	return &Reader{opt: opt}
}

// MemDev is one CXL memory device.
type MemDev struct {
	Name             string `json:"name"` // mem0
	Serial           uint64 `json:"serial"`
	FirmwareVersion  string `json:"firmware_version"`
	PayloadMax       uint64 `json:"payload_max"`
	LabelStorageSize uint64 `json:"label_storage_size"`
	RAMSize          uint64 `json:"ram_size"`  // bytes
	PMEMSize         uint64 `json:"pmem_size"` // bytes
	NUMANode         int    `json:"numa_node"`
	// Host is the PCI function (BDF) the memdev hangs off.
	Host string `json:"host,omitempty"`
	// Identify is the mailbox's Identify Memory Device answer, nil when
	// the mailbox was not asked or failed (IdentifyError says why).
	Identify      *Identify     `json:"identify,omitempty"`
	IdentifyError string        `json:"identify_error,omitempty"`
	Commands      []CommandInfo `json:"commands,omitempty"`
}

// Identify is the Identify Memory Device (4000h) output with capacities
// in bytes.
type Identify struct {
	FirmwareRevision string `json:"firmware_revision"`
	TotalCapacity    uint64 `json:"total_capacity"`
	VolatileOnly     uint64 `json:"volatile_only"`
	PersistentOnly   uint64 `json:"persistent_only"`
	PartitionAlign   uint64 `json:"partition_align"`
	LSASize          uint32 `json:"lsa_size"`
}

// capacityUnit is Identify's capacity unit: 256 MiB.
const capacityUnit = 256 << 20

func identifyFrom(r *cci.IdentifyMemoryDeviceResp) *Identify {
	return &Identify{FirmwareRevision: r.FWRevision, TotalCapacity: r.TotalCapacity * capacityUnit,
		VolatileOnly: r.VolatileOnly * capacityUnit, PersistentOnly: r.PersistentOnly * capacityUnit,
		PartitionAlign: r.PartitionAlign * capacityUnit, LSASize: r.LSASize}
}

// Capacity is the device's size: Identify's total, or sysfs ram+pmem.
func (d MemDev) Capacity() uint64 {
	if d.Identify != nil && d.Identify.TotalCapacity > 0 {
		return d.Identify.TotalCapacity
	}
	return d.RAMSize + d.PMEMSize
}

// Summary is one line for people.
func (d MemDev) Summary() string {
	s := fmt.Sprintf("%s: serial %#x, firmware %q, %d MiB (ram %d MiB, pmem %d MiB), host %s",
		d.Name, d.Serial, d.FirmwareVersion, d.Capacity()>>20, d.RAMSize>>20, d.PMEMSize>>20, d.Host)
	if d.Identify != nil {
		s += fmt.Sprintf(", mailbox identify: firmware %q, %d MiB", d.Identify.FirmwareRevision, d.Identify.TotalCapacity>>20)
	} else if d.IdentifyError != "" {
		s += ", mailbox: " + d.IdentifyError
	}
	return s
}

// List returns the memory devices sorted by name. No CXL bus (no driver
// loaded) is an empty list, not an error.
func (r *Reader) List() ([]MemDev, error) {
	dir := filepath.Join(r.opt.SysRoot, "bus", "cxl", "devices")
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("linuxcxl: %w", err)
	}
	var names []string
	for _, e := range ents {
		if n := e.Name(); strings.HasPrefix(n, "mem") && isDigits(n[3:]) {
			names = append(names, n)
		}
	}
	sort.Slice(names, func(i, j int) bool {
		a, _ := strconv.Atoi(names[i][3:])
		b, _ := strconv.Atoi(names[j][3:])
		return a < b
	})
	devs := make([]MemDev, 0, len(names))
	for _, n := range names {
		d, err := r.read(filepath.Join(dir, n), n)
		if err != nil {
			return nil, err
		}
		devs = append(devs, d)
	}
	return devs, nil
}

func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// read gathers one device's attributes.
func (r *Reader) read(path, name string) (MemDev, error) {
	d := MemDev{Name: name, NUMANode: -1}
	var err error
	str := func(attr string) string {
		b, e := os.ReadFile(filepath.Join(path, attr))
		if e != nil {
			if !errors.Is(e, os.ErrNotExist) && err == nil {
				err = fmt.Errorf("linuxcxl: %s: %w", name, e)
			}
			return ""
		}
		return strings.TrimSpace(string(b))
	}
	num := func(attr string) uint64 {
		s := str(attr)
		if s == "" {
			return 0
		}
		v, e := strconv.ParseUint(s, 0, 64)
		if e != nil && err == nil {
			err = fmt.Errorf("linuxcxl: %s/%s: %q: %w", name, attr, s, e)
		}
		return v
	}
	d.Serial = num("serial")
	d.FirmwareVersion = str("firmware_version")
	d.PayloadMax = num("payload_max")
	d.LabelStorageSize = num("label_storage_size")
	d.RAMSize = num("ram/size")
	d.PMEMSize = num("pmem/size")
	if s := str("numa_node"); s != "" {
		if v, e := strconv.Atoi(s); e == nil {
			d.NUMANode = v
		}
	}
	if err != nil {
		return MemDev{}, err
	}
	// sysfs links memX under its PCI function:
	// .../0000:0d:00.0/mem0.
	if real, e := filepath.EvalSymlinks(path); e == nil {
		if parent := filepath.Base(filepath.Dir(real)); strings.Count(parent, ":") == 2 {
			d.Host = parent
		}
	}
	if !r.opt.NoMailbox {
		r.mailbox(&d)
	}
	return d, nil
}

// mailbox asks the device itself through /dev/cxl/memX.
func (r *Reader) mailbox(d *MemDev) {
	mb, err := openMailbox(filepath.Join(r.opt.DevRoot, "cxl", d.Name))
	if err != nil {
		d.IdentifyError = err.Error()
		return
	}
	defer mb.Close()
	if cmds, err := mb.Query(); err == nil {
		d.Commands = cmds
	}
	out, err := mb.Send(CmdIdentify, nil, cci.IdentifyMemoryDeviceRespLen)
	if err != nil {
		d.IdentifyError = err.Error()
		return
	}
	var id cci.IdentifyMemoryDeviceResp
	if err := id.UnmarshalBinary(out); err != nil {
		d.IdentifyError = err.Error()
		return
	}
	d.Identify = identifyFrom(&id)
}
