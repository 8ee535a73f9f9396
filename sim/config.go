package sim

import (
	"errors"
	"fmt"
	"log/slog"
	"math/bits"
	"time"

	"cxlpool/fabric/cci"
	"cxlpool/fabric/mctp"
	"cxlpool/sim/board"
	"cxlpool/sim/chmu"
)

// Supported block sizes: 2 MiB … 1 GiB (5600h block size mask bits 21–30),
// further limited per region to sizes that divide the region length.
const (
	minBlockShift = 21
	maxBlockShift = 30
)

// Config describes one virtual box. The zero value is not usable; start
// from DefaultConfig and change fields.
type Config struct {
	Heads     int    // host heads = LDs = Host IDs (1–32)
	Capacity  uint64 // total dynamic capacity in bytes, a multiple of 256 MB × Regions
	BlockSize uint64 // initial block size of every region
	Regions   int    // DC regions (1–8); capacity is split evenly
	// SharableRegions marks regions Sharable (Attributes1 b3). Nil means
	// region 0 not sharable, every other region sharable.
	SharableRegions []bool
	// SanitizeOnRelease is the initial per-region SoR setting. Nil means on
	// for every region.
	SanitizeOnRelease []bool
	// SoRConfigurable says which regions accept a SoR change through 5602h.
	// Nil means every region.
	SoRConfigurable []bool
	// NoRequestSanitize makes 5605h with the Sanitize bit answer Invalid
	// Input ("SoR requested but unsupported").
	NoRequestSanitize bool

	Serial                         uint64
	VendorID, DeviceID             uint16
	SubsystemVendorID, SubsystemID uint16
	FirmwareRevision               string // at most 16 ASCII bytes

	EID           mctp.EID
	MTU           int   // MCTP packet payload bytes (64 is the baseline)
	MaxPayloadExp uint8 // advertised CCI payload limit 2^n, n = 8…10

	EventLogSize    int // records per event log before it overflows
	MaxExtentsPerLD int // extent tracking per LD (5601h trailer)
	MaxTagsPerLD    int // tag tracking per LD (5601h trailer)

	// BootRetries is how many MCTP requests answer Retry Required after a
	// device reset (Faults.Reset) while the box "boots".
	BootRetries int
	// NotifyInterval and NotifyRetries drive Event Notification (0106h)
	// resends: every interval, up to this many retries after the first try.
	NotifyInterval time.Duration
	NotifyRetries  int

	Logger *slog.Logger
	Clock  func() time.Time
	// Board configures the simulated board controller (PLDM at EID 9 on
	// every link); zero values take its defaults and the box's heads.
	Board board.Config
	// CHMU configures the hotness monitoring unit (sim/chmu); zero values
	// take its defaults (1 instance, a 1024-entry hotlist, 4 KiB … 2 MiB
	// units) with the box's capacity and clock.
	CHMU chmu.Config
	// WorkloadTick is how often the background tick closes CHMU epochs
	// and steps the workloads (default 10 ms); negative turns it off, for
	// tests that call StepWorkloads themselves.
	WorkloadTick time.Duration
}

// DefaultConfig returns the reference box: 8 heads, 1 TiB in two regions of
// 256 MiB blocks (region 1 sharable), SoR on, EID 8, 512-byte payloads.
func DefaultConfig() Config {
	return Config{
		Heads:            8,
		Capacity:         1 << 40,
		BlockSize:        256 << 20,
		Regions:          2,
		Serial:           0x0123456789abcdef,
		VendorID:         0x1e98,
		DeviceID:         0x0d93,
		FirmwareRevision: "cxlsim 1.0",
		EID:              8,
		MTU:              64,
		MaxPayloadExp:    9,
		EventLogSize:     64,
		MaxExtentsPerLD:  512,
		MaxTagsPerLD:     64,
		BootRetries:      3,
		NotifyInterval:   time.Millisecond,
		NotifyRetries:    10,
	}
}

// regionLength is the byte length of every region.
func (c *Config) regionLength() uint64 {
	return c.Capacity / uint64(c.Regions)
}

func perRegion(v []bool, i int, def bool) bool {
	if v == nil {
		return def
	}
	return i < len(v) && v[i]
}

// validate checks c and fills defaults for optional fields.
func (c *Config) validate() error {
	if c.Heads < 1 || c.Heads > 32 {
		return fmt.Errorf("sim: config: heads %d not in 1…32", c.Heads)
	}
	if c.Regions < 1 || c.Regions > 8 {
		return fmt.Errorf("sim: config: regions %d not in 1…8", c.Regions)
	}
	if c.Capacity == 0 || c.Capacity%(cci.CapacityUnit*uint64(c.Regions)) != 0 {
		return fmt.Errorf("sim: config: capacity %d is not a non-zero multiple of 256 MB × %d regions", c.Capacity, c.Regions)
	}
	if c.BlockSize == 0 || bits.OnesCount64(c.BlockSize) != 1 {
		return fmt.Errorf("sim: config: block size %d is not a power of two", c.BlockSize)
	}
	if s := bits.TrailingZeros64(c.BlockSize); s < minBlockShift || s > maxBlockShift {
		return fmt.Errorf("sim: config: block size %d not in 2 MiB…1 GiB", c.BlockSize)
	}
	if c.regionLength()%c.BlockSize != 0 {
		return fmt.Errorf("sim: config: region length %d is not a multiple of block size %d", c.regionLength(), c.BlockSize)
	}
	if c.MaxPayloadExp < 8 || c.MaxPayloadExp > 10 {
		return fmt.Errorf("sim: config: max payload exponent %d not in 8…10", c.MaxPayloadExp)
	}
	if len(c.FirmwareRevision) > 16 {
		return errors.New("sim: config: firmware revision longer than 16 bytes")
	}
	if c.EID == mctp.EIDNull || c.EID == mctp.EIDBroadcast {
		return fmt.Errorf("sim: config: EID %d is not assignable", c.EID)
	}
	if c.MTU <= 0 {
		c.MTU = 64
	}
	if c.EventLogSize <= 0 {
		c.EventLogSize = 64
	}
	if c.MaxExtentsPerLD <= 0 {
		c.MaxExtentsPerLD = 512
	}
	if c.MaxTagsPerLD <= 0 {
		c.MaxTagsPerLD = 64
	}
	if c.BootRetries < 0 {
		c.BootRetries = 0
	}
	if c.NotifyInterval <= 0 {
		c.NotifyInterval = time.Millisecond
	}
	if c.NotifyRetries < 0 {
		c.NotifyRetries = 0
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Clock == nil {
		c.Clock = time.Now
	}
	return nil
}
