package update

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"cxlpool/image/disk"
	"cxlpool/image/manifest"
)

// Part names inside a bundle.
const (
	PartKernel    = "vmlinux.gz"        // the uncompressed kernel ELF (PVH bootable), gzipped
	PartInitramfs = "initramfs.cpio.gz" // the u-root initramfs (zstd-compressed by builds since 2026-12-02: the kernel reads either; the name stays for older loaders and slots)
	// PartSignedKernel is the same kernel as the PE bzImage its
	// distribution signed (Debian's Secure Boot signature, or a vendor's):
	// what kexec_file_load(2) takes where kernel lockdown (UEFI Secure
	// Boot) refuses kexec_load(2) of the ELF. Bundles before 2026-12-02
	// lack it; loaders before then ignore it.
	PartSignedKernel = "vmlinuz.efi"
)

// Errors beyond those of image/manifest (which Apply passes through:
// ErrUnsigned, ErrBadSig, ErrCorrupt, ErrTruncated, ErrRollback, ...).
var (
	ErrTrialPending = errors.New("update: the running slot is on trial; it must be committed (healthy) before another update")
	ErrNoBootable   = errors.New("update: no slot holds a verified image")
)

// File is what Disk needs from the disk: a regular file in tests, the
// block device (/dev/vda) on the box.
type File interface {
	io.ReaderAt
	io.WriterAt
	Sync() error
	Close() error
}

// Disk is an open box disk.
type Disk struct {
	f     File
	parts []disk.Partition
	boot  section
	slots map[string]disk.Partition
}

// section is a bounded window of the disk.
type section struct {
	f    File
	off  int64
	size int64
}

func (s section) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 || off >= s.size {
		return 0, io.EOF
	}
	if rem := s.size - off; int64(len(p)) > rem {
		n, err := s.f.ReadAt(p[:rem], s.off+off)
		if err == nil {
			err = io.EOF
		}
		return n, err
	}
	return s.f.ReadAt(p, s.off+off)
}

func (s section) WriteAt(p []byte, off int64) (int, error) {
	if off < 0 || off+int64(len(p)) > s.size {
		return 0, fmt.Errorf("update: write of %d bytes at %d: %w", len(p), off, manifest.ErrTooLarge)
	}
	return s.f.WriteAt(p, s.off+off)
}

// Open opens the disk (a file or a block device) read-write.
func Open(path string) (*Disk, error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("update: %w", err)
	}
	size, err := f.Seek(0, io.SeekEnd)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("update: %w", err)
	}
	d, err := New(f, size)
	if err != nil {
		f.Close()
		return nil, err
	}
	return d, nil
}

// New uses an already open disk of size bytes.
func New(f File, size int64) (*Disk, error) {
	parts, err := disk.ReadTable(f, size)
	if err != nil {
		return nil, fmt.Errorf("update: %w", err)
	}
	d := &Disk{f: f, parts: parts, slots: map[string]disk.Partition{}}
	bp, err := disk.Find(parts, disk.BootName)
	if err != nil {
		return nil, fmt.Errorf("update: %w", err)
	}
	d.boot = section{f: f, off: bp.Offset, size: bp.Size}
	for name, pn := range map[string]string{SlotA: disk.SlotAName, SlotB: disk.SlotBName} {
		p, err := disk.Find(parts, pn)
		if err != nil {
			return nil, fmt.Errorf("update: %w", err)
		}
		d.slots[name] = p
	}
	return d, nil
}

// Close closes the disk.
func (d *Disk) Close() error { return d.f.Close() }

// Partitions returns the disk's partition table.
func (d *Disk) Partitions() []disk.Partition { return d.parts }

// State returns the current boot control record.
func (d *Disk) State() (State, error) { return ReadState(d.boot) }

// SetState writes st as the next record (Seq is assigned).
func (d *Disk) SetState(st State) (State, error) { return WriteState(d.boot, d.f, st) }

// SlotSize is the capacity of each slot in bytes.
func (d *Disk) SlotSize() int64 { return d.slots[SlotA].Size }

// countWriter writes sequentially into a slot and hashes what it wrote.
type countWriter struct {
	dst      io.WriterAt
	n        int64
	h        hashWriter
	progress func(int64)
}

