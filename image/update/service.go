package update

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"cxlpool/image/manifest"
)

// Defaults on the box: the disk, the keys the image was built to trust
// (image/build puts the signer's public key there) and the file the boot
// loader's cxlpool.slot= is read from.
const (
	DefaultDisk    = "/dev/vda"
	DefaultKeysDir = "/etc/cxlpool/update-keys"
	CmdlinePath    = "/proc/cmdline"
)

// Service is the update side of a running box, for the daemon's Redfish
// UpdateService (and the guest's maintenance port): it applies pushed
// images to the inactive slot and lists both slots for FirmwareInventory.
type Service struct {
	Disk    string
	Keys    manifest.Keys
	Running string // the booted slot ("a" or "b"); empty: the active one
}

// ServiceFromBoot builds the Service of the running box: the slot from
// the kernel command line (cxlpool.slot=), the keys from keysDir.
func ServiceFromBoot(disk, keysDir, cmdline string) (*Service, error) {
	keys, err := manifest.LoadPublicKeys(keysDir)
	if err != nil {
		return nil, fmt.Errorf("update: %w", err)
	}
	s := &Service{Disk: disk, Keys: keys}
	if b, err := os.ReadFile(cmdline); err == nil {
		s.Running = SlotFromCmdline(string(b))
	}
	return s, nil
}

// SlotFromCmdline returns the value of cxlpool.slot= ("" if absent).
func SlotFromCmdline(cmdline string) string {
	for _, w := range strings.Fields(cmdline) {
		if v, ok := strings.CutPrefix(w, "cxlpool.slot="); ok && (v == SlotA || v == SlotB) {
			return v
		}
	}
	return ""
}

// Apply verifies r as a signed bundle and writes it to the inactive slot
// as the pending trial (see Disk.Apply). The caller reboots the box to
// try it; errors wrap the image/manifest sentinels (ErrUnsigned,
// ErrBadSig, ErrCorrupt, ErrTruncated, ErrRollback, ErrTooLarge) or
// ErrTrialPending.
func (s *Service) Apply(ctx context.Context, r io.Reader, progress func(written int64)) (*manifest.Manifest, error) {
	d, err := Open(s.Disk)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	return d.Apply(ctx, r, s.Keys, ApplyOptions{Running: s.Running, Progress: progress})
}

// SlotStatus is one slot for FirmwareInventory.
type SlotStatus struct {
	Slot string
	SlotInfo
	Active  bool // boots when no trial is pending
	Running bool // the box runs from it now
	Trial   bool // waiting for (or in) its trial boot
}

// Slots lists both slots, A first.
func (s *Service) Slots() ([]SlotStatus, error) {
	d, err := Open(s.Disk)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	st, err := d.State()
	if err != nil {
		return nil, err
	}
	running := s.Running
	if running == "" {
		running = st.Active
	}
	var out []SlotStatus
	for _, n := range []string{SlotA, SlotB} {
		out = append(out, SlotStatus{Slot: n, SlotInfo: *st.Slot(n), Active: st.Active == n, Running: running == n, Trial: st.Trial == n})
	}
	return out, nil
}

// IsRefusal reports whether err is the image's fault (signature, content,
// size, age) rather than the box's: an API answers 400 for those.
func IsRefusal(err error) bool {
	for _, e := range []error{manifest.ErrUnsigned, manifest.ErrBadSig, manifest.ErrCorrupt, manifest.ErrTruncated,
		manifest.ErrRollback, manifest.ErrTooLarge, manifest.ErrFormat, manifest.ErrUnknownPart} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}
