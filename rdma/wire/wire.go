// Package wire is the byte format of the rdma TCP transport, shared by the
// server (rdma/tcp), the Go client (rdma/client) and the verbs control
// channel (rdma/verbs). Every field is encoded explicitly, little-endian
// like the rest of CXL; nothing is a raw struct dump.
//
// # Connection
//
// The client opens with an 8-byte preface, the server answers with its
// own, then the client sends requests and the server answers each with one
// response, in request order. Requests may be pipelined: a client need not
// wait for a response before sending the next request.
//
//	preface (8 bytes)
//	  0  4  magic "CXRM" (43h 58h 52h 4Dh)
//	  4  1  version (1)
//	  5  3  reserved, 0
//
// # Request: 32-byte header, then Body bytes
//
//	  0  1  opcode (Op*)
//	  1  1  flags, 0
//	  2  2  reserved, 0
//	  4  4  session: from OPEN, names (export, token) on this connection;
//	        0 for OPEN and PING
//	  8  8  request id, echoed in the response
//	 16  8  offset: byte offset in the export (READ, WRITE, CAS, FAA)
//	 24  4  length: bytes to read (READ), bytes written (WRITE), 8 (CAS,
//	        FAA), 0 otherwise
//	 28  4  body: bytes that follow the header; must be 0 (READ, CLOSE),
//	        length (WRITE), 16 (CAS: compare, swap as u64), 8 (FAA: addend
//	        as u64), the OPEN body, the BATCH body, or any (PING, CONNECT)
//
//	OPEN body: export id and token; opens a session
//	  0  1  n, export id length (1–64)
//	  1  n  export id (ASCII)
//	1+n 32  token
//
//	BATCH body: entries back to back, each a 16-byte entry header and its
//	data; all entries use the request's session and run in order
//	  0  1  opcode (READ, WRITE, CAS, FAA)
//	  1  3  reserved, 0
//	  4  4  length (as in the request header)
//	  8  8  offset
//	 16     data: length bytes (WRITE), 16 (CAS), 8 (FAA), none (READ)
//
// # Response: 24-byte header, then Body bytes
//
//	  0  1  opcode (echoed)
//	  1  1  status (Status*)
//	  2  2  reserved, 0
//	  4  4  body: bytes that follow; 0 unless status is OK
//	  8  8  request id (echoed)
//	 16  8  value: the previous word (CAS, FAA), else 0
//
//	READ body: the bytes read. WRITE's response is sent only once the data
//	is in device memory.
//
//	OPEN body (16 bytes)
//	  0  4  session
//	  4  1  permissions (bit 0 read, bit 1 write)
//	  5  3  reserved, 0
//	  8  8  export size in bytes
//
//	BATCH body: one 16-byte result per entry, each followed by its data
//	  0  1  status
//	  1  3  reserved, 0
//	  4  4  data length (READ with status OK: the entry's length; else 0)
//	  8  8  value (CAS, FAA)
//	 16     data
//
// A wrong token and an unknown export both answer StatusDenied.
package wire

import (
	"encoding/binary"
	"errors"
	"fmt"

	"cxlpool/rdma"
)

// Sizes of the fixed parts.
const (
	PrefaceLen   = 8
	RequestLen   = 32
	ResponseLen  = 24
	EntryLen     = 16
	ResultLen    = 16
	OpenReplyLen = 16
	Version      = 1
)

// Limits every peer enforces.
const (
	// MaxIO is the largest READ or WRITE length, and the largest total
	// of a BATCH's data in either direction.
	MaxIO = 16 << 20
	// MaxEntries is the most entries in one BATCH.
	MaxEntries = 1024
	// MaxBody is the largest request body.
	MaxBody = MaxIO + MaxEntries*EntryLen
)

var magic = [4]byte{'C', 'X', 'R', 'M'}

// Opcode is a request's operation.
type Opcode uint8

// Opcodes.
const (
	OpOpen    Opcode = 1
	OpClose   Opcode = 2
	OpRead    Opcode = 3
	OpWrite   Opcode = 4
	OpCAS     Opcode = 5
	OpFAA     Opcode = 6
	OpBatch   Opcode = 7
	OpPing    Opcode = 8
	OpConnect Opcode = 9 // verbs transport setup over this control channel
)

func (o Opcode) String() string {
	switch o {
	case OpOpen:
		return "OPEN"
	case OpClose:
		return "CLOSE"
	case OpRead:
		return "READ"
	case OpWrite:
		return "WRITE"
	case OpCAS:
		return "CAS"
	case OpFAA:
		return "FAA"
	case OpBatch:
		return "BATCH"
	case OpPing:
		return "PING"
	case OpConnect:
		return "CONNECT"
	}
	return fmt.Sprintf("Opcode(%d)", uint8(o))
}

