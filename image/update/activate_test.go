package update

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	"cxlpool/image/manifest"
)

// committed returns a disk whose slot b holds 2.0 (security version sv),
// tried and committed, with 1.0 (security version 1) left in slot a.
func committed(t *testing.T, sv uint64) *memFile {
	t.Helper()
	f := newDisk(t)
	d := open(t, f)
	if _, err := d.Apply(context.Background(), bytes.NewReader(bundle(t, "2.0", sv, testKey, 100)), trusted(), ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
	if b := boot(t, d); b.Slot != SlotB || !b.Trial {
		t.Fatalf("trial boot: slot %s trial %v, want b on trial", b.Slot, b.Trial)
	}
	if ok, err := d.MarkGood(SlotB); !ok || err != nil {
		t.Fatalf("MarkGood: %v %v", ok, err)
	}
	return f
}

// pushed returns a disk running 1.0 from slot a with 2.0 in slot b as the
// pending trial (not booted yet).
func pushed(t *testing.T) *memFile {
	t.Helper()
	f := newDisk(t)
	if _, err := open(t, f).Apply(context.Background(), bytes.NewReader(bundle(t, "2.0", 2, testKey, 100)), trusted(), ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
	return f
}

// slotsOf summarises a state: "active a, trial b; a ready 1.0, b bad".
func slotsOf(st State) string {
	s := "active " + st.Active
	if st.Trial != "" {
		s += ", trial " + st.Trial
		if st.TrialBooted {
			s += " (booted)"
		}
	}
	return fmt.Sprintf("%s; a %s %s, b %s %s; min %d", s, st.A.State, st.A.Version, st.B.State, st.B.Version, st.MinSecurityVersion)
}

// TestActivate: which slots may be scheduled, and the boot control
// record each request leaves behind.
func TestActivate(t *testing.T) {
	_, foreign, _ := ed25519.GenerateKey(nil)
	otherKeys := manifest.Keys{}
	otherKeys.Add(foreign.Public().(ed25519.PublicKey))
	tests := []struct {
		name    string
		disk    func(t *testing.T) *memFile
		slot    string
		running string
		keys    manifest.Keys
		wantErr error
		want    string // slotsOf after the call
	}{
		{"rollback to the previous image", func(t *testing.T) *memFile { return committed(t, 1) }, SlotA, SlotB, nil, nil,
			"active b, trial a; a ready 1.0, b ready 2.0; min 1"},
		{"rollback, running slot from the record", func(t *testing.T) *memFile { return committed(t, 1) }, SlotA, "", nil, nil,
			"active b, trial a; a ready 1.0, b ready 2.0; min 1"},
		{"rollback below the floor", func(t *testing.T) *memFile { return committed(t, 2) }, SlotA, SlotB, nil, manifest.ErrRollback,
			"active b; a ready 1.0, b ready 2.0; min 2"},
		{"the running slot cancels the pending trial", pushed, SlotA, SlotA, nil, nil,
			"active a; a ready 1.0, b ready 2.0; min 1"},
		{"the running slot without a trial", func(t *testing.T) *memFile { return committed(t, 2) }, SlotB, SlotB, nil, nil,
			"active b; a ready 1.0, b ready 2.0; min 2"},
		{"the pending trial again", pushed, SlotB, SlotA, nil, nil,
			"active a, trial b; a ready 1.0, b ready 2.0; min 1"},
		{"empty slot", newDisk, SlotB, SlotA, nil, ErrSlotNotReady,
			"active a; a ready 1.0, b empty ; min 1"},
		{"slot being written", func(t *testing.T) *memFile {
			f := newDisk(t)
			d := open(t, f)
			st, _ := d.State()
			st.B = SlotInfo{State: StateWriting, Version: "2.0", SecurityVersion: 2}
			if _, err := d.SetState(st); err != nil {
				t.Fatal(err)
			}
			return f
		}, SlotB, SlotA, nil, ErrSlotNotReady, "active a; a ready 1.0, b writing 2.0; min 1"},
		{"bad slot (a failed trial)", func(t *testing.T) *memFile {
			f := pushed(t)
			d := open(t, f)
			boot(t, d)
			boot(t, d) // never reported healthy: back to a, b bad
			return f
		}, SlotB, SlotA, nil, ErrSlotNotReady, "active a; a ready 1.0, b bad 2.0; min 1"},
		{"corrupt on the disk", func(t *testing.T) *memFile {
			f := committed(t, 1)
			f.b[2*mib+1500] ^= 1 // inside slot a's bundle
			return f
		}, SlotA, SlotB, nil, manifest.ErrCorrupt, "active b; a bad 1.0, b ready 2.0; min 1"},
		{"signed with a key the box no longer trusts", func(t *testing.T) *memFile { return committed(t, 1) }, SlotA, SlotB, otherKeys,
			manifest.ErrBadSig, "active b; a bad 1.0, b ready 2.0; min 1"},
		{"the running slot is on trial", func(t *testing.T) *memFile {
			f := pushed(t)
			boot(t, open(t, f))
			return f
		}, SlotA, SlotB, nil, ErrTrialPending, "active a, trial b (booted); a ready 1.0, b ready 2.0; min 1"},
		{"unknown slot", newDisk, "c", SlotA, nil, ErrUnknownSlot, "active a; a ready 1.0, b empty ; min 1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := tt.disk(t)
			d := open(t, f)
			keys := tt.keys
			if keys == nil {
				keys = trusted()
			}
			err := d.Activate(tt.slot, keys, tt.running)
			if !errors.Is(err, tt.wantErr) || (err != nil && tt.wantErr == nil) {
				t.Fatalf("Activate(%q): got %v, want %v", tt.slot, err, tt.wantErr)
			}
			st, err := d.State()
			if err != nil {
				t.Fatal(err)
			}
			got := slotsOf(st)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("state after Activate (-want +got):\n%s", diff)
			}
		})
	}
}

