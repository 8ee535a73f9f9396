package pldm

import (
	"context"
	"encoding"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"cxlpool/fabric/mctp"
)

// Requester sends one MCTP request message (without the type byte) and
// returns the response message. *mctp.Endpoint implements it, so the
// daemon hands the Client the endpoint the FM client already runs on the
// device link, and sim/board hands its own endpoint to send events.
type Requester interface {
	Request(ctx context.Context, dst mctp.EID, typ mctp.MsgType, msg []byte) ([]byte, error)
}

// Client defaults.
const (
	// DefaultBoardEID is the board controller's EID on the device link.
	DefaultBoardEID mctp.EID = 9
	// DefaultTimeout bounds one attempt (openbmc/pldm uses 2 s).
	DefaultTimeout = 2 * time.Second
	// DefaultRetries is how many more attempts a timed-out command gets.
	DefaultRetries = 2
	// DefaultPDRChunk is the GetPDR requestCount: small enough that a part
	// fits a 1100-byte MCTP message limit with room to spare, large enough
	// that most records come in one part.
	DefaultPDRChunk = 128
)

// ClientConfig configures a Client. Zero fields take the defaults.
type ClientConfig struct {
	EID     mctp.EID      // the terminus (default DefaultBoardEID)
	Timeout time.Duration // per attempt (default DefaultTimeout)
	// Retries after a timeout; every command this package sends is
	// idempotent, so retrying is safe. Negative means none.
	Retries  int
	PDRChunk uint16 // GetPDR requestCount (default DefaultPDRChunk)
}

// Client sends PLDM requests to one terminus and decodes the responses.
// It is safe for concurrent use.
type Client struct {
	r   Requester
	cfg ClientConfig
	iid atomic.Uint32
}