// Status is a response's outcome.
type Status uint8

// Status codes; each but OK and Internal mirrors one rdma error.
const (
	StatusOK          Status = 0
	StatusDenied      Status = 1 // rdma.ErrDenied (also: no such session)
	StatusRevoked     Status = 2 // rdma.ErrRevoked
	StatusRange       Status = 3 // rdma.ErrRange
	StatusPerm        Status = 4 // rdma.ErrPerm
	StatusAlign       Status = 5 // rdma.ErrAlign
	StatusInvalid     Status = 6 // malformed request (rdma.ErrProtocol)
	StatusBusy        Status = 7 // rdma.ErrBusy
	StatusUnsupported Status = 8 // opcode not served here
	StatusInternal    Status = 9
)

// Errors for statuses without an rdma sentinel.
var (
	ErrUnsupported = errors.New("rdma: operation not supported by the server")
	ErrInternal    = errors.New("rdma: server error")
)

// StatusOf maps an error to the status that reports it.
func StatusOf(err error) Status {
	switch {
	case err == nil:
		return StatusOK
	case errors.Is(err, rdma.ErrDenied):
		return StatusDenied
	case errors.Is(err, rdma.ErrRevoked):
		return StatusRevoked
	case errors.Is(err, rdma.ErrRange):
		return StatusRange
	case errors.Is(err, rdma.ErrPerm):
		return StatusPerm
	case errors.Is(err, rdma.ErrAlign):
		return StatusAlign
	case errors.Is(err, rdma.ErrProtocol):
		return StatusInvalid
	case errors.Is(err, rdma.ErrBusy):
		return StatusBusy
	case errors.Is(err, ErrUnsupported):
		return StatusUnsupported
	}
	return StatusInternal
}

// Err maps a status back to its error (nil for OK).
func (s Status) Err() error {
	switch s {
	case StatusOK:
		return nil
	case StatusDenied:
		return rdma.ErrDenied
	case StatusRevoked:
		return rdma.ErrRevoked
	case StatusRange:
		return rdma.ErrRange
	case StatusPerm:
		return rdma.ErrPerm
	case StatusAlign:
		return rdma.ErrAlign
	case StatusInvalid:
		return rdma.ErrProtocol
	case StatusBusy:
		return rdma.ErrBusy
	case StatusUnsupported:
		return ErrUnsupported
	}
	return ErrInternal
}

func errf(format string, args ...any) error {
	return fmt.Errorf("wire: "+format+": %w", append(args, rdma.ErrProtocol)...)
}

// AppendPreface appends the preface of this version.
func AppendPreface(b []byte) []byte {
	return append(append(b, magic[:]...), Version, 0, 0, 0)
}

// ParsePreface checks a peer's preface and returns its version.
func ParsePreface(b []byte) (uint8, error) {
	if len(b) < PrefaceLen {
		return 0, errf("preface is %d bytes, want %d", len(b), PrefaceLen)
	}
	if [4]byte(b[:4]) != magic {
		return 0, errf("bad magic % x", b[:4])
	}
	if b[4] != Version {
		return b[4], errf("version %d, want %d", b[4], Version)
	}
	return b[4], nil
}

// Request is a request header.
type Request struct {
	Op      Opcode
	Session uint32
	ID      uint64
	Offset  uint64
	Length  uint32
	Body    uint32
}

// AppendBinary appends the 32-byte header.
func (r Request) AppendBinary(b []byte) []byte {
	b = append(b, byte(r.Op), 0, 0, 0)
	b = binary.LittleEndian.AppendUint32(b, r.Session)
	b = binary.LittleEndian.AppendUint64(b, r.ID)
	b = binary.LittleEndian.AppendUint64(b, r.Offset)
	b = binary.LittleEndian.AppendUint32(b, r.Length)
	return binary.LittleEndian.AppendUint32(b, r.Body)
}

// ParseRequest decodes and validates a request header from the first 32
// bytes of b: reserved bytes are zero and Body is consistent with the
// opcode and Length. Unknown opcodes parse (the server answers them
// StatusUnsupported after skipping their body).
func ParseRequest(b []byte) (Request, error) {
	if len(b) < RequestLen {
		return Request{}, errf("request header is %d bytes, want %d", len(b), RequestLen)
	}
	if b[1] != 0 || b[2] != 0 || b[3] != 0 {
		return Request{}, errf("request flags/reserved % x not zero", b[1:4])
	}
	r := Request{
		Op:      Opcode(b[0]),
		Session: binary.LittleEndian.Uint32(b[4:]),
		ID:      binary.LittleEndian.Uint64(b[8:]),
		Offset:  binary.LittleEndian.Uint64(b[16:]),
		Length:  binary.LittleEndian.Uint32(b[24:]),
		Body:    binary.LittleEndian.Uint32(b[28:]),
	}
	if r.Body > MaxBody {
		return r, errf("%s body %d bytes, limit %d", r.Op, r.Body, MaxBody)
	}
	if err := checkShape(r.Op, r.Length, r.Body, false); err != nil {
		return r, err
	}
	return r, nil
}

