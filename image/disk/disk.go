// Package disk lays out and reads the box's disk: a GUID Partition Table
// written by plain Go code (no loop devices, no root) with four
// partitions found by name:
//
//	LBA 0        protective MBR
//	LBA 1..33    primary GPT header and entries
//	1 MiB        cxlpool-boot   1 MiB   boot control (image/update: two
//	                                    checksummed, sequence-numbered copies)
//	2 MiB        cxlpool-slot-a N MiB   slot A: a signed bundle (raw tar)
//	...          cxlpool-slot-b N MiB   slot B: a signed bundle (raw tar)
//	...          cxlpool-data   M MiB   ext4: SQLite inventory, keys, config
//	end-33 LBAs  backup GPT entries and header
//
// Every partition starts on a 1 MiB boundary. Linux (CONFIG_EFI_PARTITION)
// sees them as /dev/vda1..4; code that has the whole disk open uses Open
// and Find instead of device names.
package disk

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"unicode/utf16"
)

// Partition names.
const (
	BootName  = "cxlpool-boot"
	SlotAName = "cxlpool-slot-a"
	SlotBName = "cxlpool-slot-b"
	DataName  = "cxlpool-data"
	// ESPName is the EFI system partition: the loader stage as
	// \EFI\BOOT\BOOTX64.EFI, for UEFI boards.
	ESPName = "cxlpool-esp"
)

// SectorSize is the logical block size the table is written for.
const SectorSize = 512

const (
	mib          = 1 << 20
	entryCount   = 128
	entrySize    = 128
	entryLBAs    = entryCount * entrySize / SectorSize // 32
	headerSize   = 92
	firstUsable  = 2 + entryLBAs // 34
	gptSignature = "EFI PART"
	gptRevision  = 0x00010000
)

// ErrNoGPT reports a disk without a valid GPT; ErrNoPartition a missing
// partition name.
var (
	ErrNoGPT       = errors.New("disk: no valid GUID partition table")
	ErrNoPartition = errors.New("disk: partition not found")
)

// linuxData is the "Linux filesystem data" partition type; partitions are
// told apart by name, not type.
var linuxData = GUID{0x0FC63DAF, 0x8483, 0x4772, [8]byte{0x8E, 0x79, 0x3D, 0x69, 0xD8, 0x47, 0x7D, 0xE4}}

// ESPType is the "EFI System" partition type (gdisk's EF00), the one UEFI
// firmware looks for \EFI\BOOT\BOOTX64.EFI on; the ESP is the only
// partition whose type matters.
var ESPType = GUID{0xC12A7328, 0xF81F, 0x11D2, [8]byte{0xBA, 0x4B, 0x00, 0xA0, 0xC9, 0x3E, 0xC9, 0x3B}}

// GUID is a GPT GUID in its textual field order.
type GUID struct {
	A uint32
	B uint16
	C uint16
	D [8]byte
}

func (g GUID) put(b []byte) {
	binary.LittleEndian.PutUint32(b, g.A)
	binary.LittleEndian.PutUint16(b[4:], g.B)
	binary.LittleEndian.PutUint16(b[6:], g.C)
	copy(b[8:16], g.D[:])
}

func getGUID(b []byte) GUID {
	var g GUID
	g.A = binary.LittleEndian.Uint32(b)
	g.B = binary.LittleEndian.Uint16(b[4:])
	g.C = binary.LittleEndian.Uint16(b[6:])
	copy(g.D[:], b[8:16])
	return g
}

// String is the usual 8-4-4-4-12 form.
func (g GUID) String() string {
	return fmt.Sprintf("%08X-%04X-%04X-%X-%X", g.A, g.B, g.C, g.D[:2], g.D[2:])
}

// guidFrom derives a stable GUID from a seed and an index, so builds are
// reproducible (the disk GUID and partition GUIDs carry no secret).
func guidFrom(seed uint64, i uint32) GUID {
	x := seed ^ uint64(i)*0x9E3779B97F4A7C15
	mix := func() uint64 {
		x += 0x9E3779B97F4A7C15
		z := x
		z = (z ^ z>>30) * 0xBF58476D1CE4E5B9
		z = (z ^ z>>27) * 0x94D049BB133111EB
		return z ^ z>>31
	}
	var b [16]byte
	binary.LittleEndian.PutUint64(b[:], mix())
	binary.LittleEndian.PutUint64(b[8:], mix())
	b[7] = b[7]&0x0f | 0x40 // version 4 (in the C field's high nibble)
	b[8] = b[8]&0x3f | 0x80
	return getGUID(b[:])
}

// Partition is one entry of the table.
type Partition struct {
	Index  int // 1-based, as Linux numbers them
	Name   string
	Type   GUID
	GUID   GUID
	Offset int64 // bytes from the start of the disk
	Size   int64 // bytes
}

// Layout is the disk's partition sizes.
type Layout struct {
	SlotSize int64 // each of slot A and B
	DataSize int64
	BootSize int64
	// ESPSize is the EFI system partition's (0: none). It is the last
	// partition, so adding it moves none of the others.
	ESPSize int64
	// Seed makes the GUIDs reproducible.
	Seed uint64
}

