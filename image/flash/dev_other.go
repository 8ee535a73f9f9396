//go:build !linux

package flash

import "os"

func statDev(path string) (bool, uint32, uint32, error) {
	_, err := os.Stat(path)
	return false, 0, 0, err
}

func openTarget(path string) (*os.File, error) {
	return os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
}