type hashWriter interface {
	io.Writer
	Sum([]byte) []byte
}

func (w *countWriter) Write(p []byte) (int, error) {
	n, err := w.dst.WriteAt(p, w.n)
	w.h.Write(p[:n])
	w.n += int64(n)
	if w.progress != nil {
		w.progress(w.n)
	}
	return n, err
}

// switchWriter sends writes to a buffer until the real destination is set.
type switchWriter struct {
	buf bytes.Buffer
	dst io.Writer
}

func (s *switchWriter) Write(p []byte) (int, error) {
	if s.dst == nil {
		return s.buf.Write(p)
	}
	return s.dst.Write(p)
}

// ApplyOptions tunes Apply.
type ApplyOptions struct {
	// Running is the slot the box booted from (cxlpool.slot=); the other
	// slot is written. Empty means the active slot.
	Running string
	// Progress is called with the number of bytes written so far.
	Progress func(written int64)
}

// Apply installs the bundle read from r into the inactive slot and makes
// it the pending trial. On any error the running slot and the active
// state are untouched; the target slot is left "empty".
func (d *Disk) Apply(ctx context.Context, r io.Reader, keys manifest.Keys, opt ApplyOptions) (*manifest.Manifest, error) {
	st, err := d.State()
	if err != nil {
		return nil, err
	}
	running := opt.Running
	if running == "" {
		running = st.Active
	}
	if running != st.Active {
		return nil, ErrTrialPending
	}
	target := Other(running)
	m, info, err := d.writeSlot(ctx, st, target, r, keys, opt.Progress)
	if err != nil {
		return nil, err
	}
	cur, err := d.State()
	if err != nil {
		return nil, err
	}
	*cur.Slot(target) = info
	cur.Trial, cur.TrialBooted = target, false
	if _, err := d.SetState(cur); err != nil {
		return nil, err
	}
	return m, nil
}

// Install writes a bundle into slot and makes it the active slot with no
// trial: the factory's (and mkimage's) first install. A disk without a
// boot control record gets one.
func (d *Disk) Install(ctx context.Context, slot string, r io.Reader, keys manifest.Keys) (*manifest.Manifest, error) {
	st, err := d.State()
	if errors.Is(err, ErrNoBootControl) {
		st, err = State{Active: slot, A: SlotInfo{State: StateEmpty}, B: SlotInfo{State: StateEmpty}}, nil
	}
	if err != nil {
		return nil, err
	}
	m, info, err := d.writeSlot(ctx, st, slot, r, keys, nil)
	if err != nil {
		return nil, err
	}
	cur, err := d.State()
	if err != nil {
		return nil, err
	}
	*cur.Slot(slot) = info
	cur.Active, cur.Trial, cur.TrialBooted = slot, "", false
	cur.MinSecurityVersion = max(cur.MinSecurityVersion, m.SecurityVersion)
	if _, err := d.SetState(cur); err != nil {
		return nil, err
	}
	return m, nil
}

