package api_test

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"cxlpool/api/apitest"
	"cxlpool/appliance"
	"cxlpool/dcd"
	"cxlpool/sim"
)

const (
	thermalURI = "/redfish/v1/Chassis/Pool/ThermalSubsystem"
	powerURI   = "/redfish/v1/Chassis/Pool/PowerSubsystem"
	sensorsURI = "/redfish/v1/Chassis/Pool/Sensors"
	eventLog   = "/redfish/v1/Managers/FM/LogServices/EventLog/Entries"
)

// boardEnv is a service whose virtual board runs on its own clock, so a
// test can let the physics run for minutes at once, with a fast policy
// loop and short power cycles.
func boardEnv(t *testing.T) (*apitest.Env, *apitest.Clock) {
	t.Helper()
	clock := apitest.NewClock(time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC))
	env := apitest.NewServer(t, apitest.Options{
		Sim: func(c *sim.Config) { c.Board.Clock = clock.Now },
		Board: func(c *appliance.BoardConfig) {
			c.PolicyInterval = 20 * time.Millisecond
			c.CycleOff = 100 * time.Millisecond
		},
	})
	return env, clock
}

// advanceBoard lets d pass on the board and has it send its events now.
func advanceBoard(t *testing.T, env *apitest.Env, clock *apitest.Clock, d time.Duration) {
	t.Helper()
	clock.Advance(d)
	if err := env.App.Box.Board().Poll(context.Background()); err != nil {
		t.Fatalf("board Poll: %v", err)
	}
}

