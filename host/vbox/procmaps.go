package vbox

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"

	"golang.org/x/sys/unix"

	"cxlpool/fabric/cci"
)

// A program in another process maps the memory file through the printed
// /proc/PID/fd/N path, outside Map: the backend finds those mappings the
// way lsof does, in every /proc/PID/maps it may read, by the file's device
// and inode and the mapped file range, so that a tag another process maps
// counts as in use (the kernel's EBUSY for a DAX device still mapped).
// Not counted: this process's own mappings outside Map (Map is how this
// process uses a tag), the box's (the process at the other end of the
// socket maps the whole file: it is the device's DRAM, not a user), and
// those of processes whose maps it may not read (another user's, without
// CAP_SYS_PTRACE). The simulator's limit: on one machine every host's
// programs map the same file, so a shared tag mapped by a program of any
// host of the share counts as in use on each of them (conservative: a
// release waits rather than taking memory from a program).

// fileID is a file's device and inode.
type fileID struct {
	major, minor uint32
	ino          uint64
}

func fileIDOf(f *os.File) (fileID, error) {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return fileID{}, fmt.Errorf("vbox: stat memory file: %w", err)
	}
	return fileID{major: unix.Major(st.Dev), minor: unix.Minor(st.Dev), ino: st.Ino}, nil
}

// fileRange is a mapped range of the memory file.
type fileRange struct{ off, end uint64 }

// peerPID is the process at the other end of a Unix socket.
func peerPID(c *net.UnixConn) (int, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return 0, fmt.Errorf("vbox: %w", err)
	}
	var cred *unix.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return 0, fmt.Errorf("vbox: %w", err)
	}
	if cerr != nil {
		return 0, fmt.Errorf("vbox: the box's process (SO_PEERCRED): %w", cerr)
	}
	return int(cred.Pid), nil
}

// otherMappings returns the ranges of file id that processes other than
// those in skip map.
func otherMappings(id fileID, skip ...int) []fileRange {
	paths, _ := filepath.Glob("/proc/[0-9]*/maps")
	// Most processes do not map the file: a search for its inode skips
	// their maps without parsing them (a busy machine has hundreds of
	// processes, and a report lists the tags often).
	ino := []byte(" " + strconv.FormatUint(id.ino, 10))
	var out []fileRange
	for _, p := range paths {
		pid, err := strconv.Atoi(filepath.Base(filepath.Dir(p)))
		if err != nil || slices.Contains(skip, pid) {
			continue
		}
		b, err := os.ReadFile(p)
		if err != nil || !bytes.Contains(b, ino) {
			continue // gone, not ours to read, or not mapping the file
		}
		out = append(out, parseMaps(b, id)...)
	}
	return out
}

// parseMaps picks the mappings of file id from one /proc/PID/maps:
// "start-end perms offset major:minor inode path", numbers in hex but
// the inode.
func parseMaps(b []byte, id fileID) []fileRange {
	var out []fileRange
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for sc.Scan() {
		f := bytes.Fields(sc.Bytes())
		if len(f) < 5 {
			continue
		}
		ino, err := strconv.ParseUint(string(f[4]), 10, 64)
		if err != nil || ino != id.ino {
			continue
		}
		maj, mnr, ok := bytes.Cut(f[3], []byte(":"))
		if !ok {
			continue
		}
		ma, err1 := strconv.ParseUint(string(maj), 16, 32)
		mi, err2 := strconv.ParseUint(string(mnr), 16, 32)
		if err1 != nil || err2 != nil || uint32(ma) != id.major || uint32(mi) != id.minor {
			continue
		}
		lo, hi, ok := bytes.Cut(f[0], []byte("-"))
		if !ok {
			continue
		}
		start, err1 := strconv.ParseUint(string(lo), 16, 64)
		end, err2 := strconv.ParseUint(string(hi), 16, 64)
		off, err3 := strconv.ParseUint(string(f[2]), 16, 64)
		if err1 != nil || err2 != nil || err3 != nil || end <= start {
			continue
		}
		out = append(out, fileRange{off: off, end: off + (end - start)})
	}
	return out
}

// overlaps reports whether any range touches any extent (DPA = offset
// in the memory file).
func overlaps(rs []fileRange, es []cci.Extent) bool {
	for _, r := range rs {
		for _, e := range es {
			if r.off < e.DPA+e.Length && e.DPA < r.end {
				return true
			}
		}
	}
	return false
}
