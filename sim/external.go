package sim

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"cxlpool/fabric/cci"
	"cxlpool/fabric/mctp"
	"cxlpool/fabric/serial"
)

// External hosts.
//
// A head can be handed to a process outside the box: SetExternal turns the
// head's built-in policy off and ServeHost serves the head's host mailbox
// on a Unix stream connection. The connection starts with one hello
// message (HostHello, the memory file's descriptor attached with
// SCM_RIGHTS) and then carries the same DSP0253/MCTP/CCI bytes as the FM
// link: the external host sends the host CCI commands (Identify, Get/Clear
// Event Records, 4800h–4803h) to the box's EID as MCTP type 08h requests,
// and the box sends it an Event Notification (0106h, mask bit 04h = DC
// log) at ExternalHostEID whenever the head's DC event log gains records;
// its reply is not needed for anything but is expected.
//
// The box does not police the external host's memory accesses: it hands
// over the whole memory file, as a host's HDM decoders would cover the
// whole DC region, and trusts the host to touch only what it accepted (the
// agent's backend maps exactly the accepted extents). The CHMU does not see
// those accesses.

// ExternalHostEID is the MCTP EID the box addresses an external host by.
const ExternalHostEID mctp.EID = 0x10

// HostHelloMagic opens the hello message of an external host connection.
const HostHelloMagic = "CXLHOST1"

// HostHelloLen is the size of the hello message.
const HostHelloLen = 32

// HostHello is the first message on an external host connection, sent by
// the box with the memory file's descriptor attached. Layout (little
// endian): 00h magic "CXLHOST1", 08h LD-ID u16, 0Ah box EID u8, 0Bh host
// EID u8, 0Ch reserved u32, 10h memory size u64, 18h device serial u64.
type HostHello struct {
	LD      uint16
	BoxEID  mctp.EID
	HostEID mctp.EID
	Size    uint64 // bytes of the memory file
	Serial  uint64 // what the host reads as the PCIe Device Serial Number
}

// MarshalBinary encodes the hello.
func (h HostHello) MarshalBinary() ([]byte, error) {
	b := make([]byte, HostHelloLen)
	copy(b, HostHelloMagic)
	binary.LittleEndian.PutUint16(b[0x08:], h.LD)
	b[0x0a], b[0x0b] = byte(h.BoxEID), byte(h.HostEID)
	binary.LittleEndian.PutUint64(b[0x10:], h.Size)
	binary.LittleEndian.PutUint64(b[0x18:], h.Serial)
	return b, nil
}

// UnmarshalBinary decodes the hello.
func (h *HostHello) UnmarshalBinary(b []byte) error {
	if len(b) != HostHelloLen || string(b[:8]) != HostHelloMagic {
		return errors.New("sim: not an external host hello (want magic CXLHOST1, 32 bytes)")
	}
	*h = HostHello{
		LD:      binary.LittleEndian.Uint16(b[0x08:]),
		BoxEID:  mctp.EID(b[0x0a]),
		HostEID: mctp.EID(b[0x0b]),
		Size:    binary.LittleEndian.Uint64(b[0x10:]),
		Serial:  binary.LittleEndian.Uint64(b[0x18:]),
	}
	return nil
}

// ErrHostBusy: an external host is already connected to the head.
var ErrHostBusy = errors.New("sim: the head already has an external host connected")

// extHost is the state of a head handed to an external host.
type extHost struct {
	mu   sync.Mutex
	busy bool           // a host is connected (or being greeted)
	ep   *mctp.Endpoint // the connected host's endpoint, once it runs
	tag  uint8          // CCI tag of the last Event Notification
}

// SetExternal hands head ld to an external host: its built-in policy stops
// answering events, which wait in the head's DC log until a host connects
// through ServeHost; a synthetic workload on it stops. It cannot be
// undone.
func (b *Box) SetExternal(ld int) error {
	h := b.Host(ld)
	if h == nil {
		return fmt.Errorf("sim: no head %d (heads: %d)", ld, len(b.hosts))
	}
	h.ext.CompareAndSwap(nil, &extHost{})
	b.StopWorkload(ld) // the box no longer writes the head's memory
	return nil
}

