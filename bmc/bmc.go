// Package bmc is the board-management domain of the memory box: the
// sensors, fans, power supplies, per-head power and identify LED that the
// board controller exposes, the events it raises, and the BoardController
// interface through which the management API and the policy loop use them.
//
// The package holds types and contracts only. bmc/pldm implements
// BoardController over PLDM on the device link; sim/board simulates the
// controller; bmc/policy runs fan control, alarms, the daemon watchdog and
// safe head power cycles on top of it; bmc/hwmon reads the management
// computer's own sensors; bmc/usblink carries the device link over a USB
// serial bridge. Names of readings, units and contexts follow the Redfish
// Sensor, Fan and PowerSupply schemas so the API can copy them through.
package bmc

import (
	"context"
	"errors"
	"time"
)

// Domain errors. Implementations wrap them; the API maps each to one
// Redfish message.
var (
	// ErrNotFound: no sensor, fan, PSU or head with that ID.
	ErrNotFound = errors.New("bmc: not found")
	// ErrUnavailable: the item exists but cannot be read or driven now
	// (a sensor that stopped answering, a failed fan, a lost PSU, the
	// board controller not reachable).
	ErrUnavailable = errors.New("bmc: unavailable")
	// ErrInvalid: a request value is out of range or not supported.
	ErrInvalid = errors.New("bmc: invalid request")
	// ErrUnsupported: the board has no such capability.
	ErrUnsupported = errors.New("bmc: not supported")
	// ErrBusy: the item is in a transition (e.g. a head power cycle is
	// already running).
	ErrBusy = errors.New("bmc: busy")
)

// ReadingType is the kind of quantity a sensor measures (Redfish
// Sensor.ReadingType).
type ReadingType string

// Reading types used by the board.
const (
	Temperature ReadingType = "Temperature"
	Rotational  ReadingType = "Rotational"
	Voltage     ReadingType = "Voltage"
	Current     ReadingType = "Current"
	Power       ReadingType = "Power"
	Percent     ReadingType = "Percent"
)

// Units returns the UCUM unit Redfish uses for t (Sensor.ReadingUnits).
func (t ReadingType) Units() string {
	switch t {
	case Temperature:
		return "Cel"
	case Rotational:
		return "{rev}/min"
	case Voltage:
		return "V"
	case Current:
		return "A"
	case Power:
		return "W"
	case Percent:
		return "%"
	}
	return ""
}

// Health is the Redfish Status.Health of an item.
type Health string

// Health values.
const (
	OK       Health = "OK"
	Warning  Health = "Warning"
	Critical Health = "Critical"
)

// State is the Redfish Status.State of an item.
type State string

// States used by the board.
const (
	Enabled            State = "Enabled"
	Absent             State = "Absent"
	UnavailableOffline State = "UnavailableOffline"
)

// Level is which threshold a reading is beyond, if any.
type Level string

// Threshold levels in increasing severity. LevelNormal means within all
// thresholds.
const (
	LevelNormal        Level = ""
	LevelUpperCaution  Level = "UpperCaution"
	LevelUpperCritical Level = "UpperCritical"
	LevelUpperFatal    Level = "UpperFatal"
	LevelLowerCaution  Level = "LowerCaution"
	LevelLowerCritical Level = "LowerCritical"
	LevelLowerFatal    Level = "LowerFatal"
)

// Health maps a level to the health it implies: caution → Warning,
// critical and fatal → Critical.
func (l Level) Health() Health {
	switch l {
	case LevelNormal:
		return OK
	case LevelUpperCaution, LevelLowerCaution:
		return Warning
	}
	return Critical
}

// Thresholds are a sensor's limits in reading units (Redfish
// Sensor.Thresholds). A nil pointer means "no such threshold".
type Thresholds struct {
	UpperCaution  *float64
	UpperCritical *float64
	UpperFatal    *float64
	LowerCaution  *float64
	LowerCritical *float64
	LowerFatal    *float64
	// Hysteresis is how far a reading must come back inside a threshold
	// before the level is cleared (0 = none).
	Hysteresis float64
}

// Classify returns the most severe level v is at or beyond, ignoring
// hysteresis.
func (t Thresholds) Classify(v float64) Level {
	switch {
	case t.UpperFatal != nil && v >= *t.UpperFatal:
		return LevelUpperFatal
	case t.LowerFatal != nil && v <= *t.LowerFatal:
		return LevelLowerFatal
	case t.UpperCritical != nil && v >= *t.UpperCritical:
		return LevelUpperCritical
	case t.LowerCritical != nil && v <= *t.LowerCritical:
		return LevelLowerCritical
	case t.UpperCaution != nil && v >= *t.UpperCaution:
		return LevelUpperCaution
	case t.LowerCaution != nil && v <= *t.LowerCaution:
		return LevelLowerCaution
	}
	return LevelNormal
}

