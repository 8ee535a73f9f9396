//go:build !linux

package rawio

import "errors"

const supported = false

var errNoRaw = errors.New("rawio: no raw path on this system")

func (c *Conn) rawRead(uintptr) bool   { return true }
func (c *Conn) rawTry(uintptr) bool    { return true }
func (c *Conn) rawWrite(uintptr) bool  { return true }
func (c *Conn) rawWritev(uintptr) bool { return true }

func (c *Conn) read(p []byte) (int, error)          { return 0, errNoRaw }
func (c *Conn) write(p []byte) (int, error)         { return 0, errNoRaw }
func (c *Conn) writev(bufs [][]byte) (int64, error) { return 0, errNoRaw }
