package pldm_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"cxlpool/bmc"
	"cxlpool/bmc/pldm"
	"cxlpool/fabric/mctp"
	"cxlpool/sim/board"
)

// The contract tests run the PLDM client and controller against the
// simulated board controller over an in-memory MCTP pipe: the daemon's
// endpoint (EID 0x10, event receiver) on one end, the board's (EID 9) on
// the other.

const daemonEID mctp.EID = 0x10

// clock is a settable clock shared by the board model and the controller.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func newClock() *clock { return &clock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

type rig struct {
	clk   *clock
	board *board.Board
	ep    *mctp.Endpoint
	cl    *pldm.Client
	ctrl  *pldm.Controller
}

func newRig(t *testing.T, bcfg board.Config, ccfg pldm.ClientConfig) *rig {
	t.Helper()
	r := &rig{clk: newClock()}
	bcfg.Clock = r.clk.Now
	bcfg.PollInterval = time.Hour // the tests poll explicitly
	b, err := board.New(bcfg)
	if err != nil {
		t.Fatalf("board.New: %v", err)
	}
	r.board = b
	ctx, cancel := context.WithCancel(context.Background())
	da, bo := mctp.Pipe()
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := b.Serve(ctx, bo); err != nil {
			t.Errorf("board Serve: %v", err)
		}
	})
	var ctrl *pldm.Controller
	r.ep = mctp.NewEndpoint(da, mctp.Config{EID: daemonEID}, func(ctx context.Context, src mctp.EID, typ mctp.MsgType, msg []byte) ([]byte, bool) {
		return ctrl.Handle(ctx, src, typ, msg)
	})
	r.cl = pldm.NewClient(r.ep, ccfg)
	ctrl = pldm.NewController(r.cl, pldm.ControllerConfig{ReceiverEID: daemonEID, Clock: r.clk.Now, ReadTimeout: 200 * time.Millisecond, EventBuffer: 256})
	r.ctrl = ctrl
	wg.Go(func() { _ = r.ep.Run(ctx) })
	t.Cleanup(func() {
		cancel()
		wg.Wait()
		ctrl.Close()
	})
	return r
}

func (r *rig) discover(t *testing.T) {
	t.Helper()
	if err := r.ctrl.Discover(context.Background()); err != nil {
		t.Fatalf("Discover: %v", err)
	}
	drain(r.ctrl.Events())
}

// drain returns the events queued now.
func drain(ch <-chan bmc.Event) []bmc.Event {
	var out []bmc.Event
	for {
		select {
		case ev := <-ch:
			out = append(out, ev)
		default:
			return out
		}
	}
}

// settle advances the clock by d in one-minute steps, polling the board
// each step (which sends its events), then refreshes the controller.
func (r *rig) settle(t *testing.T, d time.Duration) []bmc.Event {
	t.Helper()
	ctx := context.Background()
	for ; d > 0; d -= time.Minute {
		r.clk.Advance(min(d, time.Minute))
		if err := r.board.Poll(ctx); err != nil {
			t.Fatalf("board Poll: %v", err)
		}
	}
	if err := r.ctrl.Refresh(ctx); err != nil {
		t.Fatalf("Refresh: %v", err)
	}
	return drain(r.ctrl.Events())
}

