// The notification area: the box's open alerts (TelemetryService
// Triggers, Oem.CxlPool.Alerts of each), shown in the top bar with their
// count and worst severity, listed in a panel with acknowledge for
// administrators and operators (the acknowledgement is kept on the box).
// Kept current by the event stream (the Telemetry registry's trigger
// events) and a slow poll.
import { html, useState, useEffect, useRef } from './lib.js';
import * as api from './api.js';
import { useLive } from './live.js';

export const TRIGGERS = '/redfish/v1/TelemetryService/Triggers';

// loadAlerts reads every trigger and its open alerts; null when the box
// keeps no history (no Triggers).
export async function loadAlerts() {
  let triggers;
  try {
    triggers = await api.members(TRIGGERS);
  } catch (e) {
    if (e.status === 404 || e.status === 503 || e.status === 403) return null;
    throw e;
  }
  const open = [];
  for (const t of triggers) {
    for (const a of t.Oem?.CxlPool?.Alerts || []) open.push({ ...a, trigger: t });
  }
  open.sort((a, b) => rank(b.Severity) - rank(a.Severity) || String(a.Since).localeCompare(String(b.Since)));
  return { triggers, open, unacked: open.filter((a) => !a.Acknowledged).length };
}

const rank = (s) => (s === 'Critical' ? 2 : s === 'Warning' ? 1 : 0);

// worst is the worst severity of open alerts ('OK' when none).
export const worst = (open) => (open.some((a) => a.Severity === 'Critical') ? 'Critical' : open.length ? 'Warning' : 'OK');

// isAlertEvent: the events after which the alerts may have changed.
const isAlertEvent = (rec) => /^Telemetry\./.test(rec.MessageId || '') || /\/TelemetryService\/Triggers\//.test(rec.OriginOfCondition?.['@odata.id'] || '');

// useAlerts keeps the open alerts of an appliance viewer (null for a
// host account, which sees no triggers, or a box without them).
export function useAlerts(principal) {
  const [st, setSt] = useState(null);
  const on = principal && principal.can.appliance;
  const reload = () => { if (on) loadAlerts().then(setSt, () => {}); };
  useEffect(reload, [on]);
  useLive(reload, { match: isAlertEvent, every: 15000 });
  return on && st ? { ...st, reload } : null;
}

// acknowledge acknowledges one open alert.
export const acknowledge = (a) => api.post(a.trigger.Actions.Oem['#CxlPool.Acknowledge'].target, { MetricProperty: a.MetricProperty });

const sevClass = (s) => (s === 'Critical' ? 'bad' : s === 'Warning' ? 'warn' : 'ok');

export function fmtAlert(a) {
  const n = (v) => (typeof v === 'number' ? (Math.abs(v) >= 100 ? Math.round(v) : Math.round(v * 10) / 10) : v);
  const dir = /^Upper/.test(a.Threshold) ? 'above' : 'below';
  return `${a.Series}: ${n(a.Reading)} is ${dir} the ${a.Threshold.replace(/([a-z])([A-Z])/, '$1 $2').toLowerCase()} threshold ${n(a.ThresholdReading)}`;
}

// AlertList lists open alerts with acknowledge buttons where allowed.
export function AlertList({ alerts, principal, onChange, id }) {
  const [err, setErr] = useState(null);
  const [busy, setBusy] = useState('');
  const ack = async (a) => {
    setBusy(a.trigger.Id + a.MetricProperty);
    setErr(null);
    try { await acknowledge(a); onChange && onChange(); } catch (e) { setErr(e); } finally { setBusy(''); }
  };
  if (!alerts.open.length) return html`<p class="hint" id=${id}>No open alerts.</p>`;
  return html`<ul class="plain alert-list" id=${id}>${alerts.open.map((a) => html`<li class=${'alert-item ' + (a.Acknowledged ? 'acked' : '')}>
      <span class=${'badge ' + sevClass(a.Severity)}>${a.Severity}</span> <b>${a.trigger.Name || a.trigger.Id}</b>
      <div>${fmtAlert(a)}</div>
      <div class="hint">since ${new Date(a.Since).toLocaleString()}${a.Acknowledged ? ` · acknowledged by ${a.AcknowledgedBy}` : ''}</div>
      ${!a.Acknowledged && principal.can.components ? html`<button class="small" disabled=${busy === a.trigger.Id + a.MetricProperty}
        aria-label=${`Acknowledge ${a.trigger.Name || a.trigger.Id} for ${a.Series}`} onClick=${() => ack(a)}>Acknowledge</button>` : null}
    </li>`)}</ul>
    ${err ? html`<p class="alert bad" role="alert">${err.message}</p>` : null}`;
}

// Notifications is the top bar's bell and its panel.
export function Notifications({ principal }) {
  const alerts = useAlerts(principal);
  const [open, setOpen] = useState(false);
  const ref = useRef(null);
  useEffect(() => {
    if (!open) return;
    const close = (e) => { if (ref.current && !ref.current.contains(e.target)) setOpen(false); };
    const esc = (e) => { if (e.key === 'Escape') setOpen(false); };
    addEventListener('pointerdown', close);
    addEventListener('keydown', esc);
    return () => { removeEventListener('pointerdown', close); removeEventListener('keydown', esc); };
  }, [open]);
  if (!alerts) return null;
  const n = alerts.unacked;
  const w = worst(alerts.open.filter((a) => !a.Acknowledged));
  return html`<div class="notify" ref=${ref}>
    <button class=${'ghost notify-btn ' + (n ? sevClass(w) : '')} id="notify-btn" aria-expanded=${open} aria-controls="notify-panel"
      aria-label=${n ? `${n} alerts not acknowledged` : `Alerts: ${alerts.open.length} open`} onClick=${() => setOpen(!open)}>
      <svg class="bell" width="16" height="16" viewBox="0 0 16 16" aria-hidden="true"><path d="M8 1.5a4 4 0 0 0-4 4v2.8L2.6 11h10.8L12 8.3V5.5a4 4 0 0 0-4-4zM6.3 12.5a1.8 1.8 0 0 0 3.4 0z" /></svg>${n ? html` <span class=${'badge ' + sevClass(w)} id="notify-count">${n}</span>` : null}</button>
    ${open ? html`<div class="notify-panel card" id="notify-panel" role="region" aria-label="Open alerts">
      <div class="card-h"><h2>Alerts</h2><a href="#/alerts" onClick=${() => setOpen(false)}>Thresholds…</a></div>
      <div class="card-b"><${AlertList} alerts=${alerts} principal=${principal} onChange=${alerts.reload} id="notify-list" /></div></div>` : null}
  </div>`;
}
