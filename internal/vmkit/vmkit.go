// Package vmkit is what the QEMU tests that boot Debian's kernel with an
// initramfs of their own share (host/linux/vmtest, rdma/vmtest): the
// uncompressed kernel QEMU boots fast, a newc cpio writer, and (in the
// guest) the loading of the modules the initramfs carries.
package vmkit

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"cxlpool/image/build"
)

// Extract writes the uncompressed kernel of bzImage bz to out: an ELF
// QEMU boots via PVH, in a third of the bzImage's time under TCG. It
// needs xz.
func Extract(bz, out string) error {
	b, err := os.ReadFile(bz)
	if err != nil {
		return err
	}
	payload, err := build.BzImagePayload(b)
	if err != nil {
		return err
	}
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	defer f.Close()
	cmd := exec.Command("xz", "-dc", "--single-stream")
	cmd.Stdin, cmd.Stdout = bytes.NewReader(payload), f
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("xz -d of %s: %w", bz, err)
	}
	return f.Close()
}

// CPIO writes a newc archive. Errors stick: Close reports the first.
type CPIO struct {
	w    io.Writer
	ino  int
	dirs map[string]bool
	err  error
}

// NewCPIO writes an archive to w.
func NewCPIO(w io.Writer) *CPIO { return &CPIO{w: w, dirs: map[string]bool{}} }

// File writes a regular file (slash-separated name, no leading slash)
// after the directories above it that are not in the archive yet.
func (c *CPIO) File(name string, perm int, data []byte) {
	var parents []string
	for d := path.Dir(name); d != "." && d != "/" && !c.dirs[d]; d = path.Dir(d) {
		parents = append(parents, d)
	}
	for _, d := range slices.Backward(parents) {
		c.dirs[d] = true
		c.entry(d, 0o040755, nil)
	}
	c.entry(name, 0o100000|perm, data)
}

// Modules writes the kernel modules mods (paths under modDir, in load
// order) as /lib/modules/NAME.ko and their order, one absolute path a
// line, as /modules.order (what LoadModules reads).
func (c *CPIO) Modules(modDir string, mods []string) error {
	var order []string
	for _, m := range mods {
		data, err := os.ReadFile(filepath.Join(modDir, m))
		if err != nil {
			return err
		}
		name := "lib/modules/" + filepath.Base(m)
		c.File(name, 0o644, data)
		order = append(order, "/"+name)
	}
	c.File("modules.order", 0o644, []byte(strings.Join(order, "\n")+"\n"))
	return nil
}

// Close writes the trailer and returns the first error.
func (c *CPIO) Close() error {
	c.entry("TRAILER!!!", 0, nil)
	return c.err
}

// entry writes one newc header, name and data, each padded to 4 bytes.
func (c *CPIO) entry(name string, mode int, data []byte) {
	if c.err != nil {
		return
	}
	c.ino++
	hdr := fmt.Sprintf("070701%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X",
		c.ino, mode, 0, 0, 1, 0, len(data), 0, 0, 0, 0, len(name)+1, 0)
	buf := append([]byte(hdr), name...)
	buf = append(buf, 0)
	for len(buf)%4 != 0 {
		buf = append(buf, 0)
	}
	buf = append(buf, data...)
	for len(buf)%4 != 0 {
		buf = append(buf, 0)
	}
	_, c.err = c.w.Write(buf)
}

// SharedLibs lists the libraries ldd resolves for bin (the dynamic
// loader included): what an initramfs must carry for it to run.
func SharedLibs(bin string) ([]string, error) {
	out, err := exec.Command("ldd", bin).Output()
	if err != nil {
		return nil, fmt.Errorf("ldd %s: %w", bin, err)
	}
	var libs []string
	for line := range strings.Lines(string(out)) {
		for _, f := range strings.Fields(line) {
			if strings.HasPrefix(f, "/") {
				libs = append(libs, f)
			}
		}
	}
	return libs, nil
}

// NewestKernel is the newest Debian kernel in /boot: its bzImage and
// release ("6.1.0-57-amd64"), whose modules the guests load.
func NewestKernel() (bz, release string, err error) {
	kernels, _ := filepath.Glob("/boot/vmlinuz-*")
	if len(kernels) == 0 {
		return "", "", errors.New("no /boot/vmlinuz-*: apt-get install linux-image-amd64 (make image installs it)")
	}
	slices.Sort(kernels)
	bz = kernels[len(kernels)-1]
	return bz, strings.TrimPrefix(filepath.Base(bz), "vmlinuz-"), nil
}
