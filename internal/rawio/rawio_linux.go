package rawio

import (
	"io"
	"os"
	"runtime"
	"syscall"
	"time"
	"unsafe"
)

const supported = true

// rawRead, rawWrite and rawWritev run inside RawConn.Read or Write: they
// report false (wait until the socket is ready, then call again) only on
// EAGAIN.
func (c *Conn) rawRead(fd uintptr) bool {
	c.rd.n, c.rd.errno = call(syscall.SYS_READ, fd, unsafe.Pointer(&c.rd.p[0]), len(c.rd.p))
	if c.rd.errno != syscall.EAGAIN {
		return true
	}
	if c.poll <= 0 || c.noPoll {
		return false
	}
	if !c.rd.waited {
		// The first time this read must wait: which way (chooser).
		c.rd.waited, c.rd.way, c.rd.start = true, c.choose.next(), time.Now()
		if c.rd.way == 1 {
			return true // read polls, then comes back here to sleep
		}
	}
	return false
}

// rawTry is one raw read that never waits.
func (c *Conn) rawTry(fd uintptr) bool {
	c.rd.n, c.rd.errno = call(syscall.SYS_READ, fd, unsafe.Pointer(&c.rd.p[0]), len(c.rd.p))
	return true
}

func (c *Conn) rawWrite(fd uintptr) bool {
	c.wr.n, c.wr.errno = call(syscall.SYS_WRITE, fd, unsafe.Pointer(&c.wr.p[0]), len(c.wr.p))
	return c.wr.errno != syscall.EAGAIN
}

func (c *Conn) rawWritev(fd uintptr) bool {
	c.wr.n, c.wr.errno = call(syscall.SYS_WRITEV, fd, unsafe.Pointer(&c.iov[0]), len(c.iov))
	return c.wr.errno != syscall.EAGAIN
}

// call makes the system call trap(fd, p, n) without the runtime's entry,
// again while it is interrupted: the poller is edge-triggered, so waiting
// for it instead could miss bytes already there.
func call(trap, fd uintptr, p unsafe.Pointer, n int) (int, syscall.Errno) {
	for {
		r, _, e := syscall.RawSyscall(trap, fd, uintptr(p), uintptr(n))
		if e != syscall.EINTR {
			return int(r), e
		}
	}
}

func (c *Conn) read(p []byte) (int, error) {
	c.rd = op{p: p}
	err := c.rc.Read(c.readFn)
	if err == nil && c.rd.errno == syscall.EAGAIN {
		err = c.pollRead() // the chooser said poll
	}
	if err == nil && c.rd.waited {
		c.choose.took(c.rd.way, time.Since(c.rd.start))
	}
	n, errno := c.rd.n, c.rd.errno
	c.rd = op{}
	switch {
	case err != nil:
		return 0, err
	case errno != 0:
		return 0, os.NewSyscallError("read", errno)
	case n == 0:
		return 0, io.EOF
	}
	return n, nil
}

// pollRead asks for data with raw reads while the poll lasts, letting the
// runtime run other goroutines between tries (the peer it waits for, in
// one process: the runtime polls the network then) and sched_yield
// another thread of this CPU (the peer's, if it shares the CPU). Each try
// goes through RawConn.Read, so a deadline or a Close ends the poll.
// When nothing has come by then, it sleeps in the poller.
func (c *Conn) pollRead() error {
	end := c.rd.start.Add(c.poll) // the clock is read through the vDSO
	for time.Now().Before(end) {
		runtime.Gosched()
		syscall.RawSyscall(syscall.SYS_SCHED_YIELD, 0, 0, 0)
		if err := c.rc.Read(c.tryFn); err != nil || c.rd.errno != syscall.EAGAIN {
			return err
		}
	}
	return c.rc.Read(c.readFn)
}

func (c *Conn) write(p []byte) (int, error) {
	done := 0
	defer func() { c.wr = op{} }()
	for done < len(p) {
		c.wr = op{p: p[done:]}
		if err := c.rc.Write(c.writeFn); err != nil {
			return done, err
		}
		if c.wr.errno != 0 {
			return done, os.NewSyscallError("write", c.wr.errno)
		}
		done += c.wr.n
	}
	return done, nil
}

func (c *Conn) writev(bufs [][]byte) (int64, error) {
	iov := c.iov[:0]
	for _, b := range bufs {
		if len(b) > 0 {
			v := syscall.Iovec{Base: &b[0]}
			v.SetLen(len(b))
			iov = append(iov, v)
		}
	}
	all := iov
	defer func() {
		clear(all) // keep no caller's buffer alive
		c.iov, c.wr = all[:0], op{}
	}()
	var done int64
	for len(iov) > 0 {
		c.iov = iov
		if err := c.rc.Write(c.writevFn); err != nil {
			return done, err
		}
		if c.wr.errno != 0 {
			return done, os.NewSyscallError("writev", c.wr.errno)
		}
		n := c.wr.n
		done += int64(n)
		// Drop what went out; a partly written vector keeps its tail.
		for len(iov) > 0 && n >= int(iov[0].Len) {
			n -= int(iov[0].Len)
			iov = iov[1:]
		}
		if n > 0 {
			iov[0].Base = (*byte)(unsafe.Add(unsafe.Pointer(iov[0].Base), n))
			iov[0].SetLen(int(iov[0].Len) - n)
		}
	}
	return done, nil
}
