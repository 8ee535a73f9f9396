// Package wire is the codec of the KV index protocol (PROTOCOL.md): the
// frame header, and every request and response body. It does no I/O
// beyond reading and writing whole frames, holds no state and never
// allocates more than the frame's declared length, bounded by the caller's
// maximum body size.
package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"
	"unicode/utf8"
)

// Version is the protocol version this package speaks.
const Version = 1

// HeaderSize is the frame header's size including the length field.
const HeaderSize = 12

// Defaults of the limits (PROTOCOL.md, Limits).
const (
	DefaultMaxBody  = 1 << 20
	DefaultMaxBatch = 4096
	MaxKey          = 1024
	TokenSize       = 32
	LocSize         = 48
	ChunkSize       = 32
	// respBit marks a response's op.
	respBit = 0x80
)

// Op is an operation code.
type Op uint8

// The ops.
const (
	OpHello  Op = 0x01
	OpPut    Op = 0x02
	OpCommit Op = 0x03
	OpAbort  Op = 0x04
	OpGet    Op = 0x05
	OpExists Op = 0x06
	OpDelete Op = 0x07
	OpUnpin  Op = 0x08
	OpCheck  Op = 0x09
	OpRenew  Op = 0x0A
	OpChunks Op = 0x0B
	OpStat   Op = 0x0C
)

// FlagPin on a GET pins every block found.
const FlagPin uint16 = 1

// FlagMeta on a PUT: every item carries its block's place in a token
// sequence after its length (PutItem.HasParent, Parent, Tokens: 13 bytes).
// AppendRequest sets it when any item has them, so a PUT without them is
// byte for byte the PUT of clients that predate it.
const FlagMeta uint16 = 1

// metaParent is bit 0 of a PUT item's meta byte: Parent is set.
const metaParent = 1

// PutMetaSize is the bytes FlagMeta adds to each PUT item.
const PutMetaSize = 1 + 8 + 4

var opNames = map[Op]string{OpHello: "HELLO", OpPut: "PUT", OpCommit: "COMMIT", OpAbort: "ABORT", OpGet: "GET",
	OpExists: "EXISTS", OpDelete: "DELETE", OpUnpin: "UNPIN", OpCheck: "CHECK", OpRenew: "RENEW", OpChunks: "CHUNKS", OpStat: "STAT"}

// Valid reports whether o is a known op.
func (o Op) Valid() bool { _, ok := opNames[o]; return ok }

func (o Op) String() string {
	if n, ok := opNames[o]; ok {
		return n
	}
	return fmt.Sprintf("op(%#02x)", uint8(o))
}

// Status is a response's or an item's status.
type Status uint16

// The statuses (PROTOCOL.md, Status codes).
const (
	OK          Status = 0
	NotFound    Status = 1
	Denied      Status = 2
	Invalid     Status = 3
	NoSpace     Status = 4
	Exists      Status = 5
	Stale       Status = 6
	Expired     Status = 7
	Busy        Status = 8
	TooLarge    Status = 9
	BadFrame    Status = 10
	Unavailable Status = 11
	Internal    Status = 12
)

var statusNames = [...]string{"OK", "NOT_FOUND", "DENIED", "INVALID", "NO_SPACE", "EXISTS", "STALE", "EXPIRED",
	"BUSY", "TOO_LARGE", "BAD_FRAME", "UNAVAILABLE", "INTERNAL"}

func (s Status) String() string {
	if int(s) < len(statusNames) {
		return statusNames[s]
	}
	return fmt.Sprintf("status(%d)", uint16(s))
}

// Codec errors.
var (
	// ErrFrame: the frame header breaks the framing rules (length out of
	// range, version, unknown op); the connection cannot continue.
	ErrFrame = errors.New("wire: bad frame")
	// ErrTooLarge: the frame's body is over the maximum.
	ErrTooLarge = errors.New("wire: frame too large")
	// ErrBody: a body does not decode as its op says.
	ErrBody = errors.New("wire: malformed body")
)

// Header is a frame's header.
type Header struct {
	Op    Op // with the response bit for responses
	Flags uint16
	ID    uint32
	Len   uint32 // body length
}

// Response reports whether the header is a response's.
func (h Header) Response() bool { return h.Op&respBit != 0 }