func TestClientDiscovery(t *testing.T) {
	r := newRig(t, board.Config{TID: 0x0A}, pldm.ClientConfig{})
	ctx := context.Background()
	tid, err := r.cl.GetTID(ctx)
	if err != nil || tid != 0x0A {
		t.Fatalf("GetTID: got %d, %v, want 10", tid, err)
	}
	types, err := r.cl.GetTypes(ctx)
	if err != nil || !types.Has(pldm.TypeBase) || !types.Has(pldm.TypePlatform) || types.Has(pldm.TypeFRU) {
		t.Fatalf("GetTypes: got %x, %v, want base and platform only", types, err)
	}
	vers, err := r.cl.GetVersions(ctx, pldm.TypePlatform)
	if diff := cmp.Diff([]pldm.Ver32{pldm.Version120}, vers); err != nil || diff != "" {
		t.Fatalf("GetVersions: %v, mismatch (-want +got):\n%s", err, diff)
	}
	cmds, err := r.cl.GetCommands(ctx, pldm.TypePlatform, pldm.Version120)
	if err != nil {
		t.Fatalf("GetCommands: %v", err)
	}
	for _, c := range []pldm.Command{pldm.CmdGetPDR, pldm.CmdGetSensorReading, pldm.CmdSetStateEffecterStates, pldm.CmdSetEventReceiver} {
		if !cmds.Has(c) {
			t.Errorf("GetCommands: command %#02x missing", uint8(c))
		}
	}
	if cmds.Has(pldm.CmdPlatformEventMessage) {
		t.Errorf("GetCommands: the board claims PlatformEventMessage, which it sends rather than serves")
	}
	_, err = r.cl.GetVersions(ctx, pldm.TypeFRU)
	if !errors.Is(err, pldm.CCInvalidTypeInRequest) {
		t.Errorf("GetVersions(FRU): got %v, want %v", err, pldm.CCInvalidTypeInRequest)
	}
}

func TestRepositoryMultipart(t *testing.T) {
	ctx := context.Background()
	whole := newRig(t, board.Config{}, pldm.ClientConfig{PDRChunk: 1024})
	parts := newRig(t, board.Config{}, pldm.ClientConfig{PDRChunk: 16})
	info, err := whole.cl.RepositoryInfo(ctx)
	if err != nil {
		t.Fatalf("RepositoryInfo: %v", err)
	}
	a, err := whole.cl.ReadRepository(ctx)
	if err != nil {
		t.Fatalf("ReadRepository (whole records): %v", err)
	}
	b, err := parts.cl.ReadRepository(ctx)
	if err != nil {
		t.Fatalf("ReadRepository (16-byte parts): %v", err)
	}
	if len(a) != int(info.RecordCount) {
		t.Errorf("records: got %d, want RecordCount %d", len(a), info.RecordCount)
	}
	if diff := cmp.Diff(a, b); diff != "" {
		t.Errorf("multipart read differs from whole read (-whole +parts):\n%s", diff)
	}
	var size, largest uint32
	for _, p := range a {
		n := uint32(p.Header().DataLength) + pldm.PDRHeaderLen
		size += n
		largest = max(largest, n)
	}
	if size != info.RepositorySize || largest != info.LargestRecordSize {
		t.Errorf("repository size/largest: got %d/%d from records, info says %d/%d", size, largest, info.RepositorySize, info.LargestRecordSize)
	}
	// A stale change number on a later part is refused.
	first, err := parts.cl.GetPDR(ctx, pldm.GetPDRReq{RecordHandle: 1, Op: pldm.GetFirstPart, RequestCount: 16})
	if err != nil || first.Flag != pldm.PDRStart {
		t.Fatalf("GetPDR first part: got flag %d, %v, want Start", first.Flag, err)
	}
	_, err = parts.cl.GetPDR(ctx, pldm.GetPDRReq{RecordHandle: 1, TransferHandle: first.NextTransferHandle, Op: pldm.GetNextPart, RequestCount: 16, ChangeNumber: 99})
	if !errors.Is(err, pldm.CCInvalidRecordChange) {
		t.Errorf("GetPDR with stale change number: got %v, want %v", err, pldm.CCInvalidRecordChange)
	}
	_, err = parts.cl.GetPDR(ctx, pldm.GetPDRReq{RecordHandle: 9999, Op: pldm.GetFirstPart, RequestCount: 16})
	if !errors.Is(err, pldm.CCInvalidRecordHandle) {
		t.Errorf("GetPDR of unknown handle: got %v, want %v", err, pldm.CCInvalidRecordHandle)
	}
}