// External reports whether head ld is handed to an external host.
func (b *Box) External(ld int) bool {
	h := b.Host(ld)
	return h != nil && h.ext.Load() != nil
}

// ServeHostListener accepts external host connections for head ld until
// ctx ends; one at a time is served, later ones while it lasts are closed
// without a hello (ErrHostBusy is logged). Whoever may connect gets the
// memory file: the socket's permissions are the access control.
func (b *Box) ServeHostListener(ctx context.Context, ld int, l *net.UnixListener) error {
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(ctx, func() { _ = l.Close() })
	stopBox := context.AfterFunc(b.ctx, cancel)
	var wg sync.WaitGroup
	defer func() {
		stop()
		stopBox()
		cancel()
		wg.Wait()
	}()
	for {
		c, err := l.AcceptUnix()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("sim: head %d: accept: %w", ld, err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := b.ServeHost(ctx, ld, c); err != nil {
				b.log.Warn("external host connection ended", "ld", ld, "err", err)
			}
		}()
	}
}

// ServeHost serves head ld's host mailbox to an external host on c until
// ctx ends or the host hangs up. The head must have been handed over with
// SetExternal. c is closed on return.
func (b *Box) ServeHost(ctx context.Context, ld int, c *net.UnixConn) error {
	defer c.Close()
	h := b.Host(ld)
	if h == nil || h.ext.Load() == nil {
		return fmt.Errorf("sim: head %d is not handed to an external host (SetExternal)", ld)
	}
	x := h.ext.Load()
	// Claim the head before the hello: a second host must not get the
	// memory file.
	x.mu.Lock()
	if x.busy {
		x.mu.Unlock()
		return fmt.Errorf("sim: head %d: %w", ld, ErrHostBusy)
	}
	x.busy = true
	x.mu.Unlock()
	defer func() {
		x.mu.Lock()
		x.busy, x.ep = false, nil
		x.mu.Unlock()
	}()
	hello, _ := HostHello{LD: uint16(ld), BoxEID: b.cfg.EID, HostEID: ExternalHostEID,
		Size: b.mem.Size(), Serial: b.cfg.Serial}.MarshalBinary()
	rights := unix.UnixRights(int(b.mem.Fd()))
	if _, _, err := c.WriteMsgUnix(hello, rights, nil); err != nil {
		return fmt.Errorf("sim: head %d: hello: %w", ld, err)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(b.ctx, cancel)
	defer stop()
	link := serial.NewLink(c, serial.LinkConfig{Logger: b.log})
	defer link.Close()
	closeLink := context.AfterFunc(ctx, func() { _ = link.Close() })
	defer closeLink()
	ep := mctp.NewEndpoint(link, mctp.Config{
		EID: b.cfg.EID, MTU: b.cfg.MTU, MaxMessage: maxMessage, Logger: b.log,
		MessageTypes: []mctp.MsgType{mctp.MsgTypeCXLCCI},
	}, func(_ context.Context, _ mctp.EID, typ mctp.MsgType, msg []byte) ([]byte, bool) {
		if typ != mctp.MsgTypeCXLCCI || len(msg) < cci.HeaderLen {
			return nil, false
		}
		if m, _ := cci.ParseMessage(msg); m.Category != cci.Request {
			return nil, false // the reply to our Event Notification went to Request
		}
		return b.hostExec(ld, msg), true
	})
	x.mu.Lock()
	x.ep = ep
	x.mu.Unlock()
	b.log.Info("external host connected", "ld", ld)
	h.wake() // events may be waiting since SetExternal
	err := ep.Run(ctx)
	b.log.Info("external host disconnected", "ld", ld)
	if ctx.Err() != nil || err == nil || errors.Is(err, mctp.ErrClosed) || errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) {
		return nil
	}
	return fmt.Errorf("sim: head %d: %w", ld, err)
}