// ReadFrame reads one frame into buf (grown as needed) and returns its
// header and body (aliasing buf). It refuses a body over maxBody before
// reading it.
func ReadFrame(r io.Reader, buf []byte, maxBody int) (Header, []byte, []byte, error) {
	var hb [HeaderSize]byte
	if _, err := io.ReadFull(r, hb[:]); err != nil {
		return Header{}, nil, buf, err
	}
	h, err := ParseHeader(hb[:], maxBody)
	if err != nil {
		return h, nil, buf, err
	}
	if cap(buf) < int(h.Len) {
		buf = make([]byte, h.Len)
	}
	body := buf[:h.Len]
	if _, err := io.ReadFull(r, body); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return h, nil, buf, err
	}
	return h, body, buf, nil
}

// ParseHeader decodes the 12 header bytes.
func ParseHeader(b []byte, maxBody int) (Header, error) {
	if len(b) < HeaderSize {
		return Header{}, fmt.Errorf("%w: header of %d bytes", ErrFrame, len(b))
	}
	n := binary.LittleEndian.Uint32(b[0:])
	h := Header{Op: Op(b[5]), Flags: binary.LittleEndian.Uint16(b[6:]), ID: binary.LittleEndian.Uint32(b[8:])}
	if n < HeaderSize-4 {
		return h, fmt.Errorf("%w: length %d under the header's 8 bytes", ErrFrame, n)
	}
	h.Len = n - (HeaderSize - 4)
	if b[4] != Version {
		return h, fmt.Errorf("%w: version %d, this side speaks %d", ErrFrame, b[4], Version)
	}
	if !(h.Op &^ respBit).Valid() {
		return h, fmt.Errorf("%w: unknown %s", ErrFrame, h.Op&^respBit)
	}
	if int64(h.Len) > int64(maxBody) {
		return h, fmt.Errorf("%w: body of %d bytes over the limit %d", ErrTooLarge, h.Len, maxBody)
	}
	return h, nil
}

// AppendHeader appends a header for a body of n bytes.
func AppendHeader(b []byte, op Op, flags uint16, id uint32, n int) []byte {
	b = binary.LittleEndian.AppendUint32(b, uint32(n+HeaderSize-4))
	b = append(b, Version, byte(op))
	b = binary.LittleEndian.AppendUint16(b, flags)
	return binary.LittleEndian.AppendUint32(b, id)
}

// Loc is a block's location.
type Loc struct {
	Block  uint64
	Gen    uint64
	Tag    [16]byte
	Offset uint64
	Length uint64
}

// Chunk is one chunk of a namespace.
type Chunk struct {
	ID   uint64
	Tag  [16]byte
	Size uint64
}

// PutItem is one key to reserve space for, with, optionally, the block's
// place in the token sequence it caches (what a KV-aware router's events
// carry): the hash of the block it continues and how many tokens it
// holds.
type PutItem struct {
	Key       []byte
	Length    uint64
	HasParent bool   // Parent is set (false: the first block of a sequence, or not told)
	Parent    uint64 // the 64-bit block hash of the previous block (sent only with HasParent)
	Tokens    uint32 // tokens the block holds (0: not told)
}

// HasMeta reports whether p carries a parent or a token count.
func (p PutItem) HasMeta() bool { return p.HasParent || p.Tokens != 0 }

// BlockGen is one CHECK item.
type BlockGen struct{ Block, Gen uint64 }

// Item is one result of a batch: its status and, for PUT and GET when
// OK, the location.
type Item struct {
	Status Status
	Loc    Loc
}

// Stat is STAT's answer.
type Stat struct {
	Blocks, Used, Reserved, Capacity, Quota, Evictions uint64
}

// Request is any request; the fields its Op uses are set.
type Request struct {
	Op    Op
	Flags uint16
	ID    uint32

	// HELLO
	Namespace string
	Host      uint16
	Token     [TokenSize]byte
	LeaseMS   uint32

	Puts   []PutItem  // PUT
	Keys   [][]byte   // GET, EXISTS, DELETE
	Blocks []uint64   // COMMIT, ABORT, UNPIN
	Checks []BlockGen // CHECK
}

// Response is any response; the fields its Op uses are set.
type Response struct {
	Op      Op // the request's op (without the response bit)
	ID      uint32
	Status  Status
	Message string // when Status is not OK

	// HELLO
	Session  uint64
	LeaseMS  uint32 // HELLO, RENEW
	MaxBody  uint32
	MaxBatch uint16
	MaxKey   uint16
	Chunks   []Chunk // HELLO, CHUNKS

	Items []Item // batches
	Stat  Stat   // STAT
}

// Count returns how many items a batch request carries.
func (r *Request) Count() int {
	switch r.Op {
	case OpPut:
		return len(r.Puts)
	case OpGet, OpExists, OpDelete:
		return len(r.Keys)
	case OpCommit, OpAbort, OpUnpin:
		return len(r.Blocks)
	case OpCheck:
		return len(r.Checks)
	}
	return 0
}

