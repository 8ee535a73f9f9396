//go:build !linux

package main

import (
	"errors"
	"os"
)

// isTerminal is false off Linux: poolctl reads passwords from files,
// the environment or redirected input there.
func isTerminal(*os.File) bool { return false }

func readNoEcho(*os.File) (string, error) {
	return "", errors.New("password prompts are only supported on Linux")
}
