// Alerts & thresholds: the open alerts (acknowledge: administrators and
// operators) and the box's triggers (TelemetryService Triggers) with
// their thresholds, which administrators (ConfigureManager) edit.
import { html, useState } from '../lib.js';
import * as api from '../api.js';
import { Card, ErrorBox, Loading, Modal, Field, Badge, Health, Unavailable } from '../ui.js';
import { useAlerts, AlertList } from '../notify.js';

const BOUNDS = [
  ['UpperCritical', 'Upper critical'],
  ['UpperWarning', 'Upper warning'],
  ['LowerWarning', 'Lower warning'],
  ['LowerCritical', 'Lower critical'],
];

// UNITS says what each metric counts, for the threshold labels.
const UNITS = {
  PoolFreePercent: '%', HostQuotaPercent: '% of quota', SensorTemperature: '°C', HostLinkChangesPerHour: 'changes/hour',
  StrandedChunks: 'chunks', CertificateDaysLeft: 'days',
};

const reading = (t, b) => t.NumericThresholds?.[b]?.Reading;

export default function Alerts({ principal }) {
  const alerts = useAlerts(principal);
  const [edit, setEdit] = useState(null);
  if (alerts === null) return html`<h1>Alerts & thresholds</h1><${Loading} />`;
  if (!alerts.triggers) return html`<h1>Alerts & thresholds</h1><${Unavailable} what="This box keeps no history or alerts." />`;
  const unit = (t) => UNITS[t.MetricIds?.[0]] || '';
  return html`
    <div class="page-h"><h1>Alerts & thresholds</h1></div>
    <${Card} title=${`Open alerts (${alerts.open.length})`} id="open-alerts">
      <${AlertList} alerts=${alerts} principal=${principal} onChange=${alerts.reload} id="alerts-open" />
    <//>
    <${Card} title="Thresholds" id="thresholds">
      <p class="hint">Checked against every 10 s sample of the box's history; a crossing raises an event (Telemetry registry) and
        an alert here until the reading is back in range by the hysteresis.${principal.can.manager ? '' : ' Only administrators may change them.'}</p>
      <div class="table-wrap"><table id="triggers"><thead><tr><th>Alert</th><th>Thresholds</th><th class="num">Hysteresis</th><th>Enabled</th><th>Health</th><th></th></tr></thead>
      <tbody>${alerts.triggers.map((t) => html`<tr id=${'trigger-' + t.Id}>
        <td><b>${t.Name || t.Id}</b> <span class="hint mono">${(t.MetricIds || []).join(', ')}</span><div class="hint">${t.Description}</div></td>
        <td>${BOUNDS.filter(([b]) => reading(t, b) !== undefined).map(([b, l]) => html`<div class="nowrap">${l.toLowerCase()} <b>${reading(t, b)}${unit(t) ? ' ' + unit(t) : ''}</b></div>`)}</td>
        <td class="num">${t.HysteresisReading ?? 0}</td>
        <td><${Badge} value=${t.TriggerEnabled ? 'OK' : 'Disabled'} label=${t.TriggerEnabled ? 'on' : 'off'} /></td>
        <td><${Health} status=${t.Status} /></td>
        <td>${principal.can.manager ? html`<button class="small" aria-label=${'Edit ' + (t.Name || t.Id)} onClick=${() => setEdit(t)}>Edit…</button>` : null}</td>
      </tr>`)}</tbody></table></div>
    <//>
    ${edit ? html`<${EditTrigger} trigger=${edit} unit=${unit(edit)} onClose=${(changed) => { setEdit(null); if (changed) alerts.reload(); }} />` : null}`;
}

function EditTrigger({ trigger, unit, onClose }) {
  const init = {};
  for (const [b] of BOUNDS) init[b] = reading(trigger, b) ?? '';
  const [v, setV] = useState({ ...init, hyst: trigger.HysteresisReading ?? 0, enabled: !!trigger.TriggerEnabled });
  const [err, setErr] = useState(null);
  const [busy, setBusy] = useState(false);
  const set = (k) => (e) => setV({ ...v, [k]: e.target.type === 'checkbox' ? e.target.checked : e.target.value });
  const save = async (e) => {
    e.preventDefault();
    setBusy(true);
    setErr(null);
    const th = {};
    for (const [b] of BOUNDS) {
      const s = String(v[b]).trim();
      // An emptied field removes the threshold (Reading null).
      if (s !== String(init[b])) th[b] = { Reading: s === '' ? null : Number(s) };
    }
    try {
      await api.patch(trigger['@odata.id'], { TriggerEnabled: v.enabled, HysteresisReading: Number(v.hyst), NumericThresholds: th });
      onClose(true);
    } catch (x) { setErr(x); setBusy(false); }
  };
  return html`<${Modal} title=${'Thresholds: ' + (trigger.Name || trigger.Id)} onClose=${() => onClose(false)}>
    <form onSubmit=${save} id="trigger-form">
      <p class="hint">${trigger.Description}. Leave a field empty for no threshold.${unit ? ` Values in ${unit}.` : ''}</p>
      ${BOUNDS.map(([b, l]) => html`<${Field} label=${l} id=${'th-' + b}>
        <input id=${'th-' + b} type="number" step="any" value=${v[b]} onInput=${set(b)} /><//>`)}
      <${Field} label="Hysteresis" id="th-hyst" hint="How far back inside a threshold the reading must come before the alert clears.">
        <input id="th-hyst" type="number" step="any" min="0" value=${v.hyst} onInput=${set('hyst')} /><//>
      <label class="check"><input type="checkbox" id="th-enabled" checked=${v.enabled} onChange=${set('enabled')} /> Enabled</label>
      <${ErrorBox} error=${err} />
      <div class="dlg-actions"><button type="button" onClick=${() => onClose(false)}>Cancel</button>
        <button class="primary" type="submit" id="trigger-save" disabled=${busy}>${busy ? 'Saving…' : 'Save'}</button></div>
    </form>
  <//>`;
}