// TestActivateRollbackTrial: a rollback is a trial like an update: it is
// committed once healthy (and the floor does not fall below what the box
// already committed), or, if it never reports healthy, the box comes back
// on the image it ran.
func TestActivateRollbackTrial(t *testing.T) {
	for _, healthy := range []bool{true, false} {
		t.Run(fmt.Sprintf("healthy=%v", healthy), func(t *testing.T) {
			d := open(t, committed(t, 1))
			if err := d.Activate(SlotA, trusted(), SlotB); err != nil {
				t.Fatal(err)
			}
			b := boot(t, d)
			if b.Slot != SlotA || !b.Trial || b.Manifest.Version != "1.0" {
				t.Fatalf("boot after activation: slot %s trial %v version %s, want a 1.0 on trial", b.Slot, b.Trial, b.Manifest.Version)
			}
			want := "active b; a bad 1.0, b ready 2.0; min 1"
			if healthy {
				if ok, err := d.MarkGood(SlotA); !ok || err != nil {
					t.Fatalf("MarkGood: %v %v", ok, err)
				}
				want = "active a; a ready 1.0, b ready 2.0; min 1"
			}
			b = boot(t, d)
			if wantSlot := map[bool]string{true: SlotA, false: SlotB}[healthy]; b.Slot != wantSlot || b.Trial {
				t.Fatalf("next boot: slot %s trial %v, want %s, not on trial", b.Slot, b.Trial, wantSlot)
			}
			st, _ := d.State()
			if diff := cmp.Diff(want, slotsOf(st)); diff != "" {
				t.Errorf("state (-want +got):\n%s", diff)
			}
		})
	}
}

// TestActivatePowerCut cuts the power at every write of an activation
// (a rollback, a cancellation and a refusal that marks the slot bad),
// clean and torn, and boots: the box comes up as before the call or as
// after it (a torn record that landed whole counts as written), never
// anything else, and as after it whenever the call finished.
func TestActivatePowerCut(t *testing.T) {
	tests := []struct {
		name              string
		disk              func(t *testing.T) *memFile
		slot              string
		doneSlot, cutSlot string // the boot after a finished call, after a cut one
		doneTrial         bool
		cutTrial          bool
	}{
		{"rollback", func(t *testing.T) *memFile { return committed(t, 1) }, SlotA, SlotA, SlotB, true, false},
		{"cancel", pushed, SlotA, SlotA, SlotB, false, true},
		{"corrupt slot marked bad", func(t *testing.T) *memFile {
			f := committed(t, 1)
			f.b[2*mib+1500] ^= 1
			return f
		}, SlotA, SlotB, SlotB, false, false},
	}
	for _, tt := range tests {
		for _, torn := range []bool{false, true} {
			for cut := 0; ; cut++ {
				f := tt.disk(t)
				f.writes, f.cutAt, f.torn = 0, cut, torn
				err := open(t, f).Activate(tt.slot, trusted(), "")
				finished := !f.dead
				f.dead, f.cutAt = false, -1
				b := boot(t, open(t, f))
				switch {
				case finished && (b.Slot != tt.doneSlot || b.Trial != tt.doneTrial):
					t.Fatalf("%s torn=%v cut=%d: finished (%v), boot %s trial=%v, want %s trial=%v",
						tt.name, torn, cut, err, b.Slot, b.Trial, tt.doneSlot, tt.doneTrial)
				case !finished && (b.Slot != tt.cutSlot || b.Trial != tt.cutTrial) && (b.Slot != tt.doneSlot || b.Trial != tt.doneTrial):
					t.Fatalf("%s torn=%v cut=%d: cut (%v), boot %s trial=%v, want %s trial=%v",
						tt.name, torn, cut, err, b.Slot, b.Trial, tt.cutSlot, tt.cutTrial)
				}
				if finished {
					break
				}
				if cut > 10 {
					t.Fatalf("%s: the activation never finished", tt.name)
				}
			}
		}
	}
}

// TestServiceActivate: the daemon-facing Activate on a file-backed disk:
// cancel the pushed trial, schedule it again, refuse an empty name.
func TestServiceActivate(t *testing.T) {
	f := pushed(t)
	path := filepath.Join(t.TempDir(), "disk.img")
	if err := os.WriteFile(path, f.b, 0o600); err != nil {
		t.Fatal(err)
	}
	s := &Service{Disk: path, Keys: trusted(), Running: SlotA}
	trialOf := func() string {
		t.Helper()
		slots, err := s.Slots()
		if err != nil {
			t.Fatal(err)
		}
		for _, sl := range slots {
			if sl.Trial {
				return sl.Slot
			}
		}
		return ""
	}
	steps := []struct {
		slot      string
		wantErr   error
		wantTrial string
	}{
		{SlotA, nil, ""},
		{SlotB, nil, SlotB},
		{"", ErrUnknownSlot, SlotB},
	}
	for _, st := range steps {
		if err := s.Activate(st.slot); !errors.Is(err, st.wantErr) || (err != nil && st.wantErr == nil) {
			t.Fatalf("Activate(%q): got %v, want %v", st.slot, err, st.wantErr)
		}
		if got := trialOf(); got != st.wantTrial {
			t.Errorf("after Activate(%q): trial %q, want %q", st.slot, got, st.wantTrial)
		}
	}
}
