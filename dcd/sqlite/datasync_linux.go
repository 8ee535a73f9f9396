package sqlite

import (
	"os"

	"golang.org/x/sys/unix"
)

// dataSync flushes f's data and the metadata needed to read it back
// (fdatasync), not its timestamps.
func dataSync(f *os.File) error { return unix.Fdatasync(int(f.Fd())) }