// Sensor is one numeric sensor with its latest reading.
type Sensor struct {
	ID              string // stable, URI-safe (e.g. "InletTemp")
	Name            string // human-readable (e.g. "Inlet Temp")
	ReadingType     ReadingType
	PhysicalContext string // Redfish PhysicalContext: Intake, Exhaust, Memory, Fan, PowerSupply…
	Reading         float64
	// Valid is false when the sensor did not answer or reports itself
	// unavailable; Reading then holds the last good value (or 0).
	Valid      bool
	Level      Level // present threshold level as the sensor reports it
	Thresholds Thresholds
	// ReadingRangeMin/Max are what the sensor can report at all.
	ReadingRangeMin, ReadingRangeMax float64
	Health                           Health
	State                            State
	Updated                          time.Time // when Reading was taken
}

// Fan is one fan: its speed sensor and its duty-cycle control.
type Fan struct {
	ID          string // e.g. "Fan1"
	Name        string
	SpeedRPM    float64
	SpeedValid  bool
	DutyPercent float64 // last commanded duty, 0–100
	SensorID    string  // the Sensor carrying SpeedRPM
	Health      Health
	State       State
}

// PowerSupply is one PSU with its input and output readings.
type PowerSupply struct {
	ID           string // e.g. "PSU1"
	Name         string
	InputWatts   float64
	OutputWatts  float64
	InputVolts   float64
	OutputVolts  float64
	SensorIDs    []string // the Sensors behind the readings
	Health       Health
	State        State // Absent when the PSU is lost or unplugged
	ReadingValid bool
}

// PowerState is a head's power state.
type PowerState string

// Power states (Redfish PowerState).
const (
	PowerOn  PowerState = "On"
	PowerOff PowerState = "Off"
)

// ResetType is a Redfish ResetType accepted for a head or the chassis.
type ResetType string

// Reset types the board supports. ForceRestart and PowerCycle both mean
// "off, then on".
const (
	ResetOn           ResetType = "On"
	ResetForceOff     ResetType = "ForceOff"
	ResetForceRestart ResetType = "ForceRestart"
	ResetPowerCycle   ResetType = "PowerCycle"
)

// HeadPower is the power state of one host head.
type HeadPower struct {
	Host  int // LD-ID / Host ID, 0-based
	State PowerState
}

// EventKind says what happened.
type EventKind string

// Event kinds.
const (
	// EventThreshold: a numeric sensor crossed into Level from
	// PreviousLevel (either direction).
	EventThreshold EventKind = "Threshold"
	// EventSensorState: a sensor stopped or resumed answering, or a state
	// sensor (PSU health, head power) changed.
	EventSensorState EventKind = "SensorState"
	// EventFanFailed and EventPSULost/EventPSURestored summarise faults.
	EventFanFailed    EventKind = "FanFailed"
	EventPSULost      EventKind = "PSULost"
	EventPSURestored  EventKind = "PSURestored"
	EventHeadPower    EventKind = "HeadPower"
	EventControllerUp EventKind = "ControllerUp"
	// EventControllerDown: the board controller stopped answering.
	EventControllerDown EventKind = "ControllerDown"
)

// Event is something the board reported or the daemon observed about it.
type Event struct {
	Time          time.Time
	Kind          EventKind
	SensorID      string // the sensor or item concerned, when there is one
	Level         Level
	PreviousLevel Level
	Reading       float64
	Health        Health
	PowerState    PowerState // EventHeadPower: the head's new state
	Message       string     // one human-readable line
}

// BoardController is the board as the API and the policy loop see it.
// Every method is safe for concurrent use. Reads may be served from a
// cache no older than the implementation's refresh interval.
type BoardController interface {
	// Sensors returns every numeric sensor, ordered by ID.
	Sensors(ctx context.Context) ([]Sensor, error)
	// Sensor returns one sensor; ErrNotFound if there is none.
	Sensor(ctx context.Context, id string) (Sensor, error)
	// Fans returns every fan, ordered by ID.
	Fans(ctx context.Context) ([]Fan, error)
	// SetFanDuty commands a fan's duty cycle (0–100 %). ErrInvalid out of
	// range; ErrNotFound for an unknown fan.
	SetFanDuty(ctx context.Context, fanID string, percent float64) error
	// PowerSupplies returns every PSU, ordered by ID.
	PowerSupplies(ctx context.Context) ([]PowerSupply, error)
	// HeadPower returns the power state of every host head, by host.
	HeadPower(ctx context.Context) ([]HeadPower, error)
	// SetHeadPower switches one head on or off at once. It does not fence
	// the head's capacity: callers that cut power to a head holding grants
	// go through bmc/policy (Loop.ResetHead), which does.
	SetHeadPower(ctx context.Context, host int, s PowerState) error
	// Identify returns whether the identify LED is lit.
	Identify(ctx context.Context) (bool, error)
	// SetIdentify lights or clears the identify LED.
	SetIdentify(ctx context.Context, on bool) error
	// Events delivers board events. The channel is shared by all callers
	// (one consumer: the policy loop, which fans them out); it is closed
	// when the controller is closed.
	Events() <-chan Event
}

// HeadResetter resets a host head safely (fencing its capacity first).
// bmc/policy's Loop implements it; the API's #Chassis.Reset handlers call
// it.
type HeadResetter interface {
	ResetHead(ctx context.Context, host int, t ResetType) error
}
