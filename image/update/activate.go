package update

import (
	"errors"
	"fmt"

	"cxlpool/image/manifest"
)

// Activation: switching the box to the image already in the other slot
// (an earlier push, or the image the box ran before its last update,
// i.e. a rollback). It goes through the same trial as an update: the
// slot boots once at the next reset and becomes the active one only when
// the daemon reports healthy, otherwise the box comes back on the slot it
// runs now. Nothing is written to either slot; only the boot control
// record changes.

// Errors of Activate beyond ErrTrialPending and the image/manifest
// verification sentinels.
var (
	// ErrSlotNotReady: the slot holds no complete, verified image (it is
	// empty, being written, or marked bad).
	ErrSlotNotReady = errors.New("update: the slot holds no ready image")
	// ErrUnknownSlot: a slot name other than "a" or "b".
	ErrUnknownSlot = errors.New("update: no such slot")
)

// Activate schedules slot for a trial boot at the next reset. running is
// the slot the box booted from ("" means the active one, as in Apply).
//
//   - slot == running: a pending trial of the other slot is cancelled
//     (the box stays on what it runs).
//   - the other slot: it must be ready, verify against keys (signature,
//     hashes of what is on the disk) and carry a security version of at
//     least the box's minimum (otherwise an error wrapping
//     manifest.ErrRollback: the rollback floor). A slot that no longer
//     verifies is marked bad, as the loader would.
//
// While the running slot is itself an uncommitted trial, nothing is
// changed (ErrTrialPending): it is committed or reverted first.
func (d *Disk) Activate(slot string, keys manifest.Keys, running string) error {
	if slot != SlotA && slot != SlotB {
		return fmt.Errorf("%w: %q", ErrUnknownSlot, slot)
	}
	st, err := d.State()
	if err != nil {
		return err
	}
	if running == "" {
		running = st.Active
	}
	if running != st.Active {
		return ErrTrialPending
	}
	if slot == running {
		if st.Trial == "" {
			return nil
		}
		st.Trial, st.TrialBooted = "", false
		_, err := d.SetState(st)
		return err
	}
	info := *st.Slot(slot)
	if info.State != StateReady {
		return fmt.Errorf("slot %s is %s: %w", slot, info.State, ErrSlotNotReady)
	}
	if info.SecurityVersion < st.MinSecurityVersion {
		return fmt.Errorf("update: slot %s has security version %d, below the box's minimum %d: %w",
			slot, info.SecurityVersion, st.MinSecurityVersion, manifest.ErrRollback)
	}
	m, err := d.verifySlot(slot, info.Size, info.SHA256, keys)
	if err == nil && m.SecurityVersion < st.MinSecurityVersion {
		// The record and the signed manifest disagree: trust the
		// manifest.
		err = fmt.Errorf("slot %s: manifest security version %d, below the box's minimum %d: %w",
			slot, m.SecurityVersion, st.MinSecurityVersion, manifest.ErrRollback)
	}
	if err != nil {
		// An image that no longer verifies is the slot's fault: mark it
		// as the loader would. A read error is the disk's: leave it.
		if IsRefusal(err) && !errors.Is(err, manifest.ErrRollback) {
			*st.Slot(slot) = SlotInfo{State: StateBad, Version: info.Version, Error: err.Error()}
			if _, serr := d.SetState(st); serr != nil {
				return errors.Join(fmt.Errorf("update: %w", err), serr)
			}
		}
		return fmt.Errorf("update: %w", err)
	}
	if st.Trial == slot && !st.TrialBooted {
		return nil
	}
	st.Trial, st.TrialBooted = slot, false
	_, err = d.SetState(st)
	return err
}

// Activate schedules slot ("a" or "b") for a trial boot at the next reset,
// or, for the running slot, cancels a pending trial (see Disk.Activate).
func (s *Service) Activate(slot string) error {
	d, err := Open(s.Disk)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Activate(slot, s.Keys, s.Running)
}
