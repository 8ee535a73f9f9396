// Package fm is the Fabric Manager client of the memory box: it implements
// fabric.Device by speaking CCI messages inside MCTP messages to the LD Pool
// CCI of a multi-headed Dynamic Capacity Device (shared/specs/cxl-wire.md
// §1–§4).
//
// A Client owns one mctp.Endpoint. Commands go out through Do, which frames
// the CCI request, matches the response by CCI tag and opcode, maps return
// codes to errors and retries timeouts of commands that have no side
// effects. The endpoint's responder acknowledges the device's Event
// Notifications (0106h); a second goroutine, the event pump, then reads and
// clears the device's event logs (and, as a safety net, does so every
// PollInterval), turns Dynamic Capacity and link records into
// fabric.Events, and detects device resets by watching the MCTP event
// interrupt policy it armed.
package fm

import (
	"context"
	"encoding"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"cxlpool/fabric"
	"cxlpool/fabric/cci"
	"cxlpool/fabric/mctp"
	"cxlpool/fabric/serial"
)

// Defaults applied by Open to zero Config fields.
const (
	DefaultEID              mctp.EID = 0x10
	DefaultDeviceEID        mctp.EID = 8
	DefaultTimeout                   = 2 * time.Second // libcxlmi's per-command timeout
	DefaultRetries                   = 3
	DefaultResponseLimitExp uint8    = 10
	DefaultPollInterval              = 2 * time.Second
)

// eventQueueLen is the Events channel buffer. A consumer that falls this
// far behind gets an EventOverflow and resynchronises from the lists.
const eventQueueLen = 256

// Config configures a Client. Zero fields take the defaults above.
type Config struct {
	EID       mctp.EID // the FM's own EID
	DeviceEID mctp.EID // the box's EID
	MTU       int      // MCTP packet payload bytes; 0 = the endpoint default (64)
	Logger    *slog.Logger
	Clock     func() time.Time // stamps events
	// Timeout bounds one attempt of one command.
	Timeout time.Duration
	// Retries is how many extra attempts a command without side effects
	// gets after a timeout. Zero means the default; use a negative value
	// for no retries.
	Retries int
	// ResponseLimitExp is the response size the FM asks for (2^n payload
	// bytes, n = 8…10); Discover sets the smaller of it and the device's
	// maximum.
	ResponseLimitExp uint8
	// PollInterval is the period of the safety-net event and health poll.
	PollInterval time.Duration
	// Handler, if set, serves the requests of other MCTP message types
	// that arrive on the link (everything but 07h FM-API and 08h CCI):
	// the board controller's PLDM PlatformEventMessages, for one. The
	// endpoint then advertises PLDM (01h) in Get Message Type Support.
	// It runs with the responder's ctx, which ends when the client stops.
	Handler mctp.Handler
}