// extNotifyTimeout bounds how long the box waits for an external host to
// acknowledge an Event Notification before it goes back to waiting for
// events; the records stay in the log either way.
const extNotifyTimeout = time.Second

// notifyExternal tells the connected external host, if any, that its DC
// event log has records.
func (h *Host) notifyExternal(ctx context.Context, x *extHost) {
	x.mu.Lock()
	ep := x.ep
	x.tag++
	tag := x.tag
	x.mu.Unlock()
	if ep == nil || !h.box.linkUp(h.ld) {
		return
	}
	payload, _ := (&cci.EventInterruptPolicy{Mask: 1 << cci.EventLogDC}).MarshalBinary()
	raw, _ := cci.Message{Category: cci.Request, Tag: tag, Opcode: cci.OpEventNotification, Payload: payload}.MarshalBinary()
	tctx, cancel := context.WithTimeout(ctx, extNotifyTimeout)
	defer cancel()
	if _, err := ep.Request(tctx, ExternalHostEID, mctp.MsgTypeCXLCCI, raw); err != nil && ctx.Err() == nil {
		h.box.log.Debug("external host did not acknowledge event notification", "ld", h.ld, "err", err)
	}
}

// ExternalHosts names heads handed to external hosts: LD → "unix:PATH".
// As a flag.Value it reads comma-separated LD=unix:PATH items.
type ExternalHosts map[int]string

func (e ExternalHosts) String() string {
	lds := make([]int, 0, len(e))
	for ld := range e {
		lds = append(lds, ld)
	}
	slices.Sort(lds)
	parts := make([]string, len(lds))
	for i, ld := range lds {
		parts[i] = strconv.Itoa(ld) + "=" + e[ld]
	}
	return strings.Join(parts, ",")
}

// Set adds LD=unix:PATH items.
func (e ExternalHosts) Set(v string) error {
	for _, item := range strings.Split(v, ",") {
		if item = strings.TrimSpace(item); item == "" {
			continue
		}
		k, addr, ok := strings.Cut(item, "=")
		ld, err := strconv.Atoi(k)
		if !ok || err != nil || ld < 0 || !strings.HasPrefix(addr, "unix:") || len(addr) == len("unix:") {
			return fmt.Errorf("external host %q: want LD=unix:PATH", item)
		}
		e[ld] = addr
	}
	return nil
}

// ServeExternalHosts hands every head of e to an external host and serves
// its socket (a stale socket file is replaced) until ctx ends or the box
// closes. It returns once all of them listen; wait blocks until they have
// stopped. On error nothing is left listening, but the heads already
// handed over stay external.
func (b *Box) ServeExternalHosts(ctx context.Context, e ExternalHosts) (wait func(), err error) {
	var ls []*net.UnixListener
	lds := make([]int, 0, len(e))
	for ld := range e {
		lds = append(lds, ld)
	}
	slices.Sort(lds)
	fail := func(err error) (func(), error) {
		for _, l := range ls {
			_ = l.Close()
		}
		return nil, err
	}
	for _, ld := range lds {
		if err := b.SetExternal(ld); err != nil {
			return fail(err)
		}
		l, err := serial.Listen(e[ld])
		if err != nil {
			return fail(fmt.Errorf("sim: head %d: %w", ld, err))
		}
		ul, ok := l.(*net.UnixListener)
		if !ok {
			_ = l.Close()
			return fail(fmt.Errorf("sim: head %d: %s is not a Unix socket", ld, e[ld]))
		}
		ls = append(ls, ul)
		// Whoever connects gets the whole memory file: only our user.
		if err := os.Chmod(ul.Addr().String(), 0o600); err != nil {
			return fail(fmt.Errorf("sim: head %d: %w", ld, err))
		}
	}
	var wg sync.WaitGroup
	for i, l := range ls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := b.ServeHostListener(ctx, lds[i], l); err != nil {
				b.log.Error("external host listener", "ld", lds[i], "err", err)
			}
		}()
	}
	return wg.Wait, nil
}