func TestControllerInventory(t *testing.T) {
	r := newRig(t, board.Config{Fans: 3, PSUs: 2, DIMMBanks: 2, Heads: 4}, pldm.ClientConfig{})
	r.discover(t)
	ctx := context.Background()
	sensors, err := r.ctrl.Sensors(ctx)
	if err != nil {
		t.Fatalf("Sensors: %v", err)
	}
	var ids []string
	for _, s := range sensors {
		ids = append(ids, s.ID)
		if !s.Valid || s.State != bmc.Enabled || s.Health != bmc.OK {
			t.Errorf("sensor %s: valid %v state %s health %s, want valid Enabled OK", s.ID, s.Valid, s.State, s.Health)
		}
	}
	want := []string{"DIMMBank1Temp", "DIMMBank2Temp", "Fan1Speed", "Fan2Speed", "Fan3Speed", "InletTemp",
		"MemoryControllerTemp", "OutletTemp",
		"PSU1InputPower", "PSU1InputVoltage", "PSU1OutputPower", "PSU1OutputVoltage",
		"PSU2InputPower", "PSU2InputVoltage", "PSU2OutputPower", "PSU2OutputVoltage"}
	if diff := cmp.Diff(want, ids); diff != "" {
		t.Fatalf("sensor IDs mismatch (-want +got):\n%s", diff)
	}
	inlet, err := r.ctrl.Sensor(ctx, "InletTemp")
	if err != nil {
		t.Fatalf("Sensor(InletTemp): %v", err)
	}
	uc, cr, fa := 35.0, 40.0, 45.0
	wantInlet := bmc.Sensor{ID: "InletTemp", Name: "Inlet Temp", ReadingType: bmc.Temperature, PhysicalContext: "Intake",
		Reading: 25, Valid: true, Thresholds: bmc.Thresholds{UpperCaution: &uc, UpperCritical: &cr, UpperFatal: &fa, Hysteresis: 1},
		ReadingRangeMin: -40, ReadingRangeMax: 125, Health: bmc.OK, State: bmc.Enabled, Updated: r.clk.Now()}
	if diff := cmp.Diff(wantInlet, inlet); diff != "" {
		t.Errorf("InletTemp mismatch (-want +got):\n%s", diff)
	}
	if _, err := r.ctrl.Sensor(ctx, "Nope"); !errors.Is(err, bmc.ErrNotFound) {
		t.Errorf("Sensor(Nope): got %v, want ErrNotFound", err)
	}
	fans, err := r.ctrl.Fans(ctx)
	if err != nil || len(fans) != 3 {
		t.Fatalf("Fans: got %d fans, %v, want 3", len(fans), err)
	}
	if f := fans[0]; f.ID != "Fan1" || f.DutyPercent != 40 || f.SpeedRPM != 4800 || f.SensorID != "Fan1Speed" {
		t.Errorf("Fan1: got %+v, want duty 40 %%, 4800 RPM, sensor Fan1Speed", f)
	}
	psus, err := r.ctrl.PowerSupplies(ctx)
	if err != nil || len(psus) != 2 {
		t.Fatalf("PowerSupplies: got %d, %v, want 2", len(psus), err)
	}
	for _, p := range psus {
		if p.Health != bmc.OK || p.OutputVolts < 11.9 || p.OutputVolts > 12.1 || p.InputVolts < 220 || p.OutputWatts <= 0 || p.InputWatts <= p.OutputWatts {
			t.Errorf("%s: got %+v, want healthy with 12 V out, ~230 V in, input > output > 0 W", p.ID, p)
		}
	}
	heads, err := r.ctrl.HeadPower(ctx)
	if err != nil || len(heads) != 4 {
		t.Fatalf("HeadPower: got %v, %v, want 4 heads", heads, err)
	}
	for _, h := range heads {
		if h.State != bmc.PowerOn {
			t.Errorf("head %d: got %s, want On", h.Host, h.State)
		}
	}
	if on, err := r.ctrl.Identify(ctx); err != nil || on {
		t.Errorf("Identify: got %v, %v, want off", on, err)
	}
}