// checkShape validates Length and Body for op; entry is set for batch
// entries, which allow only data operations.
func checkShape(op Opcode, length, body uint32, entry bool) error {
	want := int64(-1) // -1: any body
	switch op {
	case OpRead:
		want = 0
	case OpWrite:
		want = int64(length)
	case OpCAS:
		want = 16
	case OpFAA:
		want = 8
	case OpClose:
		want = 0
	case OpOpen, OpBatch, OpPing, OpConnect:
		if entry {
			return errf("%s is not allowed in a batch", op)
		}
		if length != 0 {
			return errf("%s length %d, want 0", op, length)
		}
		return nil
	default:
		if entry {
			return errf("unknown batch opcode %d", uint8(op))
		}
		return nil
	}
	switch op {
	case OpRead, OpWrite:
		if length > MaxIO {
			return errf("%s length %d, limit %d", op, length, MaxIO)
		}
	case OpCAS, OpFAA:
		if length != 8 {
			return errf("%s length %d, want 8", op, length)
		}
	case OpClose:
		if length != 0 {
			return errf("%s length %d, want 0", op, length)
		}
	}
	if int64(body) != want {
		return errf("%s body %d bytes, want %d", op, body, want)
	}
	return nil
}

// Response is a response header.
type Response struct {
	Op     Opcode
	Status Status
	Body   uint32
	ID     uint64
	Value  uint64
}

// AppendBinary appends the 24-byte header.
func (r Response) AppendBinary(b []byte) []byte {
	b = append(b, byte(r.Op), byte(r.Status), 0, 0)
	b = binary.LittleEndian.AppendUint32(b, r.Body)
	b = binary.LittleEndian.AppendUint64(b, r.ID)
	return binary.LittleEndian.AppendUint64(b, r.Value)
}

// ParseResponse decodes a response header from the first 24 bytes of b.
func ParseResponse(b []byte) (Response, error) {
	if len(b) < ResponseLen {
		return Response{}, errf("response header is %d bytes, want %d", len(b), ResponseLen)
	}
	if b[2] != 0 || b[3] != 0 {
		return Response{}, errf("response reserved % x not zero", b[2:4])
	}
	r := Response{
		Op:     Opcode(b[0]),
		Status: Status(b[1]),
		Body:   binary.LittleEndian.Uint32(b[4:]),
		ID:     binary.LittleEndian.Uint64(b[8:]),
		Value:  binary.LittleEndian.Uint64(b[16:]),
	}
	if r.Status != StatusOK && r.Body != 0 {
		return r, errf("%s status %d with a %d-byte body", r.Op, r.Status, r.Body)
	}
	if r.Body > MaxBody {
		return r, errf("%s response body %d bytes, limit %d", r.Op, r.Body, MaxBody)
	}
	return r, nil
}

// Open is the OPEN request body.
type Open struct {
	Export rdma.ExportID
	Token  rdma.Token
}

// AppendBinary appends the OPEN body.
func (o Open) AppendBinary(b []byte) []byte {
	b = append(b, byte(len(o.Export)))
	b = append(b, o.Export...)
	return append(b, o.Token[:]...)
}

// ParseOpen decodes an OPEN body, which must be exactly b.
func ParseOpen(b []byte) (Open, error) {
	if len(b) < 1 {
		return Open{}, errf("empty OPEN body")
	}
	n := int(b[0])
	if len(b) != 1+n+rdma.TokenLen {
		return Open{}, errf("OPEN body %d bytes for a %d-byte export id, want %d", len(b), n, 1+n+rdma.TokenLen)
	}
	o := Open{Export: rdma.ExportID(b[1 : 1+n])}
	if !o.Export.Valid() {
		return Open{}, errf("OPEN export id %q is not valid", b[1:1+n])
	}
	copy(o.Token[:], b[1+n:])
	return o, nil
}

// OpenReply is the OPEN response body.
type OpenReply struct {
	Session uint32
	Perms   rdma.Perm
	Size    uint64
}

// AppendBinary appends the 16-byte OPEN response body.
func (o OpenReply) AppendBinary(b []byte) []byte {
	b = binary.LittleEndian.AppendUint32(b, o.Session)
	b = append(b, byte(o.Perms), 0, 0, 0)
	return binary.LittleEndian.AppendUint64(b, o.Size)
}

