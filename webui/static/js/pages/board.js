// Sensors, fans & power: the board controller's readings (Chassis
// Sensors, ThermalSubsystem, PowerSubsystem), their recent history and the
// identify LED. Each part appears only if the box serves it.
import { html, useState, useEffect, useRef } from '../lib.js';
import * as api from '../api.js';
import { Card, ErrorBox, Loading, Unavailable, Health, ActionButton } from '../ui.js';
import { TimeChart } from '../chart.js';
import * as histo from '../history.js';

const CHASSIS = '/redfish/v1/Chassis/Pool';
const HISTORY = 1080; // points kept for the charts: the box's last hour, then 30 min more at 5 s

async function load(chassis) {
  const part = async (link, fn) => (link ? fn(api.id(link)).catch((e) => ({ error: e })) : null);
  const [sensors, thermal, power] = await Promise.all([
    part(chassis.Sensors, (u) => api.members(u)),
    part(chassis.ThermalSubsystem, async (u) => {
      const t = await api.get(u);
      const fans = t.Fans ? await api.members(api.id(t.Fans)) : [];
      const metrics = t.ThermalMetrics ? await api.get(api.id(t.ThermalMetrics)).catch(() => null) : null;
      return { t, fans, metrics };
    }),
    part(chassis.PowerSubsystem, async (u) => {
      const p = await api.get(u);
      const psus = p.PowerSupplies ? await api.members(api.id(p.PowerSupplies)) : [];
      await Promise.all(psus.map(async (x) => { if (x.Metrics) x.metrics = await api.get(api.id(x.Metrics)).catch(() => null); }));
      return { p, psus };
    }),
  ]);
  return { sensors, thermal, power };
}

export default function Board({ principal }) {
  const [chassis, setChassis] = useState(null);
  const [d, setD] = useState(null);
  const [err, setErr] = useState(null);
  const hist = useRef({ times: [], temps: {}, power: {}, names: {} });
  const [, redraw] = useState(0);
  // The box's own history fills the charts' last hour at once.
  useEffect(() => {
    if (!principal.can.appliance) return; // SensorHistory is for appliance viewers
    histo.load('SensorHistory').then((h) => { if (h) { prefill(hist.current, h); redraw((n) => n + 1); } }, () => {});
  }, []);

  const reload = async () => {
    try {
      const c = await api.get(CHASSIS);
      setChassis(c);
      const x = await load(c);
      record(hist.current, x.sensors);
      setD(x);
      setErr(null);
    } catch (e) { setErr(e); }
  };
  useEffect(() => { reload(); const iv = setInterval(reload, 5000); return () => clearInterval(iv); }, []);

  if (!chassis) return html`<h1>Sensors, fans & power</h1>${err ? html`<${ErrorBox} error=${err} />` : html`<${Loading} />`}`;
  const none = !chassis.Sensors && !chassis.ThermalSubsystem && !chassis.PowerSubsystem;
  const canLED = principal.can.components;
  const led = chassis.LocationIndicatorActive;
  const toggleLED = async () => { await api.patch(CHASSIS, { LocationIndicatorActive: !led }); await reload(); };
  const h = hist.current;

  return html`
    <div class="page-h"><h1>Sensors, fans & power</h1>
      ${led !== undefined ? html`<span class=${'badge ' + (led ? 'info' : 'muted')} id="led-state">Identify LED ${led ? 'on' : 'off'}</span>
        ${canLED ? html`<${ActionButton} cls="primary" onError=${setErr} onClick=${toggleLED} label=${led ? 'Turn the identify LED off' : 'Turn the identify LED on'}>${led ? 'Stop identifying' : 'Identify (blink LED)'}<//>` : null}` : null}
    </div>
    <${ErrorBox} error=${err} />
    <${Card} title="Chassis"><dl class="kv"><dt>Model</dt><dd>${chassis.Model}</dd><dt>Serial</dt><dd class="mono">${chassis.SerialNumber}</dd>
      <dt>Power</dt><dd>${chassis.PowerState}</dd><dt>Health</dt><dd><${Health} status=${chassis.Status} /></dd></dl>
      ${led === undefined ? html`<p class="hint">This box exposes no identify LED (LocationIndicatorActive).</p>` : null}<//>
    ${none ? html`<${Unavailable} what="This box serves no sensors, thermal or power resources."
        detail="They come from the board controller (PLDM) through Chassis/Pool Sensors, ThermalSubsystem and PowerSubsystem." />` : !d ? html`<${Loading} />` : html`
      ${h.times.length > 1 && Object.keys(h.temps).length ? html`<${Card} title="Temperatures"><${TimeChart} label="Temperature history" unit="°C" times=${h.times} series=${Object.entries(h.temps).map(([k, values]) => ({ label: h.names[k] || k, values }))} id="temp-chart" /><//>` : null}
      ${h.times.length > 1 && Object.keys(h.power).length ? html`<${Card} title="Power"><${TimeChart} label="Power history" unit="W" times=${h.times} series=${Object.entries(h.power).map(([k, values]) => ({ label: h.names[k] || k, values }))} id="power-chart" /><//>` : null}
      <div class="grid">
        ${d.thermal ? html`<${Card} title="Fans">${d.thermal.error ? html`<${ErrorBox} error=${d.thermal.error} />` : html`
          <table id="fans"><thead><tr><th>Fan</th><th class="num">Speed</th><th>Health</th></tr></thead><tbody>
          ${d.thermal.fans.map((f) => html`<tr><td>${f.Name || f.Id}</td><td class="num">${fanSpeed(f)}</td><td><${Health} status=${f.Status} /></td></tr>`)}</tbody></table>`}<//>` : null}
        ${d.power ? html`<${Card} title="Power supplies">${d.power.error ? html`<${ErrorBox} error=${d.power.error} />` : html`
          <table id="psus"><thead><tr><th>Supply</th><th>Input</th><th class="num">In</th><th class="num">Out</th><th>Health</th></tr></thead><tbody>
          ${d.power.psus.map((p) => html`<tr><td>${p.Name || p.Id}</td><td>${p.LineInputStatus || '–'}</td>
            <td class="num">${watts(p.metrics?.InputPowerWatts)}</td><td class="num">${watts(p.metrics?.OutputPowerWatts)}</td><td><${Health} status=${p.Status} /></td></tr>`)}</tbody></table>`}<//>` : null}
      </div>
      ${d.sensors ? html`<${Card} title="Sensors">${d.sensors.error ? html`<${ErrorBox} error=${d.sensors.error} />` : html`<div class="table-wrap">
        <table id="sensors"><thead><tr><th>Sensor</th><th>Type</th><th class="num">Reading</th><th>Thresholds</th><th>Health</th></tr></thead><tbody>
        ${d.sensors.map((s) => html`<tr><td>${s.Name || s.Id}</td><td>${s.ReadingType || ''}</td><td class="num nowrap">${reading(s.Reading, s.ReadingUnits)}</td>
          <td class="hint">${thresholds(s)}</td><td><${Health} status=${s.Status} /></td></tr>`)}</tbody></table></div>`}<//>` : null}`}`;
}