func TestControllerEffecters(t *testing.T) {
	r := newRig(t, board.Config{Heads: 8}, pldm.ClientConfig{})
	r.discover(t)
	ctx := context.Background()

	if err := r.ctrl.SetIdentify(ctx, true); err != nil {
		t.Fatalf("SetIdentify: %v", err)
	}
	if !r.board.Snapshot().Identify {
		t.Errorf("board identify LED: got off, want on")
	}
	if err := r.ctrl.SetHeadPower(ctx, 3, bmc.PowerOff); err != nil {
		t.Fatalf("SetHeadPower(3, Off): %v", err)
	}
	if got := r.board.Snapshot().HeadOn; !slices.Equal(got, []bool{true, true, true, false, true, true, true, true}) {
		t.Errorf("board heads: got %v, want only head 3 off", got)
	}
	evs := r.settle(t, time.Second)
	if !hasEvent(evs, bmc.EventHeadPower, "Head3") {
		t.Errorf("events %v: want HeadPower for Head3", evs)
	}
	heads, _ := r.ctrl.HeadPower(ctx)
	if heads[3].State != bmc.PowerOff || heads[2].State != bmc.PowerOn {
		t.Errorf("HeadPower: got %v, want head 3 Off, head 2 On", heads)
	}

	if err := r.ctrl.SetFanDuty(ctx, "Fan2", 100); err != nil {
		t.Fatalf("SetFanDuty: %v", err)
	}
	r.settle(t, time.Minute)
	fans, _ := r.ctrl.Fans(ctx)
	if fans[1].DutyPercent != 100 || fans[1].SpeedRPM < 11900 {
		t.Errorf("Fan2 after a minute at 100 %%: got %+v, want about 12000 RPM", fans[1])
	}
	if err := r.ctrl.SetFanDuty(ctx, "Fan2", 5); err != nil {
		t.Fatalf("SetFanDuty(5 %%): %v", err)
	}
	if got := r.board.Snapshot().FanDuty[1]; got != 20 {
		t.Errorf("duty below the minimum: got %v %%, want raised to 20 %%", got)
	}

	errs := []struct {
		name string
		err  error
		want error
	}{
		{"duty 150", r.ctrl.SetFanDuty(ctx, "Fan1", 150), bmc.ErrInvalid},
		{"unknown fan", r.ctrl.SetFanDuty(ctx, "Fan9", 50), bmc.ErrNotFound},
		{"head 8 of 8", r.ctrl.SetHeadPower(ctx, 8, bmc.PowerOff), bmc.ErrNotFound},
		{"power state", r.ctrl.SetHeadPower(ctx, 1, "Sideways"), bmc.ErrInvalid},
	}
	for _, e := range errs {
		if !errors.Is(e.err, e.want) {
			t.Errorf("%s: got %v, want %v", e.name, e.err, e.want)
		}
	}
	// The board refuses what the controller would never send.
	var ccErrs = []struct {
		name string
		err  error
		want pldm.CompletionCode
	}{
		{"sensor 999", func() error { _, err := r.cl.SensorReading(ctx, 999, false); return err }(), pldm.CCInvalidSensorID},
		{"effecter 999", r.cl.SetStateEffecter(ctx, 999, []pldm.StateRequest{{Set: true, State: 1}}), pldm.CCInvalidEffecterID},
		{"identify state 7", r.cl.SetStateEffecter(ctx, identifyEffecter(t, r), []pldm.StateRequest{{Set: true, State: 7}}), pldm.CCInvalidStateValue},
	}
	for _, e := range ccErrs {
		if !errors.Is(e.err, e.want) {
			t.Errorf("%s: got %v, want %v", e.name, e.err, e.want)
		}
	}
}