// NewClient returns a client that reaches the terminus through r.
func NewClient(r Requester, cfg ClientConfig) *Client {
	if cfg.EID == mctp.EIDNull {
		cfg.EID = DefaultBoardEID
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	switch {
	case cfg.Retries == 0:
		cfg.Retries = DefaultRetries
	case cfg.Retries < 0:
		cfg.Retries = 0
	}
	if cfg.PDRChunk == 0 {
		cfg.PDRChunk = DefaultPDRChunk
	}
	return &Client{r: r, cfg: cfg}
}

// EID returns the terminus the client talks to.
func (c *Client) EID() mctp.EID { return c.cfg.EID }

// Do sends one command and decodes its response payload into resp (which
// may be nil for commands that answer only a completion code). Each
// request gets a fresh instance ID, reused for its retries. A non-zero
// completion code comes back as a wrapped CompletionCode.
func (c *Client) Do(ctx context.Context, t Type, cmd Command, req encoding.BinaryMarshaler, resp encoding.BinaryUnmarshaler) error {
	var payload []byte
	if req != nil {
		var err error
		if payload, err = req.MarshalBinary(); err != nil {
			return err
		}
	}
	iid := uint8(c.iid.Add(1)) & InstanceMax
	hdr := Header{Request: true, InstanceID: iid, Type: t, Command: cmd}
	msg := EncodeRequest(iid, t, cmd, payload)
	var err error
	for attempt := 0; attempt <= c.cfg.Retries; attempt++ {
		var raw []byte
		actx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
		raw, err = c.r.Request(actx, c.cfg.EID, mctp.MsgTypePLDM, msg)
		cancel()
		if err == nil {
			data, perr := ParseResponse(raw, hdr)
			if perr != nil {
				return perr
			}
			if resp == nil {
				if len(data) != 0 {
					return fmt.Errorf("pldm: type %d command %#02x: %d unexpected payload bytes: %w", t, uint8(cmd), len(data), ErrLength)
				}
				return nil
			}
			return resp.UnmarshalBinary(data)
		}
		if ctx.Err() != nil || !errors.Is(err, mctp.ErrTimeout) {
			break
		}
	}
	return fmt.Errorf("pldm: type %d command %#02x to EID %d: %w", t, uint8(cmd), c.cfg.EID, err)
}

// GetTID returns the terminus ID.
func (c *Client) GetTID(ctx context.Context) (uint8, error) {
	var r GetTIDResp
	err := c.Do(ctx, TypeBase, CmdGetTID, nil, &r)
	return r.TID, err
}

// GetTypes returns the PLDM types the terminus supports.
func (c *Client) GetTypes(ctx context.Context) (TypeSet, error) {
	var r GetPLDMTypesResp
	err := c.Do(ctx, TypeBase, CmdGetPLDMTypes, nil, &r)
	return r.Types, err
}

// GetVersions returns the versions of type t the terminus supports,
// reading every part of a multipart answer.
func (c *Client) GetVersions(ctx context.Context, t Type) ([]Ver32, error) {
	var out []Ver32
	req := GetPLDMVersionReq{Op: GetFirstPart, Type: t}
	for range 16 {
		var r GetPLDMVersionResp
		if err := c.Do(ctx, TypeBase, CmdGetPLDMVersion, &req, &r); err != nil {
			return nil, err
		}
		out = append(out, r.Versions...)
		if r.Flag == TransferEnd || r.Flag == TransferWhole || r.NextTransferHandle == 0 {
			return out, nil
		}
		req = GetPLDMVersionReq{TransferHandle: r.NextTransferHandle, Op: GetNextPart, Type: t}
	}
	return nil, fmt.Errorf("pldm: GetPLDMVersion: transfer does not end: %w", ErrInvalid)
}

// GetCommands returns the commands of type t at version v.
func (c *Client) GetCommands(ctx context.Context, t Type, v Ver32) (CommandSet, error) {
	var r GetPLDMCommandsResp
	err := c.Do(ctx, TypeBase, CmdGetPLDMCommands, &GetPLDMCommandsReq{Type: t, Version: v}, &r)
	return r.Commands, err
}

// SetEventReceiver tells the terminus where to send PlatformEventMessages.
func (c *Client) SetEventReceiver(ctx context.Context, req SetEventReceiverReq) error {
	return c.Do(ctx, TypePlatform, CmdSetEventReceiver, &req, nil)
}

// RepositoryInfo returns GetPDRRepositoryInfo.
func (c *Client) RepositoryInfo(ctx context.Context) (GetPDRRepositoryInfoResp, error) {
	var r GetPDRRepositoryInfoResp
	err := c.Do(ctx, TypePlatform, CmdGetPDRRepositoryInfo, nil, &r)
	return r, err
}

// GetPDR sends one GetPDR.
func (c *Client) GetPDR(ctx context.Context, req GetPDRReq) (GetPDRResp, error) {
	var r GetPDRResp
	err := c.Do(ctx, TypePlatform, CmdGetPDR, &req, &r)
	return r, err
}

// ReadPDR reads the whole record with handle h (0 = the first), part by
// part, checks the CRC-8 of a multipart record and returns the record and
// the next record's handle (0 after the last). A record ends on an End or
// StartAndEnd flag or a zero next transfer handle (pldm.md §5.8).
func (c *Client) ReadPDR(ctx context.Context, h uint32) (record []byte, next uint32, err error) {
	req := GetPDRReq{RecordHandle: h, Op: GetFirstPart, RequestCount: c.cfg.PDRChunk}
	for parts := 0; ; parts++ {
		r, err := c.GetPDR(ctx, req)
		if err != nil {
			return nil, 0, err
		}
		record = append(record, r.Data...)
		if len(record) > 0xFFFF+PDRHeaderLen {
			return nil, 0, fmt.Errorf("pldm: PDR %d: record exceeds %d bytes: %w", h, 0xFFFF+PDRHeaderLen, ErrLength)
		}
		if r.Flag == TransferWhole || r.Flag == TransferEnd || r.NextTransferHandle == 0 {
			if parts > 0 && r.Flag == TransferEnd && CRC8(record) != r.CRC {
				return nil, 0, fmt.Errorf("pldm: PDR %d: CRC-8 %#02x, record has %#02x: %w", h, r.CRC, CRC8(record), ErrInvalid)
			}
			return record, r.NextRecordHandle, nil
		}
		if parts == 0 {
			// Later parts carry the record's own change number.
			hdr, herr := ParsePDRHeader(record)
			if herr != nil {
				return nil, 0, herr
			}
			req.ChangeNumber = hdr.ChangeNumber
		}
		req.RecordHandle = h
		req.TransferHandle = r.NextTransferHandle
		req.Op = GetNextPart
	}
}

// ReadRepository walks the whole PDR repository and decodes every record.
// It stops after RecordCount records (plus slack for a repository that
// grows meanwhile) and on a handle it has already seen, so a terminus
// cannot keep it looping.
func (c *Client) ReadRepository(ctx context.Context) ([]PDR, error) {
	info, err := c.RepositoryInfo(ctx)
	if err != nil {
		return nil, err
	}
	if info.State != RepositoryAvailable {
		return nil, fmt.Errorf("pldm: PDR repository state %d: %w", info.State, CCNotReady)
	}
	limit := int(min(info.RecordCount, 4096)) + 16
	seen := map[uint32]bool{}
	var out []PDR
	for h := uint32(0); len(out) < limit; {
		rec, next, err := c.ReadPDR(ctx, h)
		if err != nil {
			return nil, err
		}
		p, err := ParsePDR(rec)
		if err != nil {
			return nil, err
		}
		out = append(out, p)
		seen[h] = true
		seen[p.Header().RecordHandle] = true
		if next == 0 {
			return out, nil
		}
		if seen[next] {
			return nil, fmt.Errorf("pldm: PDR repository loops at handle %d: %w", next, ErrInvalid)
		}
		h = next
	}
	return nil, fmt.Errorf("pldm: PDR repository has more than %d records: %w", limit, ErrInvalid)
}

// SensorReading reads numeric sensor id.
func (c *Client) SensorReading(ctx context.Context, id uint16, rearm bool) (GetSensorReadingResp, error) {
	var r GetSensorReadingResp
	err := c.Do(ctx, TypePlatform, CmdGetSensorReading, &GetSensorReadingReq{SensorID: id, Rearm: rearm}, &r)
	return r, err
}

// StateSensorReadings reads state sensor id.
func (c *Client) StateSensorReadings(ctx context.Context, id uint16, rearm uint8) ([]StateReading, error) {
	var r GetStateSensorReadingsResp
	err := c.Do(ctx, TypePlatform, CmdGetStateSensorReadings, &GetStateSensorReadingsReq{SensorID: id, Rearm: rearm}, &r)
	return r.Fields, err
}

// SetNumericEffecter sets numeric effecter id to the raw value v.
func (c *Client) SetNumericEffecter(ctx context.Context, id uint16, ds DataSize, v int64) error {
	return c.Do(ctx, TypePlatform, CmdSetNumericEffecterValue, &SetNumericEffecterValueReq{EffecterID: id, DataSize: ds, Value: v}, nil)
}

// NumericEffecter reads numeric effecter id.
func (c *Client) NumericEffecter(ctx context.Context, id uint16) (GetNumericEffecterValueResp, error) {
	var r GetNumericEffecterValueResp
	err := c.Do(ctx, TypePlatform, CmdGetNumericEffecterValue, &GetNumericEffecterValueReq{EffecterID: id}, &r)
	return r, err
}

// SetStateEffecter sets the composite effecters of state effecter id.
func (c *Client) SetStateEffecter(ctx context.Context, id uint16, fields []StateRequest) error {
	return c.Do(ctx, TypePlatform, CmdSetStateEffecterStates, &SetStateEffecterStatesReq{EffecterID: id, Fields: fields}, nil)
}

// PlatformEvent sends a PlatformEventMessage (terminus → event receiver)
// and returns the receiver's platformEventStatus.
func (c *Client) PlatformEvent(ctx context.Context, req PlatformEventMessageReq) (uint8, error) {
	var r PlatformEventMessageResp
	err := c.Do(ctx, TypePlatform, CmdPlatformEventMessage, &req, &r)
	return r.Status, err
}