// AppendRequest appends r as one frame.
func AppendRequest(b []byte, r *Request) ([]byte, error) {
	start := len(b)
	flags := r.Flags
	if r.Op == OpPut && slices.ContainsFunc(r.Puts, PutItem.HasMeta) {
		flags |= FlagMeta
	}
	b = AppendHeader(b, r.Op, flags, r.ID, 0)
	body := len(b)
	switch r.Op {
	case OpHello:
		if len(r.Namespace) > 255 {
			return b[:start], fmt.Errorf("%w: namespace of %d bytes over 255", ErrBody, len(r.Namespace))
		}
		b = append(b, byte(len(r.Namespace)))
		b = append(b, r.Namespace...)
		b = binary.LittleEndian.AppendUint16(b, r.Host)
		b = append(b, r.Token[:]...)
		b = binary.LittleEndian.AppendUint32(b, r.LeaseMS)
	case OpPut:
		if len(r.Puts) > 0xffff {
			return b[:start], fmt.Errorf("%w: %d items", ErrBody, len(r.Puts))
		}
		b = binary.LittleEndian.AppendUint16(b, uint16(len(r.Puts)))
		for _, p := range r.Puts {
			var err error
			if b, err = appendBytes16(b, p.Key); err != nil {
				return b[:start], err
			}
			b = binary.LittleEndian.AppendUint64(b, p.Length)
			if flags&FlagMeta != 0 {
				var m byte
				var parent uint64
				if p.HasParent {
					m, parent = metaParent, p.Parent
				}
				b = append(b, m)
				b = binary.LittleEndian.AppendUint64(b, parent)
				b = binary.LittleEndian.AppendUint32(b, p.Tokens)
			}
		}
	case OpGet, OpExists, OpDelete:
		if len(r.Keys) > 0xffff {
			return b[:start], fmt.Errorf("%w: %d items", ErrBody, len(r.Keys))
		}
		b = binary.LittleEndian.AppendUint16(b, uint16(len(r.Keys)))
		for _, k := range r.Keys {
			var err error
			if b, err = appendBytes16(b, k); err != nil {
				return b[:start], err
			}
		}
	case OpCommit, OpAbort, OpUnpin:
		if len(r.Blocks) > 0xffff {
			return b[:start], fmt.Errorf("%w: %d items", ErrBody, len(r.Blocks))
		}
		b = binary.LittleEndian.AppendUint16(b, uint16(len(r.Blocks)))
		for _, id := range r.Blocks {
			b = binary.LittleEndian.AppendUint64(b, id)
		}
	case OpCheck:
		if len(r.Checks) > 0xffff {
			return b[:start], fmt.Errorf("%w: %d items", ErrBody, len(r.Checks))
		}
		b = binary.LittleEndian.AppendUint16(b, uint16(len(r.Checks)))
		for _, c := range r.Checks {
			b = binary.LittleEndian.AppendUint64(b, c.Block)
			b = binary.LittleEndian.AppendUint64(b, c.Gen)
		}
	case OpRenew, OpChunks, OpStat:
	default:
		return b[:start], fmt.Errorf("%w: unknown %s", ErrBody, r.Op)
	}
	binary.LittleEndian.PutUint32(b[start:], uint32(len(b)-body+HeaderSize-4))
	return b, nil
}

func appendBytes16(b, v []byte) ([]byte, error) {
	if len(v) > 0xffff {
		return b, fmt.Errorf("%w: %d bytes in a bytes16", ErrBody, len(v))
	}
	b = binary.LittleEndian.AppendUint16(b, uint16(len(v)))
	return append(b, v...), nil
}

// reader decodes a body; the first error sticks.
type reader struct {
	b   []byte
	err error
}

func (r *reader) need(n int) bool {
	if r.err != nil {
		return false
	}
	if len(r.b) < n {
		r.err = fmt.Errorf("%w: %d bytes left, %d needed", ErrBody, len(r.b), n)
		return false
	}
	return true
}

func (r *reader) u8() uint8 {
	if !r.need(1) {
		return 0
	}
	v := r.b[0]
	r.b = r.b[1:]
	return v
}

func (r *reader) u16() uint16 {
	if !r.need(2) {
		return 0
	}
	v := binary.LittleEndian.Uint16(r.b)
	r.b = r.b[2:]
	return v
}

func (r *reader) u32() uint32 {
	if !r.need(4) {
		return 0
	}
	v := binary.LittleEndian.Uint32(r.b)
	r.b = r.b[4:]
	return v
}

func (r *reader) u64() uint64 {
	if !r.need(8) {
		return 0
	}
	v := binary.LittleEndian.Uint64(r.b)
	r.b = r.b[8:]
	return v
}