// DefaultLayout fits a ~25 MB bundle with room to grow.
func DefaultLayout() Layout {
	return Layout{SlotSize: 64 * mib, DataSize: 64 * mib, BootSize: 1 * mib, ESPSize: 32 * mib}
}

// Partitions returns the table Layout describes, and the disk size.
func (l Layout) Partitions() ([]Partition, int64, error) {
	for _, s := range []int64{l.SlotSize, l.DataSize, l.BootSize} {
		if s <= 0 || s%mib != 0 {
			return nil, 0, fmt.Errorf("disk: partition sizes must be positive multiples of 1 MiB, got %d", s)
		}
	}
	var parts []Partition
	off := int64(mib)
	for i, p := range []struct {
		name string
		size int64
	}{{BootName, l.BootSize}, {SlotAName, l.SlotSize}, {SlotBName, l.SlotSize}, {DataName, l.DataSize}} {
		parts = append(parts, Partition{Index: i + 1, Name: p.name, Type: linuxData, GUID: guidFrom(l.Seed, uint32(i+1)),
			Offset: off, Size: p.size})
		off += p.size
	}
	if l.ESPSize < 0 || l.ESPSize%mib != 0 {
		return nil, 0, fmt.Errorf("disk: the ESP size must be a multiple of 1 MiB, got %d", l.ESPSize)
	}
	if l.ESPSize > 0 {
		parts = append(parts, Partition{Index: len(parts) + 1, Name: ESPName, Type: ESPType, GUID: guidFrom(l.Seed, uint32(len(parts)+1)),
			Offset: off, Size: l.ESPSize})
		off += l.ESPSize
	}
	// Room for the backup table, rounded up to 1 MiB.
	return parts, off + mib, nil
}

// WriteTable writes a protective MBR and the primary and backup GPT for
// parts on a disk of size bytes. It writes only the table sectors.
func WriteTable(w io.WriterAt, size int64, parts []Partition, seed uint64) error {
	lbas := size / SectorSize
	if size%SectorSize != 0 || lbas < 2*firstUsable+1 {
		return fmt.Errorf("disk: size %d is not a usable disk size", size)
	}
	last := uint64(lbas - 1)
	lastUsable := last - 1 - entryLBAs
	entries := make([]byte, entryCount*entrySize)
	for i, p := range parts {
		if p.Offset%SectorSize != 0 || p.Size%SectorSize != 0 || p.Size <= 0 {
			return fmt.Errorf("disk: partition %s is not sector aligned", p.Name)
		}
		first, end := uint64(p.Offset/SectorSize), uint64((p.Offset+p.Size)/SectorSize-1)
		if first < firstUsable || end > lastUsable {
			return fmt.Errorf("disk: partition %s lies outside the usable area", p.Name)
		}
		name := utf16.Encode([]rune(p.Name))
		if len(name) > 36 {
			return fmt.Errorf("disk: partition name %q longer than 36 UTF-16 units", p.Name)
		}
		e := entries[i*entrySize:]
		p.Type.put(e[0:])
		p.GUID.put(e[16:])
		binary.LittleEndian.PutUint64(e[32:], first)
		binary.LittleEndian.PutUint64(e[40:], end)
		for j, u := range name {
			binary.LittleEndian.PutUint16(e[56+2*j:], u)
		}
	}
	entriesCRC := crc32.ChecksumIEEE(entries)

	mbr := make([]byte, SectorSize)
	pe := mbr[446:]
	pe[1], pe[2], pe[3] = 0x00, 0x02, 0x00 // CHS of LBA 1
	pe[4] = 0xEE
	pe[5], pe[6], pe[7] = 0xFF, 0xFF, 0xFF
	binary.LittleEndian.PutUint32(pe[8:], 1)
	binary.LittleEndian.PutUint32(pe[12:], uint32(min(uint64(lbas-1), 0xFFFFFFFF)))
	mbr[510], mbr[511] = 0x55, 0xAA

	header := func(my, alt, entryLBA uint64) []byte {
		h := make([]byte, SectorSize)
		copy(h, gptSignature)
		binary.LittleEndian.PutUint32(h[8:], gptRevision)
		binary.LittleEndian.PutUint32(h[12:], headerSize)
		binary.LittleEndian.PutUint64(h[24:], my)
		binary.LittleEndian.PutUint64(h[32:], alt)
		binary.LittleEndian.PutUint64(h[40:], firstUsable)
		binary.LittleEndian.PutUint64(h[48:], lastUsable)
		guidFrom(seed, 0).put(h[56:])
		binary.LittleEndian.PutUint64(h[72:], entryLBA)
		binary.LittleEndian.PutUint32(h[80:], entryCount)
		binary.LittleEndian.PutUint32(h[84:], entrySize)
		binary.LittleEndian.PutUint32(h[88:], entriesCRC)
		binary.LittleEndian.PutUint32(h[16:], crc32.ChecksumIEEE(h[:headerSize]))
		return h
	}
	writes := []struct {
		lba uint64
		b   []byte
	}{
		{0, mbr},
		{1, header(1, last, 2)},
		{2, entries},
		{last - entryLBAs, entries},
		{last, header(last, 1, last-entryLBAs)},
	}
	for _, wr := range writes {
		if _, err := w.WriteAt(wr.b, int64(wr.lba)*SectorSize); err != nil {
			return fmt.Errorf("disk: write table: %w", err)
		}
	}
	return nil
}

