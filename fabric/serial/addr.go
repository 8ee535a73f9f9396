package serial

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
)

// DefaultBaud is the line rate of a tty: address without a baud parameter.
const DefaultBaud = 115200

// ErrAddress reports a device address Dial or Listen cannot use.
var ErrAddress = errors.New("serial: bad device address")

// Dial opens the byte stream named by addr:
//
//	tcp://HOST:PORT            TCP connection
//	unix:PATH (or unix://PATH) Unix stream socket
//	tty:/dev/ttyX[?baud=N]     serial line in raw 8N1 mode, default 115200 baud
//	virtio:/dev/vportNpM       character device used as is, without line
//	                           settings: a virtio-serial port such as
//	                           /dev/virtio-ports/cxlpool.mctp (termios
//	                           ioctls fail on those)
//
// Wrap the result with NewLink to exchange packets.
func Dial(ctx context.Context, addr string) (io.ReadWriteCloser, error) {
	scheme, rest, err := splitAddr(addr)
	if err != nil {
		return nil, err
	}
	var d net.Dialer
	switch scheme {
	case "tcp", "unix":
		c, err := d.DialContext(ctx, scheme, rest)
		if err != nil {
			return nil, fmt.Errorf("serial: dial %s: %w", addr, err)
		}
		return c, nil
	case "tty":
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("serial: dial %s: %w", addr, err)
		}
		path, baud, err := parseTTY(rest)
		if err != nil {
			return nil, fmt.Errorf("serial: dial %s: %w", addr, err)
		}
		f, err := openTTY(path, baud)
		if err != nil {
			return nil, fmt.Errorf("serial: dial %s: %w", addr, err)
		}
		return f, nil
	case "virtio":
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("serial: dial %s: %w", addr, err)
		}
		f, err := openChar(rest)
		if err != nil {
			return nil, fmt.Errorf("serial: dial %s: %w", addr, err)
		}
		return f, nil
	}
	return nil, fmt.Errorf("serial: dial %q: scheme %q: %w", addr, scheme, ErrAddress)
}

// Listen listens on tcp://HOST:PORT or unix:PATH. For a Unix socket a
// stale socket file (one nobody accepts on) is removed first, so a daemon
// restarts cleanly after a crash; a live socket or a non-socket file at
// PATH is an error. Liveness is probed by connecting, so a live listener
// sees one connection that closes without sending anything.
func Listen(addr string) (net.Listener, error) {
	scheme, rest, err := splitAddr(addr)
	if err != nil {
		return nil, err
	}
	switch scheme {
	case "tcp":
	case "unix":
		if err := removeStaleSocket(rest); err != nil {
			return nil, fmt.Errorf("serial: listen %s: %w", addr, err)
		}
	default:
		return nil, fmt.Errorf("serial: listen %q: scheme %q: %w", addr, scheme, ErrAddress)
	}
	ln, err := net.Listen(scheme, rest)
	if err != nil {
		return nil, fmt.Errorf("serial: listen %s: %w", addr, err)
	}
	return ln, nil
}

// splitAddr returns the scheme and the scheme-specific rest of addr.
func splitAddr(addr string) (scheme, rest string, err error) {
	scheme, rest, ok := strings.Cut(addr, ":")
	if !ok {
		return "", "", fmt.Errorf("serial: address %q has no scheme: %w", addr, ErrAddress)
	}
	switch scheme {
	case "tcp":
		rest, ok = strings.CutPrefix(rest, "//")
		if !ok {
			return "", "", fmt.Errorf("serial: address %q: want tcp://HOST:PORT: %w", addr, ErrAddress)
		}
		if _, _, err := net.SplitHostPort(rest); err != nil {
			return "", "", fmt.Errorf("serial: address %q: %w: %w", addr, ErrAddress, err)
		}
	case "unix", "tty", "virtio":
		// Accept both unix:/p and unix:///p.
		if r, ok := strings.CutPrefix(rest, "//"); ok {
			rest = r
		}
	}
	if rest == "" {
		return "", "", fmt.Errorf("serial: address %q: empty path: %w", addr, ErrAddress)
	}
	return scheme, rest, nil
}

// parseTTY splits "/dev/ttyX?baud=N".
func parseTTY(s string) (path string, baud int, err error) {
	path, query, _ := strings.Cut(s, "?")
	if path == "" {
		return "", 0, fmt.Errorf("empty tty path: %w", ErrAddress)
	}
	baud = DefaultBaud
	q, err := url.ParseQuery(query)
	if err != nil {
		return "", 0, fmt.Errorf("tty options: %w: %w", ErrAddress, err)
	}
	for k := range q {
		if k != "baud" {
			return "", 0, fmt.Errorf("tty option %q: %w", k, ErrAddress)
		}
	}
	if v := q.Get("baud"); v != "" {
		baud, err = strconv.Atoi(v)
		if err != nil || baud <= 0 {
			return "", 0, fmt.Errorf("baud %q: %w", v, ErrAddress)
		}
	}
	return path, baud, nil
}

// removeStaleSocket deletes path if it is a Unix socket nobody listens on.
func removeStaleSocket(path string) error {
	fi, err := os.Lstat(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if fi.Mode()&os.ModeSocket == 0 {
		return fmt.Errorf("%s exists and is not a socket", path)
	}
	if c, err := net.Dial("unix", path); err == nil {
		c.Close()
		return fmt.Errorf("%s: socket in use", path)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}
