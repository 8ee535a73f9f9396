// Package update installs signed images into the inactive A/B slot and
// decides which slot boots.
//
// The boot control record lives in the cxlpool-boot partition (image/disk)
// as two copies, at offsets 0 and 512 KiB. Each copy is one 4 KiB block:
//
//	0  "CXLBOOT1"  magic
//	8  u32 LE      length of the JSON that follows
//	12 u32 LE      CRC-32C of that JSON
//	16 JSON        State (with its sequence number)
//
// A write goes to the copy that does not hold the newest valid state and
// is synced; a reader takes the valid copy with the highest sequence. A
// write torn by a power cut therefore corrupts only the copy being
// replaced, and the previous state stays readable.
//
// The update flow:
//
//  1. Apply reads a bundle (image/manifest) and refuses it before touching
//     any slot unless its signature verifies, its security version is at
//     least the box's minimum and it fits; it marks the inactive slot
//     "writing", streams the bundle into it while checking every part,
//     syncs, reads it back and verifies it again, then marks the slot
//     "ready" and the trial pending. The running slot is never written.
//  2. At the next boot SelectBoot (the boot loader's job) sees the
//     pending trial, records that the trial boot happened and boots the
//     new slot once.
//  3. The guest's init calls MarkGood once the daemon answers healthy:
//     the trial slot becomes the active one and the minimum security
//     version rises to its own.
//  4. If instead the box restarts before MarkGood (crash, hang, power
//     cut), SelectBoot finds the trial already booted, marks that slot
//     bad and boots the previous active slot.
//
// Activate (activate.go) starts the same trial for the image already in
// the other slot (a rollback to the previous image, or one pushed
// earlier) after verifying it again and checking it against the minimum
// security version; activating the running slot cancels a pending trial.
package update

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
)

// Slot names as they appear in State and on the kernel command line
// (cxlpool.slot=a).
const (
	SlotA = "a"
	SlotB = "b"
)

// Other returns the slot that is not s.
func Other(s string) string {
	if s == SlotA {
		return SlotB
	}
	return SlotA
}

// Slot states.
const (
	StateEmpty   = "empty"
	StateWriting = "writing"
	StateReady   = "ready"
	StateBad     = "bad"
)

// SlotInfo describes what a slot holds.
type SlotInfo struct {
	State           string `json:"state"`
	Version         string `json:"version,omitempty"`
	SecurityVersion uint64 `json:"security_version,omitempty"`
	// Size and SHA256 are the raw bundle's, as written to the slot.
	Size   int64  `json:"size,omitempty"`
	SHA256 string `json:"sha256,omitempty"`
	// Error says why a slot is bad.
	Error string `json:"error,omitempty"`
}

// State is the boot control record.
type State struct {
	Seq uint64 `json:"seq"`
	// Active is the committed slot: the one that boots when no trial is
	// pending.
	Active string `json:"active"`
	// Trial is a slot waiting for (or in) its one trial boot.
	Trial string `json:"trial,omitempty"`
	// TrialBooted records that the trial boot has started; a second boot
	// with it set means the trial failed.
	TrialBooted bool `json:"trial_booted,omitempty"`
	// MinSecurityVersion refuses older images (rollback protection).
	MinSecurityVersion uint64   `json:"min_security_version"`
	A                  SlotInfo `json:"slot_a"`
	B                  SlotInfo `json:"slot_b"`
}

// Slot returns a pointer to the named slot's info.
func (s *State) Slot(name string) *SlotInfo {
	if name == SlotB {
		return &s.B
	}
	return &s.A
}

const (
	ctlMagic     = "CXLBOOT1"
	ctlBlock     = 4096
	ctlCopy2     = 512 << 10
	ctlHeaderLen = 16
)

// ErrNoBootControl reports a boot partition with no valid record.
var ErrNoBootControl = errors.New("update: no valid boot control record")

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// syncer is what a disk offers to make writes durable.
type syncer interface{ Sync() error }

// ReadState returns the newest valid record of the boot partition part
// (an io.ReaderAt positioned at the partition start, e.g. an
// io.SectionReader).
func ReadState(part io.ReaderAt) (State, error) {
	var best State
	found := false
	var errs []error
	for _, off := range []int64{0, ctlCopy2} {
		st, err := readCopy(part, off)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if !found || st.Seq > best.Seq {
			best, found = st, true
		}
	}
	if !found {
		return State{}, fmt.Errorf("%w: %w", ErrNoBootControl, errors.Join(errs...))
	}
	return best, nil
}

func readCopy(part io.ReaderAt, off int64) (State, error) {
	b := make([]byte, ctlBlock)
	if _, err := part.ReadAt(b, off); err != nil {
		return State{}, fmt.Errorf("copy at %d: %w", off, err)
	}
	if string(b[:8]) != ctlMagic {
		return State{}, fmt.Errorf("copy at %d: no magic", off)
	}
	n := binary.LittleEndian.Uint32(b[8:])
	if n > ctlBlock-ctlHeaderLen {
		return State{}, fmt.Errorf("copy at %d: length %d", off, n)
	}
	body := b[ctlHeaderLen : ctlHeaderLen+n]
	if crc32.Checksum(body, castagnoli) != binary.LittleEndian.Uint32(b[12:]) {
		return State{}, fmt.Errorf("copy at %d: checksum mismatch", off)
	}
	var st State
	if err := json.Unmarshal(body, &st); err != nil {
		return State{}, fmt.Errorf("copy at %d: %w", off, err)
	}
	if st.Active != SlotA && st.Active != SlotB {
		return State{}, fmt.Errorf("copy at %d: active slot %q", off, st.Active)
	}
	if st.Trial != "" && st.Trial != SlotA && st.Trial != SlotB {
		return State{}, fmt.Errorf("copy at %d: trial slot %q", off, st.Trial)
	}
	return st, nil
}

// WriteState stores st as the next record: its Seq becomes one more than
// the newest valid record's, and it replaces the older copy. w must be
// the boot partition (offset 0 = partition start); s, when not nil, is
// synced after the write.
func WriteState(part interface {
	io.ReaderAt
	io.WriterAt
}, s syncer, st State) (State, error) {
	off := int64(0)
	var seq uint64
	a, errA := readCopy(part, 0)
	b, errB := readCopy(part, ctlCopy2)
	switch {
	case errA == nil && errB == nil:
		seq = max(a.Seq, b.Seq)
		if a.Seq > b.Seq {
			off = ctlCopy2
		}
	case errA == nil:
		seq, off = a.Seq, ctlCopy2
	case errB == nil:
		seq, off = b.Seq, 0
	}
	st.Seq = seq + 1
	body, err := json.Marshal(st)
	if err != nil {
		return State{}, fmt.Errorf("update: boot control: %w", err)
	}
	if len(body) > ctlBlock-ctlHeaderLen {
		return State{}, fmt.Errorf("update: boot control record is %d bytes", len(body))
	}
	blk := make([]byte, ctlBlock)
	copy(blk, ctlMagic)
	binary.LittleEndian.PutUint32(blk[8:], uint32(len(body)))
	binary.LittleEndian.PutUint32(blk[12:], crc32.Checksum(body, castagnoli))
	copy(blk[ctlHeaderLen:], body)
	if _, err := part.WriteAt(blk, off); err != nil {
		return State{}, fmt.Errorf("update: write boot control: %w", err)
	}
	if s != nil {
		if err := s.Sync(); err != nil {
			return State{}, fmt.Errorf("update: sync boot control: %w", err)
		}
	}
	return st, nil
}
