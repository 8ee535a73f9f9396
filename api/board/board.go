package board

import (
	"context"
	"regexp"
	"strconv"
	"strings"
	"time"

	"cxlpool/api/internal/pool"
	"cxlpool/api/redfish"
	"cxlpool/bmc"
	"cxlpool/bmc/policy"
	"cxlpool/dcd"
)

// Board management: the Chassis's environmental resources
// (ThermalSubsystem, PowerSubsystem, Sensors: thermal.go, power.go,
// sensors.go), its identify LED and the power of each host's head
// (api/capacity's headpower.go) are views of the board controller, which the appliance
// reaches over PLDM on the device link and drives through its policy loop.
// They are served only when Config.Board is set; a board controller that
// does not answer (a device without one, a controller restarting) makes
// them answer 503 with a message that says so, while the management
// computer's own sensors stay readable.
//
// Alarms of the policy loop (threshold crossings, failed fans, lost PSUs,
// head power changes, a stalled loop) are published as events: they reach
// the EventLog, SSE streams and push subscriptions with the ResourceEvent
// message the loop chose, their OriginOfCondition pointing at the sensor,
// fan, PSU or system concerned. Head power events are scoped to that
// head's host.

// Board is what the service needs of board management;
// appliance.Board implements it.
type Board interface {
	Sensors(ctx context.Context) ([]bmc.Sensor, error)
	Sensor(ctx context.Context, id string) (bmc.Sensor, error)
	Fans(ctx context.Context) ([]bmc.Fan, error)
	PowerSupplies(ctx context.Context) ([]bmc.PowerSupply, error)
	HeadPower(ctx context.Context) ([]bmc.HeadPower, error)
	Identify(ctx context.Context) (bool, error)
	SetIdentify(ctx context.Context, on bool) error
	// ResetHead powers a head on, off or through a cycle, fencing its
	// host's capacity before any power cut.
	bmc.HeadResetter
	// ManagerSensors are the management computer's own sensors (hwmon).
	ManagerSensors(ctx context.Context) ([]bmc.Sensor, error)
	// SubscribeAlarms delivers the policy loop's alarms until cancel.
	SubscribeAlarms(buf int) (<-chan policy.LogEntry, func())
}

// URIs of the board resources.
const (
	ThermalSubsystemURI = pool.ChassisURI + "/ThermalSubsystem"
	FansURI             = ThermalSubsystemURI + "/Fans"
	ThermalMetricsURI   = ThermalSubsystemURI + "/ThermalMetrics"
	PowerSubsystemURI   = pool.ChassisURI + "/PowerSubsystem"
	PowerSuppliesURI    = PowerSubsystemURI + "/PowerSupplies"
	SensorsURI          = pool.ChassisURI + "/Sensors"
)

// boardTimeout bounds the board reads made for resources built without
// a request context (the Chassis's LED state).
const boardTimeout = 3 * time.Second

func (s *Server) boardRoutes() {
	b := s.cfg.Board
	s.thermalRoutes(b)
	s.powerRoutes(b)
	s.sensorRoutes(b)
}

// FeedAlarms publishes the policy loop's alarms until the service closes.
func (s *Server) FeedAlarms() {
	b := s.cfg.Board
	ch, cancel := b.SubscribeAlarms(256)
	pool.Feed(s.ctx, s.bg, ch, cancel, func(e policy.LogEntry) { s.Publish(alarmEvent(e)) })
}

// alarmEvent turns a policy log entry into a service event. Its registry
// message ("ResourceEvent.1.4.ResourceWarningThresholdExceeded") loses
// its version: the service resolves it against the registry it carries.
func alarmEvent(e policy.LogEntry) redfish.Event {
	key := e.MessageID
	if parts := strings.Split(key, "."); len(parts) > 2 {
		key = parts[0] + "." + parts[len(parts)-1]
	}
	origin, host := boardOrigin(e.Origin)
	return redfish.Event{MessageKey: key, Args: e.Args, Origin: origin, Host: host}
}

var (
	fanIDRE    = regexp.MustCompile(`^Fan\d+$`)
	psuIDRE    = regexp.MustCompile(`^PSU\d+$`)
	headIDRE   = regexp.MustCompile(`^Head(\d+)$`)
	sensorIDRE = regexp.MustCompile(`^[A-Za-z0-9_]+$`)
)

// boardOrigin maps the board item an alarm is about to the resource that
// shows it, and to the host it concerns (a head's).
func boardOrigin(item string) (string, *redfish.HostID) {
	switch {
	case item == "PolicyLoop":
		return pool.ManagerURI, nil
	case fanIDRE.MatchString(item):
		return FansURI + "/" + item, nil
	case psuIDRE.MatchString(item):
		return PowerSuppliesURI + "/" + item, nil
	}
	if m := headIDRE.FindStringSubmatch(item); m != nil {
		if n, err := strconv.Atoi(m[1]); err == nil && n <= 0xFFFF {
			h := dcd.HostID(n)
			return pool.SystemURI(h), pool.HostRef(h)
		}
	}
	if item != "" && item != "BoardController" && sensorIDRE.MatchString(item) {
		return SensorsURI + "/" + item, nil
	}
	return pool.ChassisURI, nil
}

// boardStatus is a Status of a board item.
func boardStatus(state bmc.State, health bmc.Health) redfish.Obj {
	if state == "" {
		state = bmc.Enabled
	}
	if health == "" {
		health = bmc.OK
	}
	return redfish.Obj{"State": string(state), "Health": string(health)}
}

// worse returns the more severe of two healths.
func worse(a, b bmc.Health) bmc.Health {
	rank := func(h bmc.Health) int {
		switch h {
		case bmc.Warning:
			return 1
		case bmc.Critical:
			return 2
		}
		return 0
	}
	if rank(b) > rank(a) {
		return b
	}
	return a
}

// readingOrNull is a reading, or JSON null when the sensor gave none.
func readingOrNull(v float64, valid bool) any {
	if !valid {
		return nil
	}
	return v
}

// HTTPContext bounds a board read made outside a request.
func HTTPContext() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), boardTimeout)
}
