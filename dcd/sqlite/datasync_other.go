//go:build !linux

package sqlite

import "os"

// dataSync flushes f; without fdatasync that is a full fsync.
func dataSync(f *os.File) error { return f.Sync() }