func (c *Config) setDefaults() error {
	if c.EID == mctp.EIDNull {
		c.EID = DefaultEID
	}
	if c.DeviceEID == mctp.EIDNull {
		c.DeviceEID = DefaultDeviceEID
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Clock == nil {
		c.Clock = time.Now
	}
	if c.Timeout <= 0 {
		c.Timeout = DefaultTimeout
	}
	switch {
	case c.Retries == 0:
		c.Retries = DefaultRetries
	case c.Retries < 0:
		c.Retries = 0
	}
	if c.ResponseLimitExp == 0 {
		c.ResponseLimitExp = DefaultResponseLimitExp
	}
	if c.ResponseLimitExp < 8 || c.ResponseLimitExp > 10 {
		return fmt.Errorf("fm: config: response limit exponent %d not in 8…10", c.ResponseLimitExp)
	}
	if c.PollInterval <= 0 {
		c.PollInterval = DefaultPollInterval
	}
	if c.EID == mctp.EIDBroadcast || c.DeviceEID == mctp.EIDBroadcast {
		return errors.New("fm: config: broadcast EID is not assignable")
	}
	return nil
}

// Client is the Fabric Manager's handle on one box. It implements
// fabric.Device.
type Client struct {
	cfg Config
	log *slog.Logger
	ep  *mctp.Endpoint

	cancel    context.CancelFunc
	runDone   chan struct{} // closed when the endpoint's read loop ends
	pumpDone  chan struct{} // closed when the event pump ends
	closeOnce sync.Once

	tag atomic.Uint32 // rolling CCI message tag

	// armed is the event interrupt mask the FM set on the device (0 until
	// Discover enables events). retrySeen records a Retry Required answer
	// to a side-effect-free command while armed: a reset symptom.
	armed     atomic.Uint32
	retrySeen atomic.Bool

	events chan fabric.Event
	wake   chan struct{} // Event Notification arrived
	// wakeMask accumulates the 0106h masks (which logs have news) until
	// the pump picks them up.
	wakeMask atomic.Uint32
	ctl      chan chan<- error // Discover asks the pump to arm and drain

	mu         sync.Mutex
	respLimit  int              // response payload limit in bytes
	maxRequest int              // device's request payload limit; 0 = unknown
	portLD     map[uint8]uint16 // head port → LD-ID, from 5500h

	pump pumpState // owned by the event pump goroutine
}

var _ fabric.Device = (*Client)(nil)

// Open starts a client on link: the MCTP endpoint and its read loop, which
// answers the device's Event Notifications, and the event pump. It does not
// talk to the device; call Discover. The client runs until Close (or until
// the link fails); ctx only carries values.
func Open(ctx context.Context, link mctp.PacketLink, cfg Config) (*Client, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	c := newClient(cfg)
	types := []mctp.MsgType{mctp.MsgTypeCXLCCI}
	if cfg.Handler != nil {
		types = append(types, mctp.MsgTypePLDM)
	}
	c.ep = mctp.NewEndpoint(link, mctp.Config{
		EID:          cfg.EID,
		MTU:          cfg.MTU,
		MaxMessage:   1 + cci.HeaderLen + 1<<10, // the largest response any device may send before the limit is set
		Logger:       cfg.Logger,
		MessageTypes: types,
	}, c.handle)
	rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	c.cancel = cancel
	go func() {
		defer close(c.runDone)
		if err := c.ep.Run(rctx); err != nil && rctx.Err() == nil {
			c.log.Warn("fm: endpoint stopped", "err", err)
		}
	}()
	go func() {
		defer close(c.pumpDone)
		c.runPump(rctx)
	}()
	return c, nil
}

// newClient returns a client with its state initialised but no endpoint
// and no goroutines.
func newClient(cfg Config) *Client {
	c := &Client{
		cfg:       cfg,
		log:       cfg.Logger,
		runDone:   make(chan struct{}),
		pumpDone:  make(chan struct{}),
		events:    make(chan fabric.Event, eventQueueLen),
		wake:      make(chan struct{}, 1),
		ctl:       make(chan chan<- error),
		respLimit: 1 << 8, // the smallest limit any device supports
		portLD:    make(map[uint8]uint16),
	}
	c.pump.init()
	return c
}

// Dial connects to a box at addr (tcp://HOST:PORT, unix:PATH, tty:/dev/X)
// with DSP0253 serial framing and opens a client on it.
func Dial(ctx context.Context, addr string, cfg Config) (*Client, error) {
	rw, err := serial.Dial(ctx, addr)
	if err != nil {
		return nil, fmt.Errorf("fm: dial %s: %w", addr, err)
	}
	lc := serial.LinkConfig{Logger: cfg.Logger}
	if cfg.MTU > 0 {
		lc.MaxCount = cfg.MTU + 4 // the transport header rides in the frame too
	}
	c, err := Open(ctx, serial.NewLink(rw, lc), cfg)
	if err != nil {
		_ = rw.Close()
		return nil, err
	}
	return c, nil
}

// Endpoint returns the client's MCTP endpoint on the device link, so other
// protocols that share the link (PLDM to the board controller) can send
// requests through it: the link carries one endpoint per side.
func (c *Client) Endpoint() *mctp.Endpoint { return c.ep }

// Close stops the client, closes the link and closes the Events channel.
func (c *Client) Close() error {
	var err error
	c.closeOnce.Do(func() {
		c.cancel()
		err = c.ep.Close()
		<-c.runDone
		<-c.pumpDone
	})
	return err
}

// handle is the endpoint's responder. The only CCI request the FM serves
// is Event Notification (0106h on type 08h): it is acknowledged with an
// empty Success response carrying the same CCI tag, which stops the
// device's resends, and it wakes the event pump. Any other well-formed CCI
// request is answered Unsupported. Requests of other message types go to
// Config.Handler when there is one and are dropped otherwise.
func (c *Client) handle(ctx context.Context, src mctp.EID, typ mctp.MsgType, msg []byte) ([]byte, bool) {
	if typ != mctp.MsgTypeCXLCCI && typ != mctp.MsgTypeFMAPI {
		if c.cfg.Handler == nil {
			return nil, false
		}
		return c.cfg.Handler(ctx, src, typ, msg)
	}
	m, err := cci.ParseMessage(msg)
	if err != nil || m.Category != cci.Request {
		return nil, false
	}
	resp := cci.Message{Category: cci.Response, Tag: m.Tag, Opcode: m.Opcode}
	if m.Opcode == cci.OpEventNotification && typ == mctp.MsgTypeCXLCCI {
		// The payload names the logs that have new records; remember
		// them so the pump reads only those (an unreadable payload
		// means "look everywhere").
		var n cci.EventInterruptPolicy
		mask := uint32(allLogs)
		if n.UnmarshalBinary(m.Payload) == nil && n.Mask != 0 {
			mask = uint32(n.Mask)
		}
		c.wakeMask.Or(mask)
		select {
		case c.wake <- struct{}{}:
		default: // a drain is already due
		}
	} else {
		c.log.Debug("fm: unsupported request from device", "src", src, "op", m.Opcode)
		resp.ReturnCode = cci.Unsupported
	}
	b, err := resp.MarshalBinary()
	if err != nil {
		return nil, false
	}
	return b, true
}

// sideEffectFree lists the opcodes Do may resend after a timeout: reading
// them twice changes nothing the FM cares about. Everything else (5602h,
// 5604h–5607h, 0101h, 0105h, 0004h, …) could have executed although its
// response was lost, so a timeout is reported instead.
func sideEffectFree(op cci.Opcode) bool {
	switch op {
	case cci.OpIdentify, cci.OpBackgroundOperationStatus, cci.OpGetResponseMessageLimit,
		cci.OpGetEventRecords, cci.OpGetMCTPEventInterruptPolicy, cci.OpGetSupportedLogs,
		cci.OpGetLog, cci.OpIdentifyMemoryDevice, cci.OpGetLDInfo, cci.OpGetLDAllocations,
		cci.OpGetMultiHeadedInfo, cci.OpGetHeadInfo, cci.OpGetDCDInfo,
		cci.OpGetHostDCRegionConfig, cci.OpGetDCRegionExtentLists, cci.OpDCListTags:
		return true
	}
	return false
}

// errMismatch marks a response that does not belong to the request.
var errMismatch = errors.New("response does not match the request")

// Do sends one CCI command and decodes its response. req may be nil for an
// empty payload and resp nil to ignore the output. A non-success return
// code comes back as an error wrapping the cci.ReturnCode and naming the
// opcode, except Background Command Started, which is returned as the bare
// cci.BackgroundCommandStarted after resp has been decoded. Transport
// failures wrap fabric.ErrTimeout or fabric.ErrClosed; only side-effect-free
// commands are retried after a timeout.
func (c *Client) Do(ctx context.Context, op cci.Opcode, req encoding.BinaryMarshaler, resp encoding.BinaryUnmarshaler) error {
	payload, err := c.encode(op, req)
	if err != nil {
		return err
	}
	attempts := 1
	if sideEffectFree(op) {
		attempts += c.cfg.Retries
	}
	var last error
	for i := range attempts {
		m, err := c.roundTrip(ctx, op, payload)
		switch {
		case err == nil:
			return c.result(op, m, resp)
		case errors.Is(err, fabric.ErrTimeout):
			last = err
			c.log.Debug("fm: command timed out", "op", op, "attempt", i+1, "err", err)
			continue
		default:
			return err
		}
	}
	return last
}

// encode marshals a request's payload and checks it against the device's
// request limit.
func (c *Client) encode(op cci.Opcode, req encoding.BinaryMarshaler) ([]byte, error) {
	var payload []byte
	if req != nil {
		var err error
		if payload, err = req.MarshalBinary(); err != nil {
			return nil, fmt.Errorf("fm: %s: encode request: %w", op, err)
		}
	}
	c.mu.Lock()
	maxReq := c.maxRequest
	c.mu.Unlock()
	if maxReq > 0 && len(payload) > maxReq {
		return nil, fmt.Errorf("fm: %s: request payload of %d bytes exceeds the device limit of %d: %w",
			op, len(payload), maxReq, cci.ErrPayloadLength)
	}
	return payload, nil
}

// roundTrip runs one attempt: it sends the request under a fresh CCI tag
// and returns the validated response message.
func (c *Client) roundTrip(ctx context.Context, op cci.Opcode, payload []byte) (cci.Message, error) {
	tag := uint8(c.tag.Add(1))
	wire, err := cci.Message{Category: cci.Request, Tag: tag, Opcode: op, Payload: payload}.MarshalBinary()
	if err != nil {
		return cci.Message{}, fmt.Errorf("fm: %s: %w", op, err)
	}
	actx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	raw, err := c.ep.Request(actx, c.cfg.DeviceEID, mctp.MsgType(op.MCTPType()), wire)
	cancel()
	return c.response(ctx, op, tag, raw, err)
}

// start sends one attempt of op without waiting: wait takes its answer
// as Do would (one attempt, so only for commands Do does not retry). It
// fails with fabric.ErrNotSent, having sent nothing, when the request
// could not go out at once.
func (c *Client) start(op cci.Opcode, req encoding.BinaryMarshaler) (wait func(context.Context, encoding.BinaryUnmarshaler) error, err error) {
	payload, err := c.encode(op, req)
	if err != nil {
		return nil, err
	}
	tag := uint8(c.tag.Add(1))
	wire, err := cci.Message{Category: cci.Request, Tag: tag, Opcode: op, Payload: payload}.MarshalBinary()
	if err != nil {
		return nil, fmt.Errorf("fm: %s: %w", op, err)
	}
	// The attempt's deadline runs from the send, as Do's does.
	deadline := time.Now().Add(c.cfg.Timeout)
	p, err := c.ep.Start(c.cfg.DeviceEID, mctp.MsgType(op.MCTPType()), wire)
	if errors.Is(err, mctp.ErrNoTag) {
		return nil, fmt.Errorf("fm: %s: %w: %w", op, fabric.ErrNotSent, err)
	}
	if err != nil {
		// Either nothing went out or the link failed writing it: as Do
		// would report it.
		_, err = c.response(context.Background(), op, tag, nil, err)
		return nil, err
	}
	return func(ctx context.Context, resp encoding.BinaryUnmarshaler) error {
		actx, cancel := context.WithDeadline(ctx, deadline)
		raw, err := p.Wait(actx)
		cancel()
		m, err := c.response(ctx, op, tag, raw, err)
		if err != nil {
			return err
		}
		return c.result(op, m, resp)
	}, nil
}

// response turns what the endpoint returned for the request tagged tag
// into the validated response message or the attempt's error.
func (c *Client) response(ctx context.Context, op cci.Opcode, tag uint8, raw []byte, err error) (cci.Message, error) {
	if err != nil {
		switch {
		case ctx.Err() != nil:
			return cci.Message{}, fmt.Errorf("fm: %s: %w", op, ctx.Err())
		case errors.Is(err, mctp.ErrClosed):
			return cci.Message{}, fmt.Errorf("fm: %s: %w: %w", op, fabric.ErrClosed, err)
		case errors.Is(err, mctp.ErrTimeout), errors.Is(err, context.DeadlineExceeded):
			return cci.Message{}, fmt.Errorf("fm: %s: %w: %w", op, fabric.ErrTimeout, err)
		case errors.Is(err, mctp.ErrMalformed):
			// An answer of the wrong MCTP message type is dropped like
			// a CCI mismatch below.
			c.log.Warn("fm: dropped response", "op", op, "err", err)
			return cci.Message{}, fmt.Errorf("fm: %s: %w: %w", op, fabric.ErrTimeout, err)
		}
		return cci.Message{}, fmt.Errorf("fm: %s: %w", op, err)
	}
	m, err := cci.ParseMessage(raw)
	switch {
	case err != nil:
		err = fmt.Errorf("%w: %w", errMismatch, err)
	case m.Category != cci.Response:
		err = fmt.Errorf("%w: category %d", errMismatch, m.Category)
	case m.Tag != tag:
		err = fmt.Errorf("%w: tag %#02x, want %#02x", errMismatch, m.Tag, tag)
	case m.Opcode != op:
		err = fmt.Errorf("%w: opcode %s", errMismatch, m.Opcode)
	}
	if err != nil {
		// The MCTP layer matched it by its 3-bit tag, so this is a stale
		// or foreign answer. It is dropped; as far as this attempt is
		// concerned the device did not answer.
		c.log.Warn("fm: dropped response", "op", op, "err", err)
		return cci.Message{}, fmt.Errorf("fm: %s: %w: %w", op, fabric.ErrTimeout, err)
	}
	return m, nil
}

// result maps m's return code and decodes its payload into resp.
func (c *Client) result(op cci.Opcode, m cci.Message, resp encoding.BinaryUnmarshaler) error {
	switch m.ReturnCode {
	case cci.Success, cci.BackgroundCommandStarted:
	case cci.RetryRequired:
		if sideEffectFree(op) && c.armed.Load() != 0 {
			c.retrySeen.Store(true)
		}
		fallthrough
	default:
		return fmt.Errorf("fm: %s: %w", op, m.ReturnCode)
	}
	if resp != nil {
		if err := resp.UnmarshalBinary(m.Payload); err != nil {
			return fmt.Errorf("fm: %s: decode response: %w", op, err)
		}
	}
	if m.ReturnCode == cci.BackgroundCommandStarted {
		return cci.BackgroundCommandStarted
	}
	return nil
}

// limit returns the current response payload limit in bytes.
func (c *Client) limit() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.respLimit
}

// perPage returns how many entries of size entry fit a response with hdr
// fixed bytes under the current limit, at least 1 and at most most.
func (c *Client) perPage(hdr, entry, most int) int {
	return min(max(1, (c.limit()-hdr)/entry), most)
}