// writeSlot streams a bundle into target after its signature verified,
// marking the slot "writing" first, and verifies the written bytes. On
// error the slot is marked "empty" (if it was touched).
func (d *Disk) writeSlot(ctx context.Context, st State, target string, r io.Reader, keys manifest.Keys, progress func(int64)) (*manifest.Manifest, SlotInfo, error) {
	tp := d.slots[target]
	dst := section{f: d.f, off: tp.Offset, size: tp.Size}
	sw := &switchWriter{}
	cw := &countWriter{dst: dst, h: sha256.New(), progress: progress}
	var began bool
	ctxr := readerFunc(func(p []byte) (int, error) {
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		return r.Read(p)
	})
	fail := func(err error) (*manifest.Manifest, SlotInfo, error) {
		if began {
			if cur, rerr := d.State(); rerr == nil {
				*cur.Slot(target) = SlotInfo{State: StateEmpty}
				if cur.Trial == target {
					cur.Trial, cur.TrialBooted = "", false
				}
				_, _ = d.SetState(cur)
			}
		}
		return nil, SlotInfo{}, err
	}
	m, err := manifest.ReadBundle(io.TeeReader(ctxr, sw), keys, manifest.VerifyOptions{
		MinSecurityVersion: st.MinSecurityVersion,
		OnManifest: func(m *manifest.Manifest) error {
			var need int64 = 3 * 512 * 2 // headers of manifest and signature, end blocks
			for _, p := range m.Parts {
				need += 512 + (p.Size+511)/512*512
			}
			if need+int64(sw.buf.Len()) > tp.Size {
				return fmt.Errorf("image needs %d bytes, slot %s holds %d: %w", need, target, tp.Size, manifest.ErrTooLarge)
			}
			// The signature verified: from here on the target slot is
			// written. Mark it first so a power cut never leaves a
			// half-written slot that claims to be ready.
			cur, err := d.State()
			if errors.Is(err, ErrNoBootControl) {
				cur, err = st, nil
			}
			if err != nil {
				return err
			}
			*cur.Slot(target) = SlotInfo{State: StateWriting, Version: m.Version, SecurityVersion: m.SecurityVersion}
			if cur.Trial == target {
				cur.Trial, cur.TrialBooted = "", false
			}
			if _, err := d.SetState(cur); err != nil {
				return err
			}
			began = true
			if _, err := cw.Write(sw.buf.Bytes()); err != nil {
				return err
			}
			sw.dst = cw
			return nil
		},
	})
	if err != nil {
		return fail(fmt.Errorf("update: %w", err))
	}
	if err := d.f.Sync(); err != nil {
		return fail(fmt.Errorf("update: sync slot %s: %w", target, err))
	}
	info := SlotInfo{State: StateReady, Version: m.Version, SecurityVersion: m.SecurityVersion,
		Size: cw.n, SHA256: hex.EncodeToString(cw.h.Sum(nil))}
	// Read back what landed on the disk: a write that silently failed
	// must not become a trial.
	if _, err := d.verifySlot(target, info.Size, info.SHA256, keys); err != nil {
		return fail(fmt.Errorf("update: read-back of slot %s: %w", target, err))
	}
	return m, info, nil
}

type readerFunc func([]byte) (int, error)

func (f readerFunc) Read(p []byte) (int, error) { return f(p) }

// verifySlot checks the raw bytes of a slot against size and sum, then
// reads the bundle in it with the trusted keys. onPart receives parts.
func (d *Disk) verifySlot(slot string, size int64, sum string, keys manifest.Keys, onPart ...func(manifest.Part, io.Reader) error) (*manifest.Manifest, error) {
	p := d.slots[slot]
	if size <= 0 || size > p.Size {
		return nil, fmt.Errorf("slot %s records %d bytes: %w", slot, size, manifest.ErrCorrupt)
	}
	// The raw hash and the bundle's own checks read the slot side by side
	// (the loader stage runs this under emulation, where hashing
	// dominates its time). The raw hash is judged first, so bit rot
	// anywhere, even in the signed manifest, reads as corruption; parts
	// onPart extracted from a slot that fails are not to be used.
	type rawHash struct {
		n   int64
		sum string
		err error
	}
	raw := make(chan rawHash, 1)
	go func() {
		n, got, err := manifest.HashReader(io.NewSectionReader(d.f, p.Offset, size))
		raw <- rawHash{n, got, err}
	}()
	opt := manifest.VerifyOptions{}
	if len(onPart) > 0 {
		opt.OnPart = onPart[0]
	}
	m, err := manifest.ReadBundle(io.NewSectionReader(d.f, p.Offset, size), keys, opt)
	r := <-raw
	if r.err != nil {
		return nil, fmt.Errorf("slot %s: %w", slot, r.err)
	}
	if r.n != size || r.sum != sum {
		return nil, fmt.Errorf("slot %s: sha256 %s, recorded %s: %w", slot, r.sum, sum, manifest.ErrCorrupt)
	}
	return m, err
}

