package telemetry

import (
	"encoding/json"
	"errors"
	"math"
	"math/bits"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"

	"cxlpool/api/redfish"
	"cxlpool/hmu"
)

// The TelemetryService's CHMU settings: their bodies and PATCH.

// duration formats d as an ISO 8601 duration ("PT0.1S").
func duration(d time.Duration) string {
	return "PT" + strconv.FormatFloat(d.Seconds(), 'f', -1, 64) + "S"
}

func epochMS(e hmu.Epoch) float64 { return float64(e.Duration()) / float64(time.Millisecond) }

func chmuBody(c hmu.Config, enabled bool) redfish.Obj {
	mode := "Epoch"
	if c.Mode == hmu.ModeAlwaysOn {
		mode = "AlwaysOn"
	}
	var ranges any
	if c.Ranges != nil {
		ranges = slices.Clone(c.Ranges)
	}
	return redfish.Obj{
		"Enabled":            enabled,
		"AccessType":         accessName(c.Access),
		"UnitBytes":          c.UnitSize,
		"Threshold":          c.Threshold,
		"Mode":               mode,
		"EpochMilliseconds":  epochMS(c.Epoch),
		"DownSamplingFactor": uint64(1) << c.DSFactor,
		"RandomDownSampling": c.RandomDS,
		"OverflowInterrupt":  c.OverflowIRQ,
		"LevelInterrupt":     c.LevelIRQ,
		"FillThreshold":      c.FillThreshold,
		"Ranges":             ranges,
	}
}

func capsBody(c hmu.Caps, instances int) redfish.Obj {
	access := []string{}
	for _, t := range accessTypes {
		if c.CanTrack(t.a) {
			access = append(access, t.name)
		}
	}
	units, ds := []uint64{}, []uint64{}
	for n := range 32 {
		if c.UnitSizes>>n&1 == 1 {
			units = append(units, 256<<n)
		}
		if n < 16 && c.DownSampling>>n&1 == 1 {
			ds = append(ds, 1<<n)
		}
	}
	modes := []string{}
	if c.EpochMode {
		modes = append(modes, "Epoch")
	}
	if c.AlwaysOn {
		modes = append(modes, "AlwaysOn")
	}
	return redfish.Obj{
		"Instances":            instances,
		"HotlistEntries":       c.HotlistSize,
		"AccessTypes":          access,
		"UnitBytes":            units,
		"DownSamplingFactors":  ds,
		"Modes":                modes,
		"MinEpochMilliseconds": epochMS(c.MinEpoch),
		"MaxEpochMilliseconds": epochMS(c.MaxEpoch),
		"RangeBytes":           hmu.RangeGranule,
		"RangeCount":           c.BitmapBits(),
		"RandomDownSampling":   c.RandomDS,
		"OverflowInterrupt":    c.OverflowIRQ,
		"LevelInterrupt":       c.LevelIRQ,
	}
}

type telemetryPatch struct {
	Oem *struct {
		CxlPool *struct {
			CHMU *chmuPatch `json:"CHMU"`
		} `json:"CxlPool"`
	} `json:"Oem"`
	ServiceEnabled *bool  `json:"ServiceEnabled" rf:"readonly"`
	ID             string `json:"Id" rf:"readonly"`
	Name           string `json:"Name" rf:"readonly"`
}

type chmuPatch struct {
	Enabled            *bool    `json:"Enabled"`
	AccessType         *string  `json:"AccessType" enum:"NonTEERead|NonTEEWrite|NonTEEReadWrite|Read|Write|ReadWrite"`
	UnitBytes          *uint64  `json:"UnitBytes"`
	Threshold          *uint32  `json:"Threshold"`
	Mode               *string  `json:"Mode" enum:"Epoch|AlwaysOn"`
	EpochMilliseconds  *float64 `json:"EpochMilliseconds"`
	DownSamplingFactor *uint64  `json:"DownSamplingFactor"`
	RandomDownSampling *bool    `json:"RandomDownSampling"`
	OverflowInterrupt  *bool    `json:"OverflowInterrupt"`
	LevelInterrupt     *bool    `json:"LevelInterrupt"`
	FillThreshold      *uint16  `json:"FillThreshold"`
	// Ranges: null tracks every range, a list tracks those 256 MiB ranges.
	Ranges json.RawMessage `json:"Ranges" rf:"nullable"`
}

// chmuEdit is one property of a PATCH: its path, value and effect.
type chmuEdit struct {
	prop  string
	value string
	apply func(*hmu.Config) *redfish.Error
}

