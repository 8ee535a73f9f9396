package board

import (
	"context"
	"encoding/hex"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"cxlpool/bmc/pldm"
	"cxlpool/fabric/mctp"
)

type clock struct {
	mu  sync.Mutex
	now time.Time
}

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

func newBoard(t *testing.T, cfg Config) (*Board, *clock) {
	t.Helper()
	clk := &clock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	cfg.Clock = clk.Now
	b, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return b, clk
}

func unhex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.Join(strings.Fields(s), ""))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestConfig(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		ok   bool
	}{
		{"defaults", Config{}, true},
		{"nine heads", Config{Heads: 9}, false},
		{"five PSUs", Config{PSUs: 5}, false},
		{"negative fans", Config{Fans: -1}, false},
		{"duty below minimum", Config{InitialDuty: 10}, false},
		{"broadcast EID", Config{EID: mctp.EIDBroadcast}, false},
		{"one of everything", Config{Heads: 1, DIMMBanks: 1, Fans: 1, PSUs: 1}, true},
	}
	for _, tt := range tests {
		_, err := New(tt.cfg)
		if (err == nil) != tt.ok {
			t.Errorf("%s: got error %v, want ok %v", tt.name, err, tt.ok)
		}
	}
}

// TestModel checks the physics qualitatively: temperatures rise with load
// and fall with fan duty, fans lag their duty by their time constant, and
// the PSUs share the load.
func TestModel(t *testing.T) {
	steady := func(load, duty float64) Snapshot {
		b, clk := newBoard(t, Config{DIMMBanks: 2, Fans: 2})
		b.SetLoad(load)
		_ = b.update(func(m *model) error {
			m.fanDuty[0], m.fanDuty[1] = duty, duty
			return nil
		})
		clk.Advance(2 * time.Hour)
		return b.Snapshot()
	}
	idle, busy, cooled := steady(0, 40), steady(1, 40), steady(1, 100)
	checks := []struct {
		name string
		ok   bool
	}{
		{"idle DIMMs 30–45 °C", idle.Banks[0] > 30 && idle.Banks[0] < 45},
		{"load heats DIMMs by > 20 °C", busy.Banks[0] > idle.Banks[0]+20},
		{"load heats the memory controller", busy.MemoryController > idle.MemoryController+10},
		{"load heats the outlet", busy.Outlet > idle.Outlet},
		{"outlet above inlet", idle.Outlet > idle.Ambient},
		{"full fans cool by > 15 °C", cooled.Banks[0] < busy.Banks[0]-15},
		{"full fans spin at 12000 RPM", math.Abs(cooled.FanRPM[0]-12000) < 1},
		{"load draws power", busy.PSUOutputWatts[0] > idle.PSUOutputWatts[0]+25},
		{"PSUs share evenly", busy.PSUOutputWatts[0] == busy.PSUOutputWatts[1]},
		{"input exceeds output", busy.PSUInputWatts[0] > busy.PSUOutputWatts[0]},
	}
	for _, c := range checks {
		if !c.ok {
			t.Errorf("%s: idle %+v busy %+v cooled %+v", c.name, idle, busy, cooled)
		}
	}

	b, clk := newBoard(t, Config{Fans: 1})
	_ = b.update(func(m *model) error { m.fanDuty[0] = 100; return nil })
	clk.Advance(2 * time.Second) // one time constant: 63 % of the step
	want := 4800 + (12000-4800)*(1-math.Exp(-1))
	if got := b.Snapshot().FanRPM[0]; math.Abs(got-want) > 1 {
		t.Errorf("fan after one time constant: got %.0f RPM, want %.0f", got, want)
	}
	if err := b.FailFan(0, true); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Minute)
	if got := b.Snapshot().FanRPM[0]; got > 1 {
		t.Errorf("failed fan after a minute: got %.0f RPM, want 0", got)
	}
	if err := b.LosePSU(0, true); err != nil {
		t.Fatal(err)
	}
	if s := b.Snapshot(); s.PSUOutputWatts[0] != 0 || s.PSUOutputWatts[1] <= 0 {
		t.Errorf("lost PSU1: got outputs %v, want 0 and the whole load on PSU2", s.PSUOutputWatts)
	}
	for _, err := range []error{b.FailFan(5, true), b.LosePSU(-1, true), b.SetBankLoad(4, 1), b.SilenceSensor("Nope", true)} {
		if err == nil {
			t.Errorf("out-of-range fault: got nil error")
		}
	}
}

