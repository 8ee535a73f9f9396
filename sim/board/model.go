package board

import "math"

// Physical constants of the simulated box. The numbers are chosen to be
// plausible for a 2U memory appliance, not to match any real chassis. In
// steady state at 25 °C inlet, idle with fans at 40 % the DIMM banks sit
// near 36 °C; at full load they reach about 70 °C with the same fans,
// 48 °C at 100 % and over 90 °C (critical) at the 20 % minimum.
const (
	maxRPM      = 12000.0 // fan speed at 100 % duty
	fanTau      = 2.0     // s, fan spin-up/-down time constant
	fanWatts    = 15.0    // W per fan at full speed (∝ speed³)
	boardWatts  = 40.0    // W: management, retimers, VRM losses
	headWatts   = 8.0     // W per powered head (link, retimer)
	bankIdle    = 6.0     // W per DIMM bank idle
	bankActive  = 24.0    // W per DIMM bank at full load
	mcIdle      = 12.0    // W memory controller idle
	mcActive    = 20.0    // W memory controller at full load
	airG        = 50.0    // W/°C: outlet rise = heat / (airG · airflow)
	outletTau   = 20.0    // s
	bankG0      = 0.3     // W/°C natural convection of a DIMM bank
	bankG1      = 1.2     // W/°C more at full airflow
	bankTau     = 40.0    // s
	mcG0        = 0.4     // W/°C
	mcG1        = 1.6     // W/°C
	mcTau       = 30.0    // s
	minAirflow  = 0.05    // fraction: convection with every fan stopped
	psuEff      = 0.93    // PSU efficiency
	psuOverhead = 5.0     // W lost in a running PSU at no load
	railVolts   = 12.05   // V at no load
	railDroop   = 0.0004  // V per W of output
	mainsVolts  = 230.0   // V AC
	mainsDroop  = 0.002   // V per W of input
	maxStep     = 0.5     // s: integration step
	maxCatchUp  = 3600.0  // s: longer gaps are treated as an hour (steady state by then)
)

// model is the board's physical state. Every field is guarded by
// Board.mu.
type model struct {
	ambient   float64
	bankLoad  []float64 // 0–1
	bankTemp  []float64 // °C
	mcTemp    float64
	outlet    float64
	fanDuty   []float64 // % commanded
	fanRPM    []float64
	fanFailed []bool
	psuLost   []bool
	headOn    []bool
	identify  bool
}

func newModel(cfg Config) *model {
	m := &model{
		ambient:   cfg.Ambient,
		bankLoad:  make([]float64, cfg.DIMMBanks),
		bankTemp:  make([]float64, cfg.DIMMBanks),
		fanDuty:   make([]float64, cfg.Fans),
		fanRPM:    make([]float64, cfg.Fans),
		fanFailed: make([]bool, cfg.Fans),
		psuLost:   make([]bool, cfg.PSUs),
		headOn:    make([]bool, cfg.Heads),
	}
	for i := range m.fanDuty {
		m.fanDuty[i] = cfg.InitialDuty
	}
	for i := range m.headOn {
		m.headOn[i] = true
	}
	m.mcTemp, m.outlet = m.ambient, m.ambient
	for i := range m.bankTemp {
		m.bankTemp[i] = m.ambient
	}
	// Start from the steady state of the initial inputs.
	m.advance(maxCatchUp)
	m.advance(maxCatchUp)
	return m
}

// airflow is the fraction of full airflow the running fans deliver.
func (m *model) airflow() float64 {
	var sum float64
	for _, r := range m.fanRPM {
		sum += r
	}
	if len(m.fanRPM) == 0 {
		return minAirflow
	}
	return max(sum/(maxRPM*float64(len(m.fanRPM))), minAirflow)
}

func (m *model) bankWatts(i int) float64 { return bankIdle + bankActive*m.bankLoad[i] }

func (m *model) mcWatts() float64 {
	var avg float64
	for _, l := range m.bankLoad {
		avg += l
	}
	if len(m.bankLoad) > 0 {
		avg /= float64(len(m.bankLoad))
	}
	return mcIdle + mcActive*avg
}

// heat is everything that warms the air stream (fans excluded: their
// motors sit at the intake).
func (m *model) heat() float64 {
	w := boardWatts + m.mcWatts()
	for i := range m.bankLoad {
		w += m.bankWatts(i)
	}
	for _, on := range m.headOn {
		if on {
			w += headWatts
		}
	}
	return w
}

// consumption is the DC power the PSUs deliver.
func (m *model) consumption() float64 {
	w := m.heat()
	for _, r := range m.fanRPM {
		f := r / maxRPM
		w += fanWatts * f * f * f
	}
	return w
}

// advance integrates the model over dt seconds with its inputs held: every
// state variable relaxes exponentially towards its target, in steps of at
// most maxStep so the couplings (fan speed → airflow → temperatures) stay
// accurate.
func (m *model) advance(dt float64) {
	dt = min(dt, maxCatchUp)
	for dt > 0 {
		h := min(dt, maxStep)
		dt -= h
		for i := range m.fanRPM {
			target := maxRPM * m.fanDuty[i] / 100
			if m.fanFailed[i] {
				target = 0
			}
			m.fanRPM[i] = relax(m.fanRPM[i], target, h, fanTau)
		}
		f := m.airflow()
		m.outlet = relax(m.outlet, m.ambient+m.heat()/(airG*f), h, outletTau)
		air := (m.ambient + m.outlet) / 2
		for i := range m.bankTemp {
			m.bankTemp[i] = relax(m.bankTemp[i], air+m.bankWatts(i)/(bankG0+bankG1*f), h, bankTau)
		}
		m.mcTemp = relax(m.mcTemp, air+m.mcWatts()/(mcG0+mcG1*f), h, mcTau)
	}
}

// relax moves x towards target as a first-order system with time
// constant tau over h seconds.
func relax(x, target, h, tau float64) float64 {
	return target + (x-target)*math.Exp(-h/tau)
}

// psu returns PSU i's readings: output and input power, output and input
// voltage. Running PSUs share the load evenly; a lost PSU reads zero.
func (m *model) psu(i int) (outW, inW, outV, inV float64) {
	if m.psuLost[i] {
		return 0, 0, 0, 0
	}
	running := 0
	for _, lost := range m.psuLost {
		if !lost {
			running++
		}
	}
	outW = m.consumption() / float64(running)
	inW = outW/psuEff + psuOverhead
	return outW, inW, railVolts - railDroop*outW, mainsVolts - mainsDroop*inW
}