// ParseOpenReply decodes an OPEN response body.
func ParseOpenReply(b []byte) (OpenReply, error) {
	if len(b) != OpenReplyLen {
		return OpenReply{}, errf("OPEN reply %d bytes, want %d", len(b), OpenReplyLen)
	}
	o := OpenReply{Session: binary.LittleEndian.Uint32(b), Perms: rdma.Perm(b[4]),
		Size: binary.LittleEndian.Uint64(b[8:])}
	if !o.Perms.Valid() || b[5] != 0 || b[6] != 0 || b[7] != 0 {
		return OpenReply{}, errf("OPEN reply permissions % x", b[4:8])
	}
	return o, nil
}

// Entry is a BATCH entry header.
type Entry struct {
	Op     Opcode
	Length uint32
	Offset uint64
}

// DataLen is how many data bytes follow the entry header.
func (e Entry) DataLen() int {
	switch e.Op {
	case OpWrite:
		return int(e.Length)
	case OpCAS:
		return 16
	case OpFAA:
		return 8
	}
	return 0
}

// AppendBinary appends the 16-byte entry header.
func (e Entry) AppendBinary(b []byte) []byte {
	b = append(b, byte(e.Op), 0, 0, 0)
	b = binary.LittleEndian.AppendUint32(b, e.Length)
	return binary.LittleEndian.AppendUint64(b, e.Offset)
}

// ParseEntry decodes and validates an entry header from the first 16
// bytes of b.
func ParseEntry(b []byte) (Entry, error) {
	if len(b) < EntryLen {
		return Entry{}, errf("batch entry is %d bytes, want %d", len(b), EntryLen)
	}
	if b[1] != 0 || b[2] != 0 || b[3] != 0 {
		return Entry{}, errf("batch entry reserved % x not zero", b[1:4])
	}
	e := Entry{Op: Opcode(b[0]), Length: binary.LittleEndian.Uint32(b[4:]), Offset: binary.LittleEndian.Uint64(b[8:])}
	if err := checkShape(e.Op, e.Length, uint32(e.DataLen()), true); err != nil {
		return Entry{}, err
	}
	return e, nil
}

// Result is a BATCH result header.
type Result struct {
	Status Status
	Length uint32
	Value  uint64
}

// AppendBinary appends the 16-byte result header.
func (r Result) AppendBinary(b []byte) []byte {
	b = append(b, byte(r.Status), 0, 0, 0)
	b = binary.LittleEndian.AppendUint32(b, r.Length)
	return binary.LittleEndian.AppendUint64(b, r.Value)
}

// ParseResult decodes a result header from the first 16 bytes of b.
func ParseResult(b []byte) (Result, error) {
	if len(b) < ResultLen {
		return Result{}, errf("batch result is %d bytes, want %d", len(b), ResultLen)
	}
	if b[1] != 0 || b[2] != 0 || b[3] != 0 {
		return Result{}, errf("batch result reserved % x not zero", b[1:4])
	}
	r := Result{Status: Status(b[0]), Length: binary.LittleEndian.Uint32(b[4:]), Value: binary.LittleEndian.Uint64(b[8:])}
	if r.Status != StatusOK && r.Length != 0 {
		return Result{}, errf("batch result status %d with %d data bytes", r.Status, r.Length)
	}
	if r.Length > MaxIO {
		return Result{}, errf("batch result %d data bytes, limit %d", r.Length, MaxIO)
	}
	return r, nil
}

// BatchOp is one decoded BATCH entry with its data (aliasing the body).
type BatchOp struct {
	Entry
	Data []byte
}

// ParseBatch decodes a whole BATCH body. The server decodes entries as
// they stream in instead (to read WRITE data straight into memory); this
// is the same decoder over a buffer, for tests, fuzzing and tools.
func ParseBatch(b []byte) ([]BatchOp, error) {
	var ops []BatchOp
	var total uint64
	for len(b) > 0 {
		if len(ops) == MaxEntries {
			return nil, errf("batch has more than %d entries", MaxEntries)
		}
		e, err := ParseEntry(b)
		if err != nil {
			return nil, err
		}
		b = b[EntryLen:]
		n := e.DataLen()
		if len(b) < n {
			return nil, errf("batch entry %d wants %d data bytes, %d left", len(ops), n, len(b))
		}
		if e.Op == OpRead || e.Op == OpWrite {
			total += uint64(e.Length)
		}
		if total > MaxIO {
			return nil, errf("batch moves more than %d bytes", MaxIO)
		}
		ops = append(ops, BatchOp{Entry: e, Data: b[:n:n]})
		b = b[n:]
	}
	if len(ops) == 0 {
		return nil, errf("empty batch")
	}
	return ops, nil
}

// AppendBatch encodes ops as a BATCH body (the inverse of ParseBatch).
func AppendBatch(b []byte, ops []BatchOp) []byte {
	for _, op := range ops {
		b = op.Entry.AppendBinary(b)
		b = append(b, op.Data...)
	}
	return b
}
