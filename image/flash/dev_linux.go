//go:build linux

package flash

import (
	"os"

	"golang.org/x/sys/unix"
)

func statDev(path string) (bool, uint32, uint32, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return false, 0, 0, &os.PathError{Op: "stat", Path: path, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFBLK {
		return false, 0, 0, nil
	}
	return true, unix.Major(st.Rdev), unix.Minor(st.Rdev), nil
}

// openTarget opens a block device exclusively (the kernel refuses
// O_EXCL while anything has it mounted or claimed: a second guard) or
// creates/truncates a file.
func openTarget(path string) (*os.File, error) {
	if block, _, _, err := statDev(path); err == nil && block {
		return os.OpenFile(path, os.O_RDWR|unix.O_EXCL, 0)
	}
	return os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
}