func TestHysteresis(t *testing.T) {
	b, _ := newBoard(t, Config{})
	id, _ := b.SensorID("DIMM Bank 1 Temp")
	s := b.numSensor(id)
	// warn 75, crit 85, fatal 95, hysteresis 2.
	steps := []struct {
		v    float64
		want pldm.NumericState
	}{
		{40, pldm.StateNormal},
		{75, pldm.StateUpperWarning},
		{73.5, pldm.StateUpperWarning}, // inside by less than the hysteresis
		{72.9, pldm.StateNormal},
		{96, pldm.StateUpperFatal},
		{94, pldm.StateUpperFatal},
		{92, pldm.StateUpperCritical},
		{84, pldm.StateUpperCritical},
		{70, pldm.StateNormal},
	}
	s.present = pldm.StateNormal
	for _, st := range steps {
		got := s.classify(st.v)
		if got != st.want {
			t.Errorf("at %.1f °C from %s: got %s, want %s", st.v, s.present, got, st.want)
		}
		s.present = got
	}
	fid, _ := b.SensorID("Fan 1 Speed")
	f := b.numSensor(fid)
	// lower warn 1500, lower crit 800, hysteresis 200.
	f.present = pldm.StateNormal
	for _, st := range []struct {
		v    float64
		want pldm.NumericState
	}{{0, pldm.StateLowerCritical}, {900, pldm.StateLowerCritical}, {1100, pldm.StateLowerWarning}, {1600, pldm.StateLowerWarning}, {1800, pldm.StateNormal}} {
		got := f.classify(st.v)
		if got != st.want {
			t.Errorf("fan at %.0f RPM from %s: got %s, want %s", st.v, f.present, got, st.want)
		}
		f.present = got
	}
}

func TestHandleMessages(t *testing.T) {
	b, _ := newBoard(t, Config{TID: 0x0A})
	inlet, _ := b.SensorID("Inlet Temp")
	tests := []struct {
		name string
		typ  mctp.MsgType
		req  string
		want string // "" = no response
	}{
		{"TV1 GetTID", mctp.MsgTypePLDM, "81 00 02", "01 00 02 00 0A"},
		{"TV1 GetPLDMTypes", mctp.MsgTypePLDM, "82 00 04", "02 00 04 00 05 00 00 00 00 00 00 00"},
		{"TV2 GetPLDMVersion", mctp.MsgTypePLDM, "83 00 03 00 00 00 00 01 02", "03 00 03 00 00 00 00 00 05 00 F0 F2 F1 79 ED B0 78"},
		{"GetPLDMVersion unknown type", mctp.MsgTypePLDM, "83 00 03 00 00 00 00 01 04", "03 00 03 83"},
		{"GetPLDMCommands wrong version", mctp.MsgTypePLDM, "84 00 05 02 00 F0 F1 F1", "04 00 05 84"},
		{"GetTID with payload", mctp.MsgTypePLDM, "81 00 02 00", "01 00 02 03"},
		{"TV7-style GetSensorReading", mctp.MsgTypePLDM, "89 02 11 " + hex.EncodeToString([]byte{byte(inlet), 0}) + " 00",
			"09 02 11 00 03 00 02 01 01 01 FA 00"}, // sint16 250 = 25.0 °C
		{"GetSensorReading short", mctp.MsgTypePLDM, "89 02 11 01", "09 02 11 03"},
		{"unsupported type", mctp.MsgTypePLDM, "85 04 01", "05 04 01 20"},
		{"unsupported command", mctp.MsgTypePLDM, "86 02 0A 01 01 00", "06 02 0A 05"},
		{"SetEventReceiver polling", mctp.MsgTypePLDM, "8E 02 04 02 00 08", "0E 02 04 81"},
		{"SetEventReceiver other transport", mctp.MsgTypePLDM, "8E 02 04 01 01 08", "0E 02 04 80"},
		{"datagram", mctp.MsgTypePLDM, "C1 00 02", ""},
		{"response", mctp.MsgTypePLDM, "01 00 02 00", ""},
		{"CCI message", mctp.MsgTypeCXLCCI, "81 00 02", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := b.Handle(context.Background(), 0x10, tt.typ, unhex(t, tt.req))
			if tt.want == "" {
				if ok {
					t.Fatalf("got response %x, want none", got)
				}
				return
			}
			if !ok {
				t.Fatalf("got no response, want %s", tt.want)
			}
			if diff := cmp.Diff(unhex(t, tt.want), got); diff != "" {
				t.Errorf("response mismatch (-want +got):\n%s", diff)
			}
		})
	}
	if err := b.SilenceSensor("Inlet Temp", true); err != nil {
		t.Fatal(err)
	}
	if got, ok := b.Handle(context.Background(), 0x10, mctp.MsgTypePLDM, []byte{0x89, 0x02, 0x11, byte(inlet), 0, 0}); ok {
		t.Errorf("silenced sensor answered %x", got)
	}
}