// identifyEffecter finds the identify LED effecter in the repository.
func identifyEffecter(t *testing.T, r *rig) uint16 {
	pdrs, err := r.cl.ReadRepository(context.Background())
	if err != nil {
		t.Fatalf("ReadRepository: %v", err)
	}
	for _, p := range pdrs {
		if e, ok := p.(*pldm.StateEffecterPDR); ok && e.Composite[0].SetID == pldm.StateSetIdentify {
			return e.EffecterID
		}
	}
	t.Fatal("no identify effecter")
	return 0
}

func hasEvent(evs []bmc.Event, k bmc.EventKind, id string) bool {
	return slices.ContainsFunc(evs, func(e bmc.Event) bool { return e.Kind == k && e.SensorID == id })
}

func findEvent(evs []bmc.Event, k bmc.EventKind, id string) (bmc.Event, bool) {
	i := slices.IndexFunc(evs, func(e bmc.Event) bool { return e.Kind == k && e.SensorID == id })
	if i < 0 {
		return bmc.Event{}, false
	}
	return evs[i], true
}

func TestThermalEvents(t *testing.T) {
	r := newRig(t, board.Config{DIMMBanks: 2, Fans: 2}, pldm.ClientConfig{})
	r.discover(t)
	ctx := context.Background()
	for _, f := range []string{"Fan1", "Fan2"} {
		if err := r.ctrl.SetFanDuty(ctx, f, 20); err != nil {
			t.Fatalf("SetFanDuty: %v", err)
		}
	}
	r.board.SetLoad(1)
	evs := r.settle(t, 20*time.Minute)
	ev, ok := findEvent(evs, bmc.EventThreshold, "DIMMBank1Temp")
	if !ok {
		t.Fatalf("events %v: want a Threshold event for DIMMBank1Temp", evs)
	}
	if ev.Level == bmc.LevelNormal || ev.Reading < 75 {
		t.Errorf("DIMM event: got %+v, want an upper level at ≥ 75 °C", ev)
	}
	hot, _ := r.ctrl.Sensor(ctx, "DIMMBank1Temp")
	if hot.Level != bmc.LevelUpperCritical || hot.Health != bmc.Critical {
		t.Errorf("DIMMBank1Temp at full load, 20 %% fans: got %.1f °C level %q, want UpperCritical", hot.Reading, hot.Level)
	}
	// Full fans bring the banks back to normal, with an event saying so.
	for _, f := range []string{"Fan1", "Fan2"} {
		if err := r.ctrl.SetFanDuty(ctx, f, 100); err != nil {
			t.Fatalf("SetFanDuty: %v", err)
		}
	}
	evs = r.settle(t, 20*time.Minute)
	var last bmc.Event
	for _, e := range evs {
		if e.Kind == bmc.EventThreshold && e.SensorID == "DIMMBank1Temp" {
			last = e
		}
	}
	if last.Level != bmc.LevelNormal || last.PreviousLevel == bmc.LevelNormal {
		t.Errorf("last DIMMBank1Temp event after full fans: got %+v, want back to normal", last)
	}
	cool, _ := r.ctrl.Sensor(ctx, "DIMMBank1Temp")
	if cool.Reading >= hot.Reading-20 {
		t.Errorf("DIMMBank1Temp: %.1f °C at 100 %% fans, %.1f °C at 20 %%: want at least 20 °C cooler", cool.Reading, hot.Reading)
	}
}