func (r *reader) bytes(n int) []byte {
	if !r.need(n) {
		return nil
	}
	v := r.b[:n:n]
	r.b = r.b[n:]
	return v
}

func (r *reader) str8() string {
	s := string(r.bytes(int(r.u8())))
	if r.err == nil && !utf8.ValidString(s) {
		r.err = fmt.Errorf("%w: string is not UTF-8", ErrBody)
	}
	return s
}

// count reads a batch count and checks that n items of at least size
// bytes each can be in what is left, so a lying count never allocates.
func (r *reader) count(size int) int {
	n := int(r.u16())
	if r.err == nil && n*size > len(r.b) {
		r.err = fmt.Errorf("%w: %d items of ≥%d bytes in %d bytes", ErrBody, n, size, len(r.b))
		return 0
	}
	return n
}

func (r *reader) tag() (t [16]byte) {
	copy(t[:], r.bytes(16))
	return t
}

func (r *reader) loc() Loc {
	return Loc{Block: r.u64(), Gen: r.u64(), Tag: r.tag(), Offset: r.u64(), Length: r.u64()}
}

func (r *reader) chunks() []Chunk {
	n := r.count(ChunkSize)
	out := make([]Chunk, 0, n)
	for range n {
		out = append(out, Chunk{ID: r.u64(), Tag: r.tag(), Size: r.u64()})
	}
	return out
}

func (r *reader) end() error {
	if r.err == nil && len(r.b) != 0 {
		r.err = fmt.Errorf("%w: %d bytes after the body", ErrBody, len(r.b))
	}
	return r.err
}

// DecodeRequest decodes a request frame's body. Keys alias body.
func DecodeRequest(h Header, body []byte) (Request, error) {
	req := Request{Op: h.Op, Flags: h.Flags, ID: h.ID}
	if h.Response() {
		return req, fmt.Errorf("%w: a response where a request was expected", ErrFrame)
	}
	r := &reader{b: body}
	switch h.Op {
	case OpHello:
		req.Namespace = r.str8()
		req.Host = r.u16()
		copy(req.Token[:], r.bytes(TokenSize))
		req.LeaseMS = r.u32()
	case OpPut:
		meta := h.Flags&FlagMeta != 0
		size := 2 + 8
		if meta {
			size += PutMetaSize
		}
		n := r.count(size)
		req.Puts = make([]PutItem, 0, n)
		for range n {
			k := r.bytes(int(r.u16()))
			p := PutItem{Key: k, Length: r.u64()}
			if meta {
				m := r.u8()
				if r.err == nil && m&^metaParent != 0 {
					r.err = fmt.Errorf("%w: PUT item meta byte %#02x: only bit 0 (parent) is defined", ErrBody, m)
				}
				p.HasParent = m&metaParent != 0
				p.Parent = r.u64()
				p.Tokens = r.u32()
				if r.err == nil && !p.HasParent && p.Parent != 0 {
					r.err = fmt.Errorf("%w: PUT item has parent hash %d without its parent bit", ErrBody, p.Parent)
				}
			}
			req.Puts = append(req.Puts, p)
		}
	case OpGet, OpExists, OpDelete:
		n := r.count(2)
		req.Keys = make([][]byte, 0, n)
		for range n {
			req.Keys = append(req.Keys, r.bytes(int(r.u16())))
		}
	case OpCommit, OpAbort, OpUnpin:
		n := r.count(8)
		req.Blocks = make([]uint64, 0, n)
		for range n {
			req.Blocks = append(req.Blocks, r.u64())
		}
	case OpCheck:
		n := r.count(16)
		req.Checks = make([]BlockGen, 0, n)
		for range n {
			req.Checks = append(req.Checks, BlockGen{Block: r.u64(), Gen: r.u64()})
		}
	case OpRenew, OpChunks, OpStat:
	default:
		return req, fmt.Errorf("%w: unknown %s", ErrFrame, h.Op)
	}
	return req, r.end()
}