func TestRepository(t *testing.T) {
	b, _ := newBoard(t, Config{})
	numeric, state, neff, seff, names := 0, 0, 0, 0, 0
	for i, rec := range b.records {
		p, err := pldm.ParsePDR(rec)
		if err != nil {
			t.Fatalf("record %d: %v", i+1, err)
		}
		if h := p.Header().RecordHandle; h != uint32(i+1) {
			t.Errorf("record %d has handle %d", i+1, h)
		}
		switch p.(type) {
		case *pldm.NumericSensorPDR:
			numeric++
		case *pldm.StateSensorPDR:
			state++
		case *pldm.NumericEffecterPDR:
			neff++
		case *pldm.StateEffecterPDR:
			seff++
		case *pldm.AuxNamesPDR:
			names++
		}
	}
	// 3 + 4 bank temperatures, 4 fans, 2 PSUs × 4; PSU health ×2, head
	// power, identify; 4 fan duties; identify, head power.
	want := []int{19, 4, 4, 2, 29}
	if diff := cmp.Diff(want, []int{numeric, state, neff, seff, names}); diff != "" {
		t.Errorf("PDR counts numeric/state sensors, numeric/state effecters, names (-want +got):\n%s", diff)
	}
}

func TestNoReceiverNoEvents(t *testing.T) {
	b, clk := newBoard(t, Config{})
	b.SetLoad(1)
	clk.Advance(time.Hour)
	if err := b.Poll(context.Background()); err != nil {
		t.Fatalf("Poll: %v", err)
	}
	b.mu.Lock()
	n := len(b.pending)
	b.mu.Unlock()
	if n != 0 {
		t.Errorf("pending events without a receiver: got %d, want 0", n)
	}
}

func FuzzHandle(f *testing.F) {
	for _, s := range []string{"81 00 02", "83 00 03 00 00 00 00 01 02", "84 00 05 02 00 F0 F2 F1", "85 02 50",
		"86 02 51 03 00 00 00 00 00 00 00 01 FF 00 00 00", "87 02 51 01 00 00 00 40 00 00 00 00 40 00 01 00",
		"89 02 11 01 00 00", "8A 02 21 10 00 00 00", "8B 02 39 01 00 01 01 02", "8C 02 31 01 00 00 32",
		"8D 02 32 01 00", "8E 02 04 01 00 08", "8B 02 39 02 00 08 01 04 01 04 01 04 01 04 01 04 01 04 01 04 01 04"} {
		f.Add(unhex(f, s))
	}
	b, err := New(Config{Clock: func() time.Time { return time.Unix(0, 0) }})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, msg []byte) {
		resp, ok := b.Handle(context.Background(), 0x10, mctp.MsgTypePLDM, msg)
		if !ok {
			return
		}
		req, err := pldm.ParseHeader(msg)
		if err != nil {
			t.Fatalf("answered an unparsable request %x with %x", msg, resp)
		}
		if _, err := pldm.ParseResponse(resp, req); err != nil {
			var cc pldm.CompletionCode
			if !asCC(err, &cc) {
				t.Fatalf("response %x to %x does not parse: %v", resp, msg, err)
			}
		}
	})
}
