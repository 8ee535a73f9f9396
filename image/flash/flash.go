// Package flash writes a built disk image (image/build: disk.img with its
// signed disk.img.manifest.json and .sig) to a disk or a file. Before
// writing it checks the signature and the image's size and SHA-256, and
// refuses a target that is a partition, is mounted (itself or any of its
// partitions, per /proc/self/mountinfo), is held by another driver
// (/sys/block/X/holders: LVM, RAID, dm-crypt), backs the running system
// (the root file system or swap), or is the image itself. After writing
// it syncs and reads the bytes back.
package flash

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"cxlpool/image/manifest"
)

// ErrRefused is a target flash will not write.
var ErrRefused = errors.New("flash: refusing to write")

// DevInfo says whether path is a block device and its device number.
type DevInfo func(path string) (block bool, major, minor uint32, err error)

// Options describe one flash.
type Options struct {
	Image  string // disk.img; its manifest is Image+".manifest.json" and ".manifest.sig"
	Device string // /dev/sdX or a file
	Keys   manifest.Keys
	// ProcRoot and SysRoot locate /proc and /sys (tests use fixtures).
	ProcRoot, SysRoot string
	// Stat reports block devices (default: stat(2)).
	Stat DevInfo
	// Progress is called with bytes written so far.
	Progress func(written, total int64)
}

func (o *Options) defaults() {
	if o.ProcRoot == "" {
		o.ProcRoot = "/proc"
	}
	if o.SysRoot == "" {
		o.SysRoot = "/sys"
	}
	if o.Stat == nil {
		o.Stat = statDev
	}
}

// Verify checks the image's signed manifest and content; it returns the
// manifest.
func Verify(image string, keys manifest.Keys) (*manifest.Manifest, error) {
	mb, err := os.ReadFile(image + ".manifest.json")
	if err != nil {
		return nil, fmt.Errorf("flash: %w: %w", manifest.ErrUnsigned, err)
	}
	sig, err := os.ReadFile(image + ".manifest.sig")
	if err != nil {
		return nil, fmt.Errorf("flash: %w: %w", manifest.ErrUnsigned, err)
	}
	m, err := manifest.Verify(mb, sig, keys)
	if err != nil {
		return nil, fmt.Errorf("flash: %w", err)
	}
	p, ok := m.Part(filepath.Base(image))
	if !ok {
		return nil, fmt.Errorf("flash: manifest has no part %s: %w", filepath.Base(image), manifest.ErrFormat)
	}
	got, err := manifest.HashFile(p.Name, image)
	if err != nil {
		return nil, err
	}
	if got.Size != p.Size {
		return nil, fmt.Errorf("flash: %s is %d bytes, manifest says %d: %w", image, got.Size, p.Size, manifest.ErrTruncated)
	}
	if got.SHA256 != p.SHA256 {
		return nil, fmt.Errorf("flash: %s: sha256 %s, manifest says %s: %w", image, got.SHA256, p.SHA256, manifest.ErrCorrupt)
	}
	return m, nil
}

