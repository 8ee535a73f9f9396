//go:build linux

package main

import (
	"bufio"
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// isTerminal reports whether f is a terminal.
func isTerminal(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// readNoEcho reads one line from the terminal f with echo turned off,
// restoring the terminal's settings afterwards.
func readNoEcho(f *os.File) (string, error) {
	fd := int(f.Fd())
	old, err := unix.IoctlGetTermios(fd, unix.TCGETS)
	if err != nil {
		return "", err
	}
	quiet := *old
	quiet.Lflag &^= unix.ECHO
	quiet.Lflag |= unix.ICANON | unix.ISIG
	if err := unix.IoctlSetTermios(fd, unix.TCSETS, &quiet); err != nil {
		return "", err
	}
	// Restoring is best effort: there is nothing more to do if it fails.
	defer func() { _ = unix.IoctlSetTermios(fd, unix.TCSETS, old) }()
	// Unbuffered beyond the line: the terminal delivers one line per read
	// in canonical mode.
	line, err := bufio.NewReaderSize(f, 1024).ReadString('\n')
	if err != nil && line == "" {
		return "", err
	}
	return strings.TrimRight(line, "\r\n"), nil
}