// UCUM units as people read them.
const UNITS = { Cel: '°C', '{rev}/min': 'RPM', W: 'W', V: 'V', A: 'A', '%': '%' };
const num = (v) => (typeof v === 'number' ? String(Math.round(v * 100) / 100) : '–');
const reading = (v, u) => (v === null || v === undefined ? '–' : `${num(v)} ${UNITS[u] ?? u ?? ''}`);
const watts = (x) => (x && x.Reading !== undefined && x.Reading !== null ? `${num(x.Reading)} W` : '–');

const fanSpeed = (f) => {
  if (f.SpeedPercent?.Reading !== undefined) return `${f.SpeedPercent.Reading} %` + (f.SpeedPercent.SpeedRPM ? ` (${f.SpeedPercent.SpeedRPM} RPM)` : '');
  return '–';
};

function thresholds(s) {
  const t = s.Thresholds || {};
  return ['LowerCritical', 'LowerCaution', 'UpperCaution', 'UpperCritical'].filter((k) => t[k]?.Reading !== undefined).map((k) => `${k.replace(/([a-z])([A-Z])/, '$1 $2').toLowerCase()} ${num(t[k].Reading)}`).join(', ');
}

// record appends the temperature and power readings to the history.
function record(h, sensors) {
  if (!Array.isArray(sensors)) return;
  const now = Date.now() / 1000;
  h.times.push(now);
  const put = (map, key, v) => {
    if (!map[key]) map[key] = new Array(h.times.length - 1).fill(null);
    map[key].push(v);
  };
  for (const s of sensors) {
    h.names[s.Id] = s.Name || s.Id;
    if (s.ReadingType === 'Temperature') put(h.temps, s.Id, s.Reading ?? null);
    if (s.ReadingType === 'Power') put(h.power, s.Id, s.Reading ?? null);
  }
  for (const map of [h.temps, h.power]) for (const k of Object.keys(map)) if (map[k].length < h.times.length) map[k].push(null);
  if (h.times.length > HISTORY) {
    h.times.shift();
    for (const map of [h.temps, h.power]) for (const k of Object.keys(map)) map[k].shift();
  }
}

// prefill puts the box's history (SensorHistory, keyed by sensor Id)
// before the readings this page took itself.
function prefill(h, hs) {
  const first = h.times.length ? h.times[0] : Infinity;
  const keep = hs.times.map((t, i) => [t, i]).filter(([t]) => t < first - 1);
  const n = keep.length;
  if (!n) return;
  const own = h.times.length;
  h.times = [...keep.map(([t]) => t), ...h.times];
  for (const map of [h.temps, h.power]) for (const k of Object.keys(map)) map[k] = [...new Array(n).fill(null), ...map[k]];
  const maps = { SensorTemperature: h.temps, SensorPower: h.power };
  for (const s of hs.series) {
    const map = maps[s.metric];
    if (!map) continue;
    const vals = keep.map(([, i]) => s.values[i]);
    map[s.subject] = map[s.subject] ? [...vals, ...map[s.subject].slice(n)] : [...vals, ...new Array(own).fill(null)];
  }
}