func TestFaults(t *testing.T) {
	r := newRig(t, board.Config{Fans: 2, PSUs: 2}, pldm.ClientConfig{Retries: -1})
	r.discover(t)
	ctx := context.Background()

	if err := r.board.FailFan(0, true); err != nil {
		t.Fatal(err)
	}
	evs := r.settle(t, time.Minute)
	if !hasEvent(evs, bmc.EventFanFailed, "Fan1") {
		t.Errorf("events %v: want FanFailed for Fan1", evs)
	}
	fans, _ := r.ctrl.Fans(ctx)
	if fans[0].SpeedRPM != 0 || fans[0].Health != bmc.Critical {
		t.Errorf("failed fan: got %+v, want 0 RPM, Critical", fans[0])
	}

	if err := r.board.LosePSU(1, true); err != nil {
		t.Fatal(err)
	}
	evs = r.settle(t, time.Second)
	if !hasEvent(evs, bmc.EventPSULost, "PSU2") {
		t.Errorf("events %v: want PSULost for PSU2", evs)
	}
	if ev, ok := findEvent(evs, bmc.EventThreshold, "PSU2OutputVoltage"); !ok || ev.Level != bmc.LevelLowerCritical {
		t.Errorf("events %v: want PSU2OutputVoltage at LowerCritical", evs)
	}
	psus, _ := r.ctrl.PowerSupplies(ctx)
	if psus[1].Health != bmc.Critical || psus[1].OutputWatts != 0 || psus[0].Health != bmc.OK {
		t.Errorf("after losing PSU2: got %+v, want PSU2 Critical at 0 W, PSU1 OK", psus)
	}
	before := psus[0].OutputWatts
	if err := r.board.LosePSU(1, false); err != nil {
		t.Fatal(err)
	}
	evs = r.settle(t, time.Second)
	if !hasEvent(evs, bmc.EventPSURestored, "PSU2") {
		t.Errorf("events %v: want PSURestored for PSU2", evs)
	}
	psus, _ = r.ctrl.PowerSupplies(ctx)
	if d := psus[0].OutputWatts - before/2; d < -2 || d > 2 {
		t.Errorf("PSU1 output after PSU2 returned: got %.0f W, want about half of %.0f W", psus[0].OutputWatts, before)
	}

	if err := r.board.SilenceSensor("Inlet Temp", true); err != nil {
		t.Fatal(err)
	}
	evs = r.settle(t, time.Second)
	if !hasEvent(evs, bmc.EventSensorState, "InletTemp") {
		t.Errorf("events %v: want SensorState for InletTemp", evs)
	}
	s, err := r.ctrl.Sensor(ctx, "InletTemp")
	if err != nil || s.Valid || s.State != bmc.UnavailableOffline {
		t.Errorf("silent sensor: got %+v, %v, want invalid, UnavailableOffline", s, err)
	}
	// It is asked again only after the reprobe interval.
	if err := r.board.SilenceSensor("Inlet Temp", false); err != nil {
		t.Fatal(err)
	}
	r.settle(t, time.Second)
	if s, _ := r.ctrl.Sensor(ctx, "InletTemp"); s.Valid {
		t.Errorf("InletTemp re-read before the reprobe interval")
	}
	evs = r.settle(t, pldm.DefaultReprobeInterval)
	if s, _ := r.ctrl.Sensor(ctx, "InletTemp"); !s.Valid || s.Reading != 25 {
		t.Errorf("InletTemp after the reprobe interval: got %+v, want valid 25 °C", s)
	}
	if !hasEvent(evs, bmc.EventSensorState, "InletTemp") {
		t.Errorf("events %v: want SensorState (answers again) for InletTemp", evs)
	}
}