// CheckTarget refuses devices that must not be written.
func CheckTarget(opt Options) error {
	opt.defaults()
	if a, b := absEval(opt.Image), absEval(opt.Device); a == b {
		return fmt.Errorf("%w %s: it is the image itself", ErrRefused, opt.Device)
	}
	if _, err := os.Stat(opt.Device); errors.Is(err, os.ErrNotExist) {
		return nil // a new file
	}
	block, maj, min, err := opt.Stat(opt.Device)
	if err != nil {
		return fmt.Errorf("flash: %w", err)
	}
	if !block {
		return nil
	}
	dev := fmt.Sprintf("%d:%d", maj, min)
	sys, err := filepath.EvalSymlinks(filepath.Join(opt.SysRoot, "dev", "block", dev))
	if err != nil {
		return fmt.Errorf("flash: %s (%s) not in sysfs: %w", opt.Device, dev, err)
	}
	if _, err := os.Stat(filepath.Join(sys, "partition")); err == nil {
		return fmt.Errorf("%w %s: it is a partition; give the whole disk", ErrRefused, opt.Device)
	}
	// The disk and its partitions, by device number.
	nums := map[string]string{dev: filepath.Base(sys)}
	ents, _ := os.ReadDir(sys)
	for _, e := range ents {
		if b, err := os.ReadFile(filepath.Join(sys, e.Name(), "dev")); err == nil {
			nums[strings.TrimSpace(string(b))] = e.Name()
		}
	}
	for _, name := range nums {
		dir := sys
		if name != filepath.Base(sys) {
			dir = filepath.Join(sys, name)
		}
		if hs, _ := os.ReadDir(filepath.Join(dir, "holders")); len(hs) > 0 {
			return fmt.Errorf("%w %s: %s is held by %s (LVM, RAID or dm-crypt)", ErrRefused, opt.Device, name, hs[0].Name())
		}
	}
	mounts, err := readMountinfo(filepath.Join(opt.ProcRoot, "self", "mountinfo"))
	if err != nil {
		return fmt.Errorf("flash: %w", err)
	}
	for _, m := range mounts {
		if name, ok := nums[m.dev]; ok {
			what := "mounted on " + m.point
			if m.point == "/" {
				what = "the running system's root file system"
			}
			return fmt.Errorf("%w %s: %s is %s", ErrRefused, opt.Device, name, what)
		}
	}
	if swaps, err := os.ReadFile(filepath.Join(opt.ProcRoot, "swaps")); err == nil {
		for _, line := range strings.Split(string(swaps), "\n")[1:] {
			f := strings.Fields(line)
			if len(f) == 0 {
				continue
			}
			for _, name := range nums {
				if filepath.Base(f[0]) == name {
					return fmt.Errorf("%w %s: %s is in use as swap", ErrRefused, opt.Device, name)
				}
			}
		}
	}
	return nil
}

func absEval(p string) string {
	a, err := filepath.Abs(p)
	if err != nil {
		return p
	}
	if r, err := filepath.EvalSymlinks(a); err == nil {
		return r
	}
	return a
}

type mount struct{ dev, point string }

// readMountinfo reads "ID PARENT MAJ:MIN ROOT POINT ..." lines.
func readMountinfo(path string) ([]mount, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []mount
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) >= 5 {
			out = append(out, mount{dev: fs[2], point: fs[4]})
		}
	}
	return out, sc.Err()
}

// Flash verifies the image, checks the target and writes it, then reads
// it back. It returns the image's manifest.
func Flash(ctx context.Context, opt Options) (*manifest.Manifest, error) {
	opt.defaults()
	m, err := Verify(opt.Image, opt.Keys)
	if err != nil {
		return nil, err
	}
	if err := CheckTarget(opt); err != nil {
		return nil, err
	}
	p, _ := m.Part(filepath.Base(opt.Image))
	in, err := os.Open(opt.Image)
	if err != nil {
		return nil, fmt.Errorf("flash: %w", err)
	}
	defer in.Close()
	out, err := openTarget(opt.Device)
	if err != nil {
		return nil, fmt.Errorf("flash: %w", err)
	}
	defer out.Close()
	buf := make([]byte, 1<<20)
	var done int64
	for {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		n, rerr := io.ReadFull(in, buf)
		if n > 0 {
			if _, err := out.WriteAt(buf[:n], done); err != nil {
				return nil, fmt.Errorf("flash: write %s: %w", opt.Device, err)
			}
			done += int64(n)
			if opt.Progress != nil {
				opt.Progress(done, p.Size)
			}
		}
		if errors.Is(rerr, io.EOF) || errors.Is(rerr, io.ErrUnexpectedEOF) {
			break
		}
		if rerr != nil {
			return nil, fmt.Errorf("flash: %w", rerr)
		}
	}
	if err := out.Sync(); err != nil {
		return nil, fmt.Errorf("flash: sync %s: %w", opt.Device, err)
	}
	h := sha256.New()
	if _, err := io.Copy(h, io.NewSectionReader(out, 0, p.Size)); err != nil {
		return nil, fmt.Errorf("flash: read back %s: %w", opt.Device, err)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != p.SHA256 {
		return nil, fmt.Errorf("flash: read back %s: sha256 %s, want %s: %w", opt.Device, got, p.SHA256, manifest.ErrCorrupt)
	}
	return m, nil
}
