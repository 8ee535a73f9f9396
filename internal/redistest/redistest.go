// Package redistest runs Debian's redis-server as a benchmark's baseline:
// Start launches a private instance on a free loopback port (no
// persistence, its files in a temporary directory) and stops it when the
// benchmark ends; Conn is a minimal RESP2 client of SET and GET, one
// command at a time or pipelined, reading values into the caller's
// buffers so that the client's allocations do not weigh on the figure.
package redistest

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// ErrNoRedis: redis-server is not installed (apt-get install redis-server).
var ErrNoRedis = errors.New("redistest: redis-server not installed (apt-get install redis-server)")

// Start runs a redis-server for tb and returns its address, or
// ErrNoRedis (the caller skips its Redis comparison, saying so).
func Start(tb testing.TB) (string, error) {
	path, err := exec.LookPath("redis-server")
	if err != nil {
		return "", ErrNoRedis
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	dir := tb.TempDir()
	cmd := exec.Command(path, "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "",
		"--appendonly", "no", "--dir", dir, "--logfile", filepath.Join(dir, "redis.log"), "--protected-mode", "no",
		"--proto-max-bulk-len", "512mb", "--client-query-buffer-limit", "1gb")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		return "", fmt.Errorf("redistest: %w", err)
	}
	tb.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	// The server is starting: nothing to wait on but its port, so poll
	// it, bounded.
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := Dial(addr)
		if err == nil {
			err = c.Set([]byte("ping"), []byte("pong"))
			c.Close()
			if err == nil {
				return addr, nil
			}
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("redistest: redis-server on %s did not answer: %w", addr, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Conn is one connection to the server.
type Conn struct {
	nc  net.Conn
	br  *bufio.Reader
	bw  *bufio.Writer
	hdr []byte
}

// Dial connects to addr.
func Dial(addr string) (*Conn, error) {
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("redistest: %w", err)
	}
	return &Conn{nc: nc, br: bufio.NewReaderSize(nc, 64<<10), bw: bufio.NewWriterSize(nc, 64<<10)}, nil
}

// Close closes the connection.
func (c *Conn) Close() error { return c.nc.Close() }

// send buffers one command (flushed by the caller); large arguments go
// straight to the socket once the buffer is flushed (bufio's big-write
// path), so values are not copied.
func (c *Conn) send(args ...[]byte) error {
	c.hdr = fmt.Appendf(c.hdr[:0], "*%d\r\n", len(args))
	for _, a := range args {
		c.hdr = fmt.Appendf(c.hdr, "$%d\r\n", len(a))
		if _, err := c.bw.Write(c.hdr); err != nil {
			return err
		}
		if _, err := c.bw.Write(a); err != nil {
			return err
		}
		c.hdr = append(c.hdr[:0], '\r', '\n')
	}
	_, err := c.bw.Write(c.hdr)
	return err
}

func (c *Conn) readOK() error {
	line, err := c.br.ReadSlice('\n')
	if err != nil {
		return err
	}
	if string(line) != "+OK\r\n" {
		return fmt.Errorf("redistest: SET answered %q", line)
	}
	return nil
}

// readBulk reads a bulk string into dst; its length must be len(dst).
func (c *Conn) readBulk(dst []byte) error {
	line, err := c.br.ReadSlice('\n')
	if err != nil {
		return err
	}
	if len(line) < 4 || line[0] != '$' {
		return fmt.Errorf("redistest: GET answered %q", line)
	}
	n, err := strconv.Atoi(string(line[1 : len(line)-2]))
	if err != nil || n != len(dst) {
		return fmt.Errorf("redistest: GET answered %d bytes for %d", n, len(dst))
	}
	if _, err := io.ReadFull(c.br, dst); err != nil {
		return err
	}
	_, err = c.br.Discard(2)
	return err
}

// Set is one SET.
func (c *Conn) Set(key, v []byte) error {
	return c.SetMany([][]byte{key}, [][]byte{v})
}

// Get is one GET into dst (the value must be len(dst) bytes).
func (c *Conn) Get(key, dst []byte) error {
	return c.GetMany([][]byte{key}, [][]byte{dst})
}

// SetMany pipelines a SET of each key: all sent, then all answers read
// (Redis's best case for a batch).
func (c *Conn) SetMany(keys, vals [][]byte) error {
	for i := range keys {
		if err := c.send([]byte("SET"), keys[i], vals[i]); err != nil {
			return err
		}
	}
	if err := c.bw.Flush(); err != nil {
		return err
	}
	for range keys {
		if err := c.readOK(); err != nil {
			return err
		}
	}
	return nil
}

// GetMany pipelines a GET of each key into dsts.
func (c *Conn) GetMany(keys, dsts [][]byte) error {
	for _, k := range keys {
		if err := c.send([]byte("GET"), k); err != nil {
			return err
		}
	}
	if err := c.bw.Flush(); err != nil {
		return err
	}
	for _, d := range dsts {
		if err := c.readBulk(d); err != nil {
			return err
		}
	}
	return nil
}