func TestEventReceiverRejects(t *testing.T) {
	ctrl := pldm.NewController(pldm.NewClient(nil, pldm.ClientConfig{}), pldm.ControllerConfig{})
	defer ctrl.Close()
	tests := []struct {
		name string
		msg  []byte
		want []byte // nil = no answer
	}{
		{"not PLDM", []byte{0x90, 0x02, 0x0A}, nil},
		{"response", []byte{0x10, 0x02, 0x0A, 0x00}, nil},
		{"base type", []byte{0x81, 0x00, 0x02}, []byte{0x01, 0x00, 0x02, 0x20}},
		{"other command", []byte{0x82, 0x02, 0x11, 1, 0, 0}, []byte{0x02, 0x02, 0x11, 0x05}},
		{"format version 2", []byte{0x83, 0x02, 0x0A, 0x02, 0x01, 0x00, 1, 0, 2, 1, 1, 0, 0}, []byte{0x03, 0x02, 0x0A, 0x81}},
		{"unknown sensor event accepted", []byte{0x84, 0x02, 0x0A, 0x01, 0x01, 0x00, 0x63, 0x00, 0x02, 0x08, 0x01, 0x00, 0x10},
			[]byte{0x04, 0x02, 0x0A, 0x00, 0x03}},
		{"bad event data", []byte{0x85, 0x02, 0x0A, 0x01, 0x01, 0x00, 0x63}, []byte{0x05, 0x02, 0x0A, 0x02}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			typ := mctp.MsgTypePLDM
			if tt.name == "not PLDM" {
				typ = mctp.MsgTypeCXLCCI
			}
			got, ok := ctrl.Handle(context.Background(), 9, typ, tt.msg)
			if !ok {
				got = nil
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("response mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestPlatformEventsPushed(t *testing.T) {
	r := newRig(t, board.Config{DIMMBanks: 1, Fans: 1}, pldm.ClientConfig{})
	r.discover(t)
	if got := r.board.Snapshot().Receiver; got != daemonEID {
		t.Fatalf("board event receiver: got %d, want %d", got, daemonEID)
	}
	ctx := context.Background()
	if err := r.ctrl.SetFanDuty(ctx, "Fan1", 20); err != nil {
		t.Fatal(err)
	}
	r.board.SetLoad(1)
	// Only the board polls: whatever arrives came as PlatformEventMessage.
	for range 30 {
		r.clk.Advance(time.Minute)
		if err := r.board.Poll(ctx); err != nil {
			t.Fatalf("Poll: %v", err)
		}
	}
	evs := drain(r.ctrl.Events())
	var levels []bmc.Level
	for _, e := range evs {
		if e.Kind == bmc.EventThreshold && e.SensorID == "DIMMBank1Temp" {
			levels = append(levels, e.Level)
		}
	}
	want := []bmc.Level{bmc.LevelUpperCaution, bmc.LevelUpperCritical}
	if diff := cmp.Diff(want, levels); diff != "" {
		t.Errorf("DIMMBank1Temp levels pushed (-want +got):\n%s\nall events: %v", diff, evs)
	}
}

func TestControllerDownAndUp(t *testing.T) {
	r := newRig(t, board.Config{Fans: 1, PSUs: 1, DIMMBanks: 1, Heads: 1}, pldm.ClientConfig{Retries: -1})
	r.discover(t)
	ctx := context.Background()
	sensors, _ := r.ctrl.Sensors(ctx)
	names := []string{"PSU 1 Health", "Head Power", "Identify LED"}
	for _, s := range sensors {
		names = append(names, s.Name)
	}
	silence := func(on bool) {
		for _, n := range names {
			if err := r.board.SilenceSensor(n, on); err != nil {
				t.Fatal(err)
			}
		}
	}
	silence(true)
	r.clk.Advance(time.Minute)
	if err := r.ctrl.Refresh(ctx); !errors.Is(err, bmc.ErrUnavailable) {
		t.Fatalf("Refresh with nothing answering: got %v, want ErrUnavailable", err)
	}
	evs := drain(r.ctrl.Events())
	if !slices.ContainsFunc(evs, func(e bmc.Event) bool { return e.Kind == bmc.EventControllerDown }) {
		t.Errorf("events %v: want ControllerDown", evs)
	}
	silence(false)
	r.clk.Advance(pldm.DefaultReprobeInterval + time.Second)
	if err := r.ctrl.Refresh(ctx); err != nil {
		t.Fatalf("Refresh after recovery: %v", err)
	}
	evs = drain(r.ctrl.Events())
	if !slices.ContainsFunc(evs, func(e bmc.Event) bool { return e.Kind == bmc.EventControllerUp }) {
		t.Errorf("events %v: want ControllerUp", evs)
	}
	if got := r.board.Snapshot().Receiver; got != daemonEID {
		t.Errorf("event receiver after recovery: got %d, want %d", got, daemonEID)
	}
}