// AppendResponse appends r as one frame. A response with a status other
// than OK carries only its message.
func AppendResponse(b []byte, r *Response) ([]byte, error) {
	start := len(b)
	b = AppendHeader(b, r.Op|respBit, 0, r.ID, 0)
	body := len(b)
	b = binary.LittleEndian.AppendUint16(b, uint16(r.Status))
	if r.Status != OK {
		msg := r.Message
		if len(msg) > 255 {
			msg = msg[:255]
			for !utf8.ValidString(msg) {
				msg = msg[:len(msg)-1]
			}
		}
		b = append(b, byte(len(msg)))
		b = append(b, msg...)
	} else {
		switch r.Op {
		case OpHello:
			b = binary.LittleEndian.AppendUint64(b, r.Session)
			b = binary.LittleEndian.AppendUint32(b, r.LeaseMS)
			b = binary.LittleEndian.AppendUint32(b, r.MaxBody)
			b = binary.LittleEndian.AppendUint16(b, r.MaxBatch)
			b = binary.LittleEndian.AppendUint16(b, r.MaxKey)
			var err error
			if b, err = appendChunks(b, r.Chunks); err != nil {
				return b[:start], err
			}
		case OpChunks:
			var err error
			if b, err = appendChunks(b, r.Chunks); err != nil {
				return b[:start], err
			}
		case OpPut, OpGet, OpCommit, OpAbort, OpExists, OpDelete, OpUnpin, OpCheck:
			if len(r.Items) > 0xffff {
				return b[:start], fmt.Errorf("%w: %d items", ErrBody, len(r.Items))
			}
			withLoc := r.Op == OpPut || r.Op == OpGet
			b = binary.LittleEndian.AppendUint16(b, uint16(len(r.Items)))
			for _, it := range r.Items {
				b = binary.LittleEndian.AppendUint16(b, uint16(it.Status))
				if withLoc && it.Status == OK {
					b = appendLoc(b, it.Loc)
				}
			}
		case OpRenew:
			b = binary.LittleEndian.AppendUint32(b, r.LeaseMS)
		case OpStat:
			for _, v := range []uint64{r.Stat.Blocks, r.Stat.Used, r.Stat.Reserved, r.Stat.Capacity, r.Stat.Quota, r.Stat.Evictions} {
				b = binary.LittleEndian.AppendUint64(b, v)
			}
		default:
			return b[:start], fmt.Errorf("%w: unknown %s", ErrBody, r.Op)
		}
	}
	binary.LittleEndian.PutUint32(b[start:], uint32(len(b)-body+HeaderSize-4))
	return b, nil
}

func appendChunks(b []byte, cs []Chunk) ([]byte, error) {
	if len(cs) > 0xffff {
		return b, fmt.Errorf("%w: %d chunks", ErrBody, len(cs))
	}
	b = binary.LittleEndian.AppendUint16(b, uint16(len(cs)))
	for _, c := range cs {
		b = binary.LittleEndian.AppendUint64(b, c.ID)
		b = append(b, c.Tag[:]...)
		b = binary.LittleEndian.AppendUint64(b, c.Size)
	}
	return b, nil
}

func appendLoc(b []byte, l Loc) []byte {
	b = binary.LittleEndian.AppendUint64(b, l.Block)
	b = binary.LittleEndian.AppendUint64(b, l.Gen)
	b = append(b, l.Tag[:]...)
	b = binary.LittleEndian.AppendUint64(b, l.Offset)
	return binary.LittleEndian.AppendUint64(b, l.Length)
}

// DecodeResponse decodes a response frame's body.
func DecodeResponse(h Header, body []byte) (Response, error) {
	resp := Response{Op: h.Op &^ respBit, ID: h.ID}
	if !h.Response() {
		return resp, fmt.Errorf("%w: a request where a response was expected", ErrFrame)
	}
	r := &reader{b: body}
	resp.Status = Status(r.u16())
	if r.err == nil && resp.Status != OK {
		resp.Message = r.str8()
		return resp, r.end()
	}
	switch resp.Op {
	case OpHello:
		resp.Session = r.u64()
		resp.LeaseMS = r.u32()
		resp.MaxBody = r.u32()
		resp.MaxBatch = r.u16()
		resp.MaxKey = r.u16()
		resp.Chunks = r.chunks()
	case OpChunks:
		resp.Chunks = r.chunks()
	case OpPut, OpGet, OpCommit, OpAbort, OpExists, OpDelete, OpUnpin, OpCheck:
		withLoc := resp.Op == OpPut || resp.Op == OpGet
		n := r.count(2)
		resp.Items = make([]Item, 0, n)
		for range n {
			it := Item{Status: Status(r.u16())}
			if withLoc && it.Status == OK {
				it.Loc = r.loc()
			}
			resp.Items = append(resp.Items, it)
		}
	case OpRenew:
		resp.LeaseMS = r.u32()
	case OpStat:
		resp.Stat = Stat{Blocks: r.u64(), Used: r.u64(), Reserved: r.u64(), Capacity: r.u64(), Quota: r.u64(), Evictions: r.u64()}
	default:
		return resp, fmt.Errorf("%w: unknown %s", ErrFrame, resp.Op)
	}
	return resp, r.end()
}