// ReadTable reads the GPT of a disk of size bytes: the primary table, or
// the backup when the primary is damaged.
func ReadTable(r io.ReaderAt, size int64) ([]Partition, error) {
	parts, err := readGPT(r, 1)
	if err == nil {
		return parts, nil
	}
	if size >= 2*firstUsable*SectorSize {
		if bp, berr := readGPT(r, uint64(size/SectorSize-1)); berr == nil {
			return bp, nil
		}
	}
	return nil, err
}

func readGPT(r io.ReaderAt, lba uint64) ([]Partition, error) {
	h := make([]byte, SectorSize)
	if _, err := r.ReadAt(h, int64(lba)*SectorSize); err != nil {
		return nil, fmt.Errorf("%w: read header: %w", ErrNoGPT, err)
	}
	if string(h[:8]) != gptSignature {
		return nil, fmt.Errorf("%w: no signature at LBA %d", ErrNoGPT, lba)
	}
	hs := binary.LittleEndian.Uint32(h[12:])
	if hs < headerSize || hs > SectorSize {
		return nil, fmt.Errorf("%w: header size %d", ErrNoGPT, hs)
	}
	hc := make([]byte, hs)
	copy(hc, h[:hs])
	want := binary.LittleEndian.Uint32(hc[16:])
	binary.LittleEndian.PutUint32(hc[16:], 0)
	if crc32.ChecksumIEEE(hc) != want {
		return nil, fmt.Errorf("%w: header checksum mismatch at LBA %d", ErrNoGPT, lba)
	}
	n, es := binary.LittleEndian.Uint32(h[80:]), binary.LittleEndian.Uint32(h[84:])
	if es < 128 || es%8 != 0 || n == 0 || uint64(n)*uint64(es) > 1<<20 {
		return nil, fmt.Errorf("%w: %d entries of %d bytes", ErrNoGPT, n, es)
	}
	entries := make([]byte, int(n)*int(es))
	if _, err := r.ReadAt(entries, int64(binary.LittleEndian.Uint64(h[72:]))*SectorSize); err != nil {
		return nil, fmt.Errorf("%w: read entries: %w", ErrNoGPT, err)
	}
	if crc32.ChecksumIEEE(entries) != binary.LittleEndian.Uint32(h[88:]) {
		return nil, fmt.Errorf("%w: entries checksum mismatch", ErrNoGPT)
	}
	var parts []Partition
	for i := 0; i < int(n); i++ {
		e := entries[i*int(es):]
		typ := getGUID(e)
		if typ == (GUID{}) {
			continue
		}
		first, end := binary.LittleEndian.Uint64(e[32:]), binary.LittleEndian.Uint64(e[40:])
		if end < first || end >= 1<<54 {
			return nil, fmt.Errorf("%w: entry %d spans LBA %d..%d", ErrNoGPT, i+1, first, end)
		}
		var u []uint16
		for j := 0; j < 36; j++ {
			c := binary.LittleEndian.Uint16(e[56+2*j:])
			if c == 0 {
				break
			}
			u = append(u, c)
		}
		parts = append(parts, Partition{Index: i + 1, Name: string(utf16.Decode(u)), Type: typ, GUID: getGUID(e[16:]),
			Offset: int64(first) * SectorSize, Size: int64(end-first+1) * SectorSize})
	}
	return parts, nil
}

// Find returns the partition called name.
func Find(parts []Partition, name string) (Partition, error) {
	for _, p := range parts {
		if p.Name == name {
			return p, nil
		}
	}
	return Partition{}, fmt.Errorf("%w: %s", ErrNoPartition, name)
}

// Section returns a reader of the partition's bytes.
func (p Partition) Section(r io.ReaderAt) *io.SectionReader {
	return io.NewSectionReader(r, p.Offset, p.Size)
}

// DevicePath is the Linux device node of partition index on disk dev:
// /dev/vda → /dev/vda4, /dev/nvme0n1 → /dev/nvme0n1p4.
func DevicePath(dev string, index int) string {
	if dev != "" && dev[len(dev)-1] >= '0' && dev[len(dev)-1] <= '9' {
		return fmt.Sprintf("%sp%d", dev, index)
	}
	return fmt.Sprintf("%s%d", dev, index)
}

// IsZero reports whether b holds only zero bytes (sparse copies skip such
// blocks).
func IsZero(b []byte) bool {
	return len(bytes.TrimLeft(b, "\x00")) == 0
}