// MarkGood commits the running slot if it is the trial: it becomes the
// active slot and the minimum security version rises to its own. It
// reports whether anything changed. The guest's init calls it once the
// daemon answers healthy.
func (d *Disk) MarkGood(running string) (bool, error) {
	st, err := d.State()
	if err != nil {
		return false, err
	}
	if st.Trial != running || running == "" {
		return false, nil
	}
	st.Active, st.Trial, st.TrialBooted = running, "", false
	st.MinSecurityVersion = max(st.MinSecurityVersion, st.Slot(running).SecurityVersion)
	if _, err := d.SetState(st); err != nil {
		return false, err
	}
	return true, nil
}

// Boot is SelectBoot's decision.
type Boot struct {
	Slot     string
	Trial    bool
	Manifest *manifest.Manifest
	// Kernel and Initramfs are the extracted files (in the directory
	// given to SelectBoot).
	Kernel, Initramfs string
	// SignedKernel is the extracted PartSignedKernel, empty when the
	// bundle has none.
	SignedKernel string
	// Notes say what happened on the way (a failed trial, a bad slot).
	Notes []string
}

// SelectBoot is the boot loader's decision: it advances the trial state,
// verifies the chosen slot's signature and hashes, extracts its kernel
// (decompressed, PVH-bootable vmlinux) and initramfs into dir, and falls
// back to the other slot when a slot does not verify.
func (d *Disk) SelectBoot(keys manifest.Keys, dir string) (Boot, error) {
	st, err := d.State()
	if err != nil {
		return Boot{}, err
	}
	var notes []string
	var order []string
	trial := false
	switch {
	case st.Trial != "" && !st.TrialBooted:
		st.TrialBooted = true
		trial = true
		order = []string{st.Trial, st.Active}
	case st.Trial != "":
		notes = append(notes, fmt.Sprintf("trial of slot %s was not committed: back to slot %s", st.Trial, st.Active))
		*st.Slot(st.Trial) = SlotInfo{State: StateBad, Version: st.Slot(st.Trial).Version, Error: "trial boot did not report healthy"}
		st.Trial, st.TrialBooted = "", false
		order = []string{st.Active, Other(st.Active)}
	default:
		order = []string{st.Active, Other(st.Active)}
	}
	if st, err = d.SetState(st); err != nil {
		return Boot{}, err
	}
	for i, slot := range order {
		info := st.Slot(slot)
		if info.State != StateReady {
			continue
		}
		b, err := d.extract(slot, *info, keys, dir)
		if err == nil {
			b.Trial = trial && i == 0
			if !b.Trial && slot != st.Active {
				notes = append(notes, fmt.Sprintf("slot %s does not verify: slot %s becomes active", st.Active, slot))
				st.Active = slot
				if _, err := d.SetState(st); err != nil {
					return Boot{}, err
				}
			}
			b.Notes = notes
			return b, nil
		}
		notes = append(notes, fmt.Sprintf("slot %s: %v", slot, err))
		*info = SlotInfo{State: StateBad, Version: info.Version, Error: err.Error()}
		if st.Trial == slot {
			st.Trial, st.TrialBooted = "", false
		}
		if st, err = d.SetState(st); err != nil {
			return Boot{}, err
		}
		if i == 0 {
			trial = false
		}
	}
	return Boot{Notes: notes}, fmt.Errorf("%w: %v", ErrNoBootable, notes)
}

// extract verifies slot and writes its kernel and initramfs into dir.
func (d *Disk) extract(slot string, info SlotInfo, keys manifest.Keys, dir string) (Boot, error) {
	b := Boot{Slot: slot, Kernel: filepath.Join(dir, "vmlinux"), Initramfs: filepath.Join(dir, PartInitramfs)}
	m, err := d.verifySlot(slot, info.Size, info.SHA256, keys, func(p manifest.Part, r io.Reader) error {
		switch p.Name {
		case PartKernel:
			zr, err := gzip.NewReader(r)
			if err != nil {
				return fmt.Errorf("kernel: %w", err)
			}
			return writeFile(b.Kernel, zr)
		case PartInitramfs:
			return writeFile(b.Initramfs, r)
		case PartSignedKernel:
			b.SignedKernel = filepath.Join(dir, PartSignedKernel)
			return writeFile(b.SignedKernel, r)
		}
		return nil
	})
	if err != nil {
		return Boot{}, err
	}
	b.Manifest = m
	return b, nil
}

func writeFile(path string, r io.Reader) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, r); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