// edits turns a CHMU patch into its property edits, in a fixed order.
func (p *chmuPatch) edits() []chmuEdit {
	const base = "Oem/CxlPool/CHMU/"
	var out []chmuEdit
	add := func(prop string, v any, f func(*hmu.Config) *redfish.Error) {
		out = append(out, chmuEdit{prop: base + prop, value: redfish.ValueText(v), apply: f})
	}
	if v := p.AccessType; v != nil {
		add("AccessType", *v, func(c *hmu.Config) *redfish.Error {
			for _, t := range accessTypes {
				if t.name == *v {
					c.Access = t.a
				}
			}
			return nil
		})
	}
	if v := p.UnitBytes; v != nil {
		add("UnitBytes", *v, func(c *hmu.Config) *redfish.Error { c.UnitSize = *v; return nil })
	}
	if v := p.Threshold; v != nil {
		add("Threshold", *v, func(c *hmu.Config) *redfish.Error {
			if *v == 0 {
				return redfish.ErrPropertyValueOutOfRange("0", base+"Threshold")
			}
			c.Threshold = *v
			return nil
		})
	}
	if v := p.Mode; v != nil {
		add("Mode", *v, func(c *hmu.Config) *redfish.Error {
			c.Mode = hmu.ModeEpoch
			if *v == "AlwaysOn" {
				c.Mode = hmu.ModeAlwaysOn
			}
			return nil
		})
	}
	if v := p.EpochMilliseconds; v != nil {
		add("EpochMilliseconds", *v, func(c *hmu.Config) *redfish.Error {
			e, ok := epochOf(*v)
			if !ok {
				return redfish.ErrPropertyValueOutOfRange(redfish.ValueText(*v), base+"EpochMilliseconds")
			}
			c.Epoch = e
			return nil
		})
	}
	if v := p.DownSamplingFactor; v != nil {
		add("DownSamplingFactor", *v, func(c *hmu.Config) *redfish.Error {
			if *v == 0 || bits.OnesCount64(*v) != 1 || *v > 1<<15 {
				return redfish.ErrPropertyValueNotInList(redfish.ValueText(*v), base+"DownSamplingFactor")
			}
			c.DSFactor = uint8(bits.TrailingZeros64(*v))
			return nil
		})
	}
	if v := p.RandomDownSampling; v != nil {
		add("RandomDownSampling", *v, func(c *hmu.Config) *redfish.Error { c.RandomDS = *v; return nil })
	}
	if v := p.OverflowInterrupt; v != nil {
		add("OverflowInterrupt", *v, func(c *hmu.Config) *redfish.Error { c.OverflowIRQ = *v; return nil })
	}
	if v := p.LevelInterrupt; v != nil {
		add("LevelInterrupt", *v, func(c *hmu.Config) *redfish.Error { c.LevelIRQ = *v; return nil })
	}
	if v := p.FillThreshold; v != nil {
		add("FillThreshold", *v, func(c *hmu.Config) *redfish.Error { c.FillThreshold = *v; return nil })
	}
	if p.Ranges != nil {
		add("Ranges", string(p.Ranges), func(c *hmu.Config) *redfish.Error {
			var rs []uint64
			if err := json.Unmarshal(p.Ranges, &rs); err != nil {
				return redfish.ErrPropertyValueType(string(p.Ranges), base+"Ranges")
			}
			c.Ranges = rs // nil for null: every range
			if c.Ranges == nil && string(p.Ranges) != "null" {
				c.Ranges = []uint64{}
			}
			return nil
		})
	}
	return out
}

// epochOf expresses ms as a CHMU epoch (a multiplier of 1–4095 of
// 100 µs, 1 ms, 10 ms, 100 ms or 1 s), preferring the finest scale.
func epochOf(ms float64) (hmu.Epoch, bool) {
	if !(ms > 0) || ms > 4095*1000 {
		return hmu.Epoch{}, false
	}
	ns := math.Round(ms * 1e6)
	for scale := uint8(1); scale <= 5; scale++ {
		unit := float64(hmu.Epoch{Scale: scale, Multiplier: 1}.Duration())
		if m := ns / unit; m == math.Trunc(m) && m >= 1 && m <= 4095 {
			return hmu.Epoch{Scale: scale, Multiplier: uint16(m)}, true
		}
	}
	return hmu.Epoch{}, false
}

func (t *telemetryAPI) patchService(c echo.Context) error {
	if t.tel == nil {
		return errTelemetryDisabled()
	}
	var req telemetryPatch
	if err := t.s.Decode(c, &req); err != nil {
		return err
	}
	p := redfish.PrincipalOf(c)
	if err := t.s.IfMatch(c, t.service(p)); err != nil {
		return err
	}
	if req.Oem == nil || req.Oem.CxlPool == nil || req.Oem.CxlPool.CHMU == nil {
		return t.s.WriteResource(c, http.StatusOK, t.service(p))
	}
	patch := req.Oem.CxlPool.CHMU
	cur, enabled, err := t.tel.CHMUConfig()
	if err != nil {
		return redfish.ErrInternal(err)
	}
	if patch.Enabled != nil {
		enabled = *patch.Enabled
	}
	edits := patch.edits()
	// Each change alone must suit the device, so a refusal names the
	// property; then all of them together.
	next := cur
	for _, e := range edits {
		one := cur
		if err := e.apply(&one); err != nil {
			return err
		}
		if err := t.tel.ValidateCHMU(one); err != nil {
			return redfish.ErrPropertyValueNotInList(e.value, e.prop).WithCause(err)
		}
		_ = e.apply(&next)
	}
	if err := t.tel.ValidateCHMU(next); err != nil {
		return redfish.ErrPropertyValueConflict(edits[0].prop, edits[len(edits)-1].prop).WithCause(err)
	}
	if err := t.tel.SetCHMU(c.Request().Context(), next, enabled); err != nil {
		if errors.Is(err, hmu.ErrUnsupported) {
			return redfish.NewError(http.StatusBadRequest, redfish.M("Base.GeneralError")).WithCause(err)
		}
		return redfish.ErrInternal(err)
	}
	t.s.Publish(redfish.Event{MessageKey: redfish.MsgResourceChanged, Origin: telemetryServiceURI})
	return t.s.WriteResource(c, http.StatusOK, t.service(p))
}
