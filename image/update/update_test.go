package update

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/ed25519"
	"errors"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"cxlpool/image/disk"
	"cxlpool/image/manifest"
)

const mib = 1 << 20

var testKey = ed25519.NewKeyFromSeed(bytes.Repeat([]byte{3}, ed25519.SeedSize))

func trusted() manifest.Keys {
	k := manifest.Keys{}
	k.Add(testKey.Public().(ed25519.PublicKey))
	return k
}

// bundle returns a signed bundle whose kernel says version.
func bundle(t *testing.T, version string, sv uint64, priv ed25519.PrivateKey, kernelSize int) []byte {
	t.Helper()
	return bundleWith(t, version, sv, priv, kernelSize, nil)
}

// bundleWith is bundle with a PartSignedKernel of the given bytes, when
// not nil.
func bundleWith(t *testing.T, version string, sv uint64, priv ed25519.PrivateKey, kernelSize int, signed []byte) []byte {
	t.Helper()
	dir := t.TempDir()
	var kz bytes.Buffer
	zw := gzip.NewWriter(&kz)
	zw.Write([]byte("kernel " + version))
	rnd := make([]byte, kernelSize)
	rand.NewChaCha8([32]byte{}).Read(rnd) // incompressible, so sizes are real
	zw.Write(rnd)
	zw.Close()
	files := []manifest.BundlePart{{Name: PartKernel, Path: filepath.Join(dir, "k")}, {Name: PartInitramfs, Path: filepath.Join(dir, "i")}}
	os.WriteFile(files[0].Path, kz.Bytes(), 0o644)
	os.WriteFile(files[1].Path, []byte("initramfs "+version), 0o644)
	if signed != nil {
		files = append(files, manifest.BundlePart{Name: PartSignedKernel, Path: filepath.Join(dir, "s")})
		os.WriteFile(files[2].Path, signed, 0o644)
	}
	m := &manifest.Manifest{Product: "cxlpool", Version: version, SecurityVersion: sv, Created: time.Unix(1700000000, 0)}
	for _, f := range files {
		p, err := manifest.HashFile(f.Name, f.Path)
		if err != nil {
			t.Fatal(err)
		}
		m.Parts = append(m.Parts, p)
	}
	mb, sig, err := manifest.Sign(m, priv)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := manifest.WriteBundle(&buf, mb, sig, m, files); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// memFile is a disk in memory; cut, when set, is called before each write
// and may shorten it or fail it (a power cut).
type memFile struct {
	b      []byte
	writes int
	cutAt  int  // the write index that loses power (-1: never)
	torn   bool // the cut write lands half
	dead   bool
}

func (m *memFile) ReadAt(p []byte, off int64) (int, error) {
	if off >= int64(len(m.b)) {
		return 0, io.EOF
	}
	n := copy(p, m.b[off:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

var errPowerCut = errors.New("power cut")

func (m *memFile) WriteAt(p []byte, off int64) (int, error) {
	if m.dead {
		return 0, errPowerCut
	}
	if m.writes == m.cutAt {
		m.dead = true
		if m.torn {
			copy(m.b[off:], p[:len(p)/2])
		}
		return 0, errPowerCut
	}
	m.writes++
	return copy(m.b[off:], p), nil
}

func (m *memFile) Sync() error {
	if m.dead {
		return errPowerCut
	}
	return nil
}
func (m *memFile) Close() error { return nil }

// newDisk makes a partitioned disk with v1 installed in slot a.
func newDisk(t *testing.T) *memFile {
	t.Helper()
	l := disk.Layout{SlotSize: 2 * mib, DataSize: 1 * mib, BootSize: 1 * mib, Seed: 1}
	parts, size, err := l.Partitions()
	if err != nil {
		t.Fatal(err)
	}
	f := &memFile{b: make([]byte, size), cutAt: -1}
	if err := disk.WriteTable(f, size, parts, 1); err != nil {
		t.Fatal(err)
	}
	d, err := New(f, size)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.Install(context.Background(), SlotA, bytes.NewReader(bundle(t, "1.0", 1, testKey, 1000)), trusted()); err != nil {
		t.Fatal(err)
	}
	return f
}

func open(t *testing.T, f *memFile) *Disk {
	t.Helper()
	d, err := New(f, int64(len(f.b)))
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func boot(t *testing.T, d *Disk) Boot {
	t.Helper()
	b, err := d.SelectBoot(trusted(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	k, err := os.ReadFile(b.Kernel)
	if err != nil {
		t.Fatal(err)
	}
	if want := "kernel " + b.Manifest.Version; !bytes.HasPrefix(k, []byte(want)) {
		t.Fatalf("extracted kernel starts %q, want %q", k[:min(len(k), 20)], want)
	}
	return b
}

func TestUpdateCommit(t *testing.T) {
	d := open(t, newDisk(t))
	if b := boot(t, d); b.Slot != SlotA || b.Trial {
		t.Fatalf("first boot: slot %s trial %v, want a, false", b.Slot, b.Trial)
	}
	var progress int64
	m, err := d.Apply(context.Background(), bytes.NewReader(bundle(t, "2.0", 2, testKey, 5000)), trusted(),
		ApplyOptions{Running: SlotA, Progress: func(n int64) { progress = n }})
	if err != nil {
		t.Fatal(err)
	}
	if m.Version != "2.0" || progress == 0 {
		t.Fatalf("got version %s progress %d, want 2.0 and some progress", m.Version, progress)
	}
	st, _ := d.State()
	if st.Trial != SlotB || st.Active != SlotA || st.B.State != StateReady {
		t.Fatalf("after apply: %+v, want trial b, active a, b ready", st)
	}
	b := boot(t, d)
	if b.Slot != SlotB || !b.Trial || b.Manifest.Version != "2.0" {
		t.Fatalf("trial boot: %+v, want slot b version 2.0 on trial", b)
	}
	if _, err := d.Apply(context.Background(), bytes.NewReader(bundle(t, "3.0", 3, testKey, 10)), trusted(), ApplyOptions{Running: SlotB}); !errors.Is(err, ErrTrialPending) {
		t.Fatalf("update during trial: got %v, want ErrTrialPending", err)
	}
	if ok, err := d.MarkGood(SlotB); !ok || err != nil {
		t.Fatalf("MarkGood: %v %v, want true", ok, err)
	}
	if ok, _ := d.MarkGood(SlotB); ok {
		t.Fatal("second MarkGood changed state, want no-op")
	}
	st, _ = d.State()
	want := State{Seq: st.Seq, Active: SlotB, MinSecurityVersion: 2, A: st.A, B: st.B}
	if diff := cmp.Diff(want, st); diff != "" {
		t.Errorf("committed state (-want +got):\n%s", diff)
	}
	if b := boot(t, d); b.Slot != SlotB || b.Trial {
		t.Fatalf("boot after commit: slot %s trial %v, want b, false", b.Slot, b.Trial)
	}
	// Rollback protection: v1 (security version 1) is now refused.
	if _, err := d.Apply(context.Background(), bytes.NewReader(bundle(t, "1.0", 1, testKey, 10)), trusted(), ApplyOptions{Running: SlotB}); !errors.Is(err, manifest.ErrRollback) {
		t.Fatalf("old image: got %v, want ErrRollback", err)
	}
}

// TestSignedKernelExtracted: a bundle's signed PE kernel (what the loader
// hands kexec_file_load under Secure Boot) is extracted beside the ELF;
// a bundle without one (older builds) leaves SignedKernel empty.
func TestSignedKernelExtracted(t *testing.T) {
	d := open(t, newDisk(t))
	if b := boot(t, d); b.SignedKernel != "" {
		t.Errorf("bundle without %s: SignedKernel %q, want empty", PartSignedKernel, b.SignedKernel)
	}
	want := []byte("MZ signed kernel 2.0")
	if _, err := d.Install(context.Background(), SlotA, bytes.NewReader(bundleWith(t, "2.0", 2, testKey, 1000, want)), trusted()); err != nil {
		t.Fatal(err)
	}
	b := boot(t, d)
	if b.SignedKernel == "" {
		t.Fatalf("bundle with %s: SignedKernel empty", PartSignedKernel)
	}
	got, err := os.ReadFile(b.SignedKernel)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("signed kernel: got %q, want %q", got, want)
	}
}

func TestTrialRevert(t *testing.T) {
	d := open(t, newDisk(t))
	if _, err := d.Apply(context.Background(), bytes.NewReader(bundle(t, "2.0", 2, testKey, 10)), trusted(), ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
	if b := boot(t, d); b.Slot != SlotB || !b.Trial {
		t.Fatalf("got slot %s trial %v, want b on trial", b.Slot, b.Trial)
	}
	// The trial never reported healthy: the next boot returns to a.
	b := boot(t, d)
	if b.Slot != SlotA || b.Trial || len(b.Notes) == 0 {
		t.Fatalf("got %+v, want slot a with a note", b)
	}
	st, _ := d.State()
	if st.B.State != StateBad || st.Trial != "" || st.MinSecurityVersion != 1 {
		t.Fatalf("got %+v, want b bad, no trial, min security version 1", st)
	}
}

func TestRefused(t *testing.T) {
	_, foreign, _ := ed25519.GenerateKey(nil)
	good := bundle(t, "2.0", 2, testKey, 3000)
	corrupt := bytes.Clone(good)
	corrupt[bytes.Index(corrupt, []byte("initramfs 2.0"))+3] ^= 0x55
	tests := []struct {
		name string
		b    []byte
		want error
	}{
		{"foreign key", bundle(t, "2.0", 2, foreign, 10), manifest.ErrBadSig},
		{"corrupt", corrupt, manifest.ErrCorrupt},
		{"truncated", good[:len(good)-2500], manifest.ErrTruncated},
		{"older", bundle(t, "0.9", 0, testKey, 10), manifest.ErrRollback},
		{"too large", bundle(t, "2.0", 2, testKey, 4*mib), manifest.ErrTooLarge},
		{"empty", nil, manifest.ErrTruncated},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newDisk(t)
			d := open(t, f)
			before, _ := d.State()
			slotA := bytes.Clone(f.b[2*mib : 4*mib])
			_, err := d.Apply(context.Background(), bytes.NewReader(tt.b), trusted(), ApplyOptions{Running: SlotA})
			if !errors.Is(err, tt.want) {
				t.Fatalf("got %v, want %v", err, tt.want)
			}
			after, _ := d.State()
			if after.Active != SlotA || after.Trial != "" || after.A != before.A || after.B.State == StateReady {
				t.Errorf("state after refusal: %+v, want a active and untouched, no trial", after)
			}
			if !bytes.Equal(slotA, f.b[2*mib:4*mib]) {
				t.Error("the running slot's bytes changed")
			}
			if b := boot(t, d); b.Slot != SlotA {
				t.Errorf("boot after refusal: slot %s, want a", b.Slot)
			}
		})
	}
}

func TestCorruptActiveFallsBack(t *testing.T) {
	f := newDisk(t)
	d := open(t, f)
	d.Apply(context.Background(), bytes.NewReader(bundle(t, "2.0", 2, testKey, 10)), trusted(), ApplyOptions{})
	boot(t, d)
	d.MarkGood(SlotB)
	// Flip a bit inside slot b's bundle: the loader must boot a.
	f.b[4*mib+1500] ^= 1
	b := boot(t, d)
	if b.Slot != SlotA || b.Manifest.Version != "1.0" {
		t.Fatalf("got slot %s version %s, want a 1.0", b.Slot, b.Manifest.Version)
	}
	st, _ := d.State()
	if st.Active != SlotA || st.B.State != StateBad {
		t.Fatalf("got %+v, want a active, b bad", st)
	}
	f.b[2*mib+1500] ^= 1
	if _, err := d.SelectBoot(trusted(), t.TempDir()); !errors.Is(err, ErrNoBootable) {
		t.Fatalf("both slots bad: got %v, want ErrNoBootable", err)
	}
}

// TestPowerCut cuts the power at every write of an update, clean and torn,
// and boots after each: the box always comes up on a verified image, the
// new one only once the update's last record landed.
func TestPowerCut(t *testing.T) {
	img := bundle(t, "2.0", 2, testKey, 20000)
	for _, torn := range []bool{false, true} {
		for cut := 0; ; cut++ {
			f := newDisk(t)
			f.writes, f.cutAt, f.torn = 0, cut, torn
			d := open(t, f)
			_, err := d.Apply(context.Background(), bytes.NewReader(img), trusted(), ApplyOptions{Progress: func(int64) {}})
			finished := err == nil
			// Power back on.
			f.dead, f.cutAt = false, -1
			d = open(t, f)
			b := boot(t, d)
			switch {
			case finished && (b.Slot != SlotB || !b.Trial):
				t.Fatalf("torn=%v cut=%d: update finished but boot is %s trial=%v", torn, cut, b.Slot, b.Trial)
			case !finished && b.Slot != SlotA && !(b.Slot == SlotB && b.Trial):
				t.Fatalf("torn=%v cut=%d: got slot %s, want a (or the verified trial)", torn, cut, b.Slot)
			}
			if b.Slot == SlotB {
				d.MarkGood(SlotB)
			}
			if finished {
				t.Logf("torn=%v: %d cut points, all came back on a good image", torn, cut)
				break
			}
			if cut > 1000 {
				t.Fatal("update never finished")
			}
		}
	}
}

func TestBootControlCopies(t *testing.T) {
	f := newDisk(t)
	d := open(t, f)
	st, _ := d.State()
	for i := 0; i < 3; i++ {
		if st, _ = d.SetState(st); st.Seq == 0 {
			t.Fatal("no sequence")
		}
	}
	// Destroy the newest copy: the older one is read.
	boot := 1 * mib
	off := boot
	if st.Seq%2 == 0 { // seq 1 went to copy 0, so even sequences sit in copy 2
		off += ctlCopy2
	}
	f.b[off+20] ^= 0xff
	got, err := d.State()
	if err != nil || got.Seq != st.Seq-1 {
		t.Fatalf("got seq %d err %v, want %d", got.Seq, err, st.Seq-1)
	}
	// Both destroyed.
	other := boot + ctlCopy2
	if off != boot {
		other = boot
	}
	f.b[other+20] ^= 0xff
	if _, err := d.State(); !errors.Is(err, ErrNoBootControl) {
		t.Fatalf("got %v, want ErrNoBootControl", err)
	}
}

func FuzzReadState(f *testing.F) {
	var seed bytes.Buffer
	b := make([]byte, ctlCopy2+ctlBlock)
	part := &memFile{b: b, cutAt: -1}
	WriteState(part, nil, State{Active: SlotA})
	seed.Write(b[:64])
	f.Add(seed.Bytes())
	f.Fuzz(func(t *testing.T, in []byte) {
		buf := make([]byte, ctlCopy2+ctlBlock)
		copy(buf, in)
		copy(buf[ctlCopy2:], in)
		st, err := ReadState(&memFile{b: buf, cutAt: -1})
		if err == nil && st.Active != SlotA && st.Active != SlotB {
			t.Fatalf("accepted active slot %q", st.Active)
		}
	})
}