// eventuallyOK polls cond (20 s at most).
func eventuallyOK(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// logged reports whether the EventLog has an entry with messageID whose
// OriginOfCondition is origin.
func logged(t *testing.T, env *apitest.Env, messageID, origin string) bool {
	t.Helper()
	log := env.Admin.GetOK(eventLog + "?$expand=.")
	for _, m := range log["Members"].([]any) {
		e := m.(map[string]any)
		if e["MessageId"] == messageID && get(e, "Links", "OriginOfCondition", "@odata.id") == origin {
			return true
		}
	}
	return false
}

func TestBoardResources(t *testing.T) {
	env := apitest.NewServer(t)
	ch := env.Admin.GetOK("/redfish/v1/Chassis/Pool")
	for _, prop := range []string{"ThermalSubsystem", "PowerSubsystem", "Sensors"} {
		if get(ch, prop, "@odata.id") == nil {
			t.Errorf("Chassis/Pool does not link %s", prop)
		}
	}
	if ch["LocationIndicatorActive"] != false {
		t.Errorf("Chassis LocationIndicatorActive = %v, want false", ch["LocationIndicatorActive"])
	}
	th := env.ReadOnly.GetOK(thermalURI)
	if get(th, "Status", "Health") != "OK" {
		t.Errorf("ThermalSubsystem health = %v, want OK", get(th, "Status", "Health"))
	}
	fans := members(t, env.Host0, thermalURI+"/Fans")
	if len(fans) != 4 {
		t.Fatalf("Fans: got %v, want 4", fans)
	}
	fan := env.Host0.GetOK(fans[0])
	if r, _ := get(fan, "SpeedPercent", "Reading").(float64); r < 20 || r > 100 {
		t.Errorf("Fan1 SpeedPercent.Reading = %v, want a duty", r)
	}
	if rpm, _ := get(fan, "SpeedPercent", "SpeedRPM").(float64); rpm <= 0 {
		t.Errorf("Fan1 SpeedRPM = %v, want it turning", rpm)
	}
	tm := env.Admin.GetOK(thermalURI + "/ThermalMetrics")
	var sources []string
	for _, r := range tm["TemperatureReadingsCelsius"].([]any) {
		sources = append(sources, r.(map[string]any)["DataSourceUri"].(string))
	}
	if !slices.Contains(sources, sensorsURI+"/InletTemp") || !slices.Contains(sources, sensorsURI+"/DIMMBank1Temp") {
		t.Errorf("ThermalMetrics sources %v lack the inlet or a DIMM bank", sources)
	}
	if get(tm, "TemperatureSummaryCelsius", "Intake", "Reading") != 25.0 {
		t.Errorf("intake summary = %v, want 25", get(tm, "TemperatureSummaryCelsius", "Intake"))
	}
	env.Admin.GetOK(powerURI)
	psus := members(t, env.Admin, powerURI+"/PowerSupplies")
	if len(psus) != 2 {
		t.Fatalf("PowerSupplies: got %v, want 2", psus)
	}
	psu := env.Admin.GetOK(psus[0])
	if psu["LineInputStatus"] != "Normal" {
		t.Errorf("PSU1 LineInputStatus = %v, want Normal", psu["LineInputStatus"])
	}
	m := env.Admin.GetOK(get(psu, "Metrics", "@odata.id").(string))
	for _, prop := range []string{"InputPowerWatts", "OutputPowerWatts", "InputVoltage"} {
		if v, _ := get(m, prop, "Reading").(float64); v <= 0 {
			t.Errorf("PSU1 Metrics %s = %v, want a reading", prop, get(m, prop))
		}
		if src, _ := get(m, prop, "DataSourceUri").(string); !strings.HasPrefix(src, sensorsURI+"/PSU1") {
			t.Errorf("PSU1 Metrics %s source %q, want a PSU1 sensor", prop, src)
		}
	}
	all := members(t, env.Admin, sensorsURI)
	for _, want := range []string{"InletTemp", "Fan1Speed", "PSU2OutputVoltage", "Mgmt_coretemp_temp1", "Mgmt_acpitz_temp1"} {
		if !slices.Contains(all, sensorsURI+"/"+want) {
			t.Errorf("Sensors lack %s", want)
		}
	}
	s := env.Admin.GetOK(sensorsURI + "/DIMMBank1Temp")
	for prop, want := range map[string]float64{"UpperCaution": 75, "UpperCritical": 85, "UpperFatal": 95} {
		if got := get(s, "Thresholds", prop, "Reading"); got != want {
			t.Errorf("DIMMBank1Temp %s = %v, want %v", prop, got, want)
		}
	}
	if s["ReadingUnits"] != "Cel" || s["ReadingType"] != "Temperature" {
		t.Errorf("DIMMBank1Temp units %v type %v, want Cel Temperature", s["ReadingUnits"], s["ReadingType"])
	}
	if get(env.Admin.GetOK(sensorsURI+"/Fan1Speed"), "RelatedItem") == nil {
		t.Error("Fan1Speed does not link its fan")
	}
	mg := env.Admin.GetOK(sensorsURI + "/Mgmt_coretemp_temp1")
	if mg["PhysicalContext"] != "CPU" || get(mg, "Thresholds", "UpperCritical", "Reading") != 100.0 {
		t.Errorf("management sensor: %v", mg)
	}
	sys := env.Admin.GetOK("/redfish/v1/Systems/Host3")
	if sys["PowerState"] != "On" || get(sys, "Actions", "#ComputerSystem.Reset", "target") != "/redfish/v1/Systems/Host3/Actions/ComputerSystem.Reset" {
		t.Errorf("Host3 power: PowerState %v, Actions %v", sys["PowerState"], sys["Actions"])
	}
}

func TestBoardGolden(t *testing.T) {
	env := apitest.NewServer(t)
	checkGolden(t, "thermalsubsystem", thermalURI, env.Admin.GetOK(thermalURI))
	s := env.Admin.GetOK(sensorsURI + "/InletTemp")
	if _, ok := s["ReadingTime"]; !ok {
		t.Error("InletTemp has no ReadingTime")
	}
	s["ReadingTime"] = "<ReadingTime>" // the board controller's wall clock
	checkGolden(t, "sensor-inlettemp", sensorsURI+"/InletTemp", s)
}

func TestBoardIdentifyLED(t *testing.T) {
	env := apitest.NewServer(t)
	r := env.Operator.Patch("/redfish/v1/Chassis/Pool", map[string]any{"LocationIndicatorActive": true})
	if r.Status != http.StatusOK {
		t.Fatalf("PATCH LocationIndicatorActive: got %s, want 200", r)
	}
	apitest.Validate(t, r.Body)
	if got := r.JSON(t)["LocationIndicatorActive"]; got != true {
		t.Errorf("PATCH answer LocationIndicatorActive = %v, want true", got)
	}
	if !env.App.Box.Board().Snapshot().Identify {
		t.Error("the board's identify LED is not lit")
	}
	if got := env.ReadOnly.GetOK("/redfish/v1/Chassis/Pool")["LocationIndicatorActive"]; got != true {
		t.Errorf("GET LocationIndicatorActive = %v, want true", got)
	}
	wantStatus(t, "stale If-Match", env.Admin.Patch("/redfish/v1/Chassis/Pool", map[string]any{"LocationIndicatorActive": false},
		"If-Match", `W/"stale"`), http.StatusPreconditionFailed, "PreconditionFailed")
	wantStatus(t, "read-only property", env.Admin.Patch("/redfish/v1/Chassis/Pool", map[string]any{"PowerState": "Off"}),
		http.StatusBadRequest, "PropertyNotWritable")
	if r := env.Admin.Patch("/redfish/v1/Chassis/Pool", map[string]any{"LocationIndicatorActive": false}); r.Status != http.StatusOK {
		t.Errorf("PATCH off: got %s", r)
	}
	if env.App.Box.Board().Snapshot().Identify {
		t.Error("the board's identify LED is still lit")
	}
}

// A lost PSU shows on its resource and in the EventLog.
func TestBoardLostPSU(t *testing.T) {
	env, clock := boardEnv(t)
	if err := env.App.Box.Board().LosePSU(1, true); err != nil {
		t.Fatal(err)
	}
	advanceBoard(t, env, clock, time.Second)
	psu := powerURI + "/PowerSupplies/PSU2"
	eventuallyOK(t, "PSU2 lost in the EventLog", func() bool {
		return logged(t, env, "ResourceEvent.1.4.ResourceStatusChangedCritical", psu)
	})
	p := env.Admin.GetOK(psu)
	if p["LineInputStatus"] != "LossOfInput" || get(p, "Status", "Health") != "Critical" || get(p, "Status", "State") != "UnavailableOffline" {
		t.Errorf("lost PSU2: LineInputStatus %v, Status %v", p["LineInputStatus"], p["Status"])
	}
	if h := get(env.Admin.GetOK(powerURI), "Status", "Health"); h != "Critical" {
		t.Errorf("PowerSubsystem health = %v, want Critical", h)
	}
}

// TestBoardEndToEnd drives the virtual board's physics and a head power
// cycle through the API: load in a hot room heats the DIMMs past their
// caution threshold, the policy loop raises the fans and the alarm
// reaches the EventLog and SSE; a failed fan raises its own alarms; power-cycling
// Host3 takes its capacity back (sanitized) before the power is cut, its
// link goes down and up, and it can be given capacity again.
func TestBoardEndToEnd(t *testing.T) {
	env, clock := boardEnv(t)
	events := sse(t, env, env.Admin)
	board := env.App.Box.Board()

	// A hot room and full load: an hour of it at once, with the fans
	// where the loop left them, takes the DIMMs past their caution
	// threshold (75 °C).
	fan1 := thermalURI + "/Fans/Fan1"
	before, _ := get(env.Admin.GetOK(fan1), "SpeedPercent", "Reading").(float64)
	board.SetAmbient(38)
	board.SetLoad(1)
	advanceBoard(t, env, clock, time.Hour)
	bank := sensorsURI + "/DIMMBank1Temp"
	eventuallyOK(t, "the DIMM threshold alarm in the EventLog", func() bool {
		return logged(t, env, "ResourceEvent.1.4.ResourceWarningThresholdExceeded", bank) ||
			logged(t, env, "ResourceEvent.1.4.ResourceErrorThresholdExceeded", bank)
	})
	eventuallyOK(t, "the fans raised", func() bool {
		now, _ := get(env.Admin.GetOK(fan1), "SpeedPercent", "Reading").(float64)
		return now > before && now >= 75
	})
	waitSSE(t, events, func(rec map[string]any) bool {
		id, _ := rec["MessageId"].(string)
		return strings.Contains(id, "ThresholdExceeded") && get(rec, "OriginOfCondition", "@odata.id") == bank
	})

	// A failed fan.
	if err := board.FailFan(0, true); err != nil {
		t.Fatal(err)
	}
	advanceBoard(t, env, clock, time.Minute)
	eventuallyOK(t, "the fan alarms in the EventLog", func() bool {
		return logged(t, env, "ResourceEvent.1.4.ResourceErrorThresholdExceeded", sensorsURI+"/Fan1Speed") &&
			logged(t, env, "ResourceEvent.1.4.ResourceStatusChangedCritical", fan1)
	})
	if h := get(env.Admin.GetOK(fan1), "Status", "Health"); h != "Critical" {
		t.Errorf("failed Fan1 health = %v, want Critical", h)
	}
	if h := get(env.Admin.GetOK(thermalURI), "Status", "Health"); h != "Critical" {
		t.Errorf("ThermalSubsystem health with a failed fan = %v, want Critical", h)
	}

	// Power-cycle Host3 while it holds capacity.
	chunk := reserve(t, env.Admin, 4*blockMiB, nil)
	conn := connect(t, env.Admin, chunk, 3)
	grants, err := env.App.Ledger.Grants(t.Context(), dcd.GrantFilter{Active: true})
	if err != nil || len(grants) != 1 {
		t.Fatalf("active grants: %v, %v", grants, err)
	}
	secretDPA := grants[0].Extents[0].DPA
	if _, err := env.App.Box.Host(3).WriteAt([]byte("host-3 secret"), secretDPA); err != nil {
		t.Fatal(err)
	}
	r := env.Operator.Post(systemURI(3)+"/Actions/ComputerSystem.Reset", map[string]any{"ResetType": "PowerCycle"})
	if r.Status != http.StatusAccepted {
		t.Fatalf("reset Host3: got %s, want 202", r)
	}
	apitest.Validate(t, r.Body)
	if f := waitTask(t, env.Operator, r.Header.Get("Location")); f.Status != http.StatusNoContent {
		t.Fatalf("reset task ended %s, want 204", f)
	}
	g, err := env.App.Ledger.Grant(t.Context(), grants[0].ID)
	if err != nil || g.State != dcd.GrantReleased || !strings.Contains(g.Reason, "power cycle of head 3") {
		t.Errorf("Host3's grant after the cycle: %s %q, %v; want released for the power cycle", g.State, g.Reason, err)
	}
	wantStatus(t, "connection after the cycle", env.Admin.Get(conn), http.StatusNotFound, "ResourceNotFound")
	for _, want := range []struct{ id, origin string }{
		{"ResourceEvent.1.4.ResourcePoweredOff", systemURI(3)},
		{"ResourceEvent.1.4.ResourcePoweredOn", systemURI(3)},
	} {
		eventuallyOK(t, want.id+" in the EventLog", func() bool { return logged(t, env, want.id, want.origin) })
	}
	eventuallyOK(t, "Host3's link down and up in the EventLog", func() bool {
		log := env.Admin.GetOK(eventLog + "?$expand=.")
		var states []string
		for _, m := range log["Members"].([]any) {
			e := m.(map[string]any)
			if get(e, "Links", "OriginOfCondition", "@odata.id") == systemURI(3) && e["MessageId"] == "ResourceEvent.1.4.ResourceStateChanged" {
				args, _ := e["MessageArgs"].([]any)
				states = append(states, args[len(args)-1].(string))
			}
		}
		fence := slices.Index(states, "fenced for a head power cycle")
		down := slices.Index(states, "link down")
		return fence >= 0 && down > fence && slices.Contains(states[down:], "link up")
	})
	eventuallyOK(t, "Host3 enabled and on", func() bool {
		s := env.Admin.GetOK(systemURI(3))
		return s["PowerState"] == "On" && get(s, "Status", "State") == "Enabled"
	})
	// Capacity works again, and what Host3 wrote is gone.
	conn2 := connect(t, env.Admin, chunk, 3)
	if conn2 == "" {
		t.Fatal("no connection after the power cycle")
	}
	buf := make([]byte, len("host-3 secret"))
	if _, err := env.App.Box.Host(3).ReadAt(buf, secretDPA); err == nil && string(buf) == "host-3 secret" {
		t.Error("Host3 reads its old data after the cycle: the release was not sanitized")
	}
}

// The reset action: a fenced host refuses grants while its head is off.
func TestBoardForceOffFencesHost(t *testing.T) {
	env, _ := boardEnv(t)
	r := env.Admin.Post(systemURI(2)+"/Actions/ComputerSystem.Reset", map[string]any{"ResetType": "ForceOff"})
	if r.Status != http.StatusAccepted {
		t.Fatalf("ForceOff Host2: got %s, want 202", r)
	}
	if f := waitTask(t, env.Admin, r.Header.Get("Location")); f.Status != http.StatusNoContent {
		t.Fatalf("ForceOff task ended %s, want 204", f)
	}
	if s := env.Admin.GetOK(systemURI(2)); s["PowerState"] != "Off" {
		t.Errorf("Host2 PowerState after ForceOff = %v, want Off", s["PowerState"])
	}
	chunk := reserve(t, env.Admin, 4*blockMiB, nil)
	if r := env.Admin.Post(connectionsURI, connectBody(chunk, 2)); r.Status != http.StatusConflict {
		t.Errorf("connect to a powered-off host: got %s, want 409", r)
	}
	r = env.Admin.Post(systemURI(2)+"/Actions/ComputerSystem.Reset", map[string]any{"ResetType": "On"})
	if f := waitTask(t, env.Admin, r.Header.Get("Location")); f.Status != http.StatusNoContent {
		t.Fatalf("On task ended %s, want 204", f)
	}
	eventuallyOK(t, "Host2's link up", func() bool {
		return get(env.Admin.GetOK(systemURI(2)), "Status", "State") == "Enabled"
	})
	connect(t, env.Admin, chunk, 2)
}

// waitSSE reads the stream until a record matches (20 s at most).
func waitSSE(t *testing.T, ch <-chan map[string]any, match func(map[string]any) bool) {
	t.Helper()
	timeout := time.After(20 * time.Second)
	for {
		select {
		case ev, ok := <-ch:
			if !ok {
				t.Fatal("SSE stream ended")
			}
			for _, r := range ev["Events"].([]any) {
				if match(r.(map[string]any)) {
					return
				}
			}
		case <-timeout:
			t.Fatal("no matching event on SSE within 20 s")
		}
	}
}

// A device without a board controller: the board's resources answer 503
// and say why; the management computer's sensors stay listed.
func TestBoardAbsent(t *testing.T) {
	env := apitest.NewServer(t, apitest.Options{
		Sim:   func(c *sim.Config) { c.Board.EID = 0x30 }, // nobody answers at EID 9
		Board: func(c *appliance.BoardConfig) { c.DiscoverTimeout = 200 * time.Millisecond },
	})
	for _, uri := range []string{thermalURI, thermalURI + "/Fans", powerURI, sensorsURI + "/InletTemp"} {
		r := env.Admin.Get(uri)
		wantStatus(t, "GET "+uri, r, http.StatusServiceUnavailable, "ServiceTemporarilyUnavailable")
		if r.Header.Get("Retry-After") == "" || !strings.Contains(string(r.Body), "board controller does not answer") {
			t.Errorf("GET %s without a board: got %s, want Retry-After and a message naming the board controller", uri, r)
		}
	}
	all := members(t, env.Admin, sensorsURI)
	if len(all) == 0 || slices.ContainsFunc(all, func(u string) bool { return !strings.HasPrefix(u, sensorsURI+"/Mgmt_") }) {
		t.Errorf("Sensors without a board: got %v, want the management computer's only", all)
	}
	if _, ok := env.Admin.GetOK("/redfish/v1/Chassis/Pool")["LocationIndicatorActive"]; ok {
		t.Error("Chassis shows LocationIndicatorActive without a board")
	}
	wantStatus(t, "PATCH LED", env.Admin.Patch("/redfish/v1/Chassis/Pool", map[string]any{"LocationIndicatorActive": true}),
		http.StatusServiceUnavailable, "ServiceTemporarilyUnavailable")
	wantStatus(t, "reset", env.Admin.Post(systemURI(0)+"/Actions/ComputerSystem.Reset", map[string]any{"ResetType": "PowerCycle"}),
		http.StatusServiceUnavailable, "ServiceTemporarilyUnavailable")
	if _, ok := env.Admin.GetOK(systemURI(0))["PowerState"]; ok {
		t.Error("Host0 shows a PowerState without a board")
	}
	// Capacity is unaffected.
	connect(t, env.Admin, reserve(t, env.Admin, 4*blockMiB, nil), 0)
}
