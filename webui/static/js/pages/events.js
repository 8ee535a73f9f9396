// Events & audit log: the event log (with new events streamed in live)
// and the audit log of every change request, both filterable; host
// accounts, which may not read the logs, see their host's live events.
import { html, useState, useEffect } from '../lib.js';
import * as api from '../api.js';
import { subscribe, useLive } from '../live.js';
import { Card, Badge, ErrorBox, Loading, Notice, fmtTime, ActionButton, origin } from '../ui.js';

const LOGS = '/redfish/v1/Managers/FM/LogServices';
const LIMIT = 300;

const sevValue = (s) => (s === 'Critical' ? 'Critical' : s === 'Warning' ? 'Warning' : 'OK');

export default function Events({ principal, query }) {
  const [tab, setTab] = useState(query.get('log') === 'audit' ? 'audit' : 'event');
  if (!principal.can.appliance) return html`<h1>Events</h1><${Notice}>Host accounts see their host's events as they happen; the logs are for appliance accounts.<//><${LiveOnly} />`;
  return html`
    <div class="page-h"><h1>Events & audit log</h1>
      <div role="tablist" aria-label="Log" class="row">
        <button role="tab" aria-selected=${tab === 'event'} onClick=${() => setTab('event')} id="tab-event">Event log</button>
        <button role="tab" aria-selected=${tab === 'audit'} onClick=${() => setTab('audit')} id="tab-audit">Audit log</button>
      </div></div>
    <${Log} key=${tab} log=${tab === 'event' ? 'EventLog' : 'AuditLog'} principal=${principal} />`;
}

function Log({ log, principal }) {
  const [entries, setEntries] = useState(null);
  const [err, setErr] = useState(null);
  const [text, setText] = useState('');
  const [sev, setSev] = useState('');
  const reload = () => api.lastEntries(`${LOGS}/${log}/Entries`, LIMIT).then((e) => { setEntries(e); setErr(null); }, setErr);
  useEffect(() => { reload(); }, []);
  // New events arrive on the stream; the audit log has no stream of its
  // own, but every change it records also raises or follows an event.
  useLive(reload, { every: log === 'AuditLog' ? 5000 : 30000, delay: 400 });
  useEffect(() => log === 'EventLog' ? subscribe((r) => setEntries((l) => l && [{ Id: 'live-' + r.EventId, Created: r.EventTimestamp, Severity: r.MessageSeverity, Message: r.Message, MessageId: r.MessageId, OriginOfCondition: r.OriginOfCondition, live: true }, ...l.filter((e) => !(e.Created === r.EventTimestamp && e.Message === r.Message))])) : undefined, []);

  const t = text.trim().toLowerCase();
  const shown = (entries || []).filter((e) => (!sev || sevValue(e.Severity) === sev) &&
    (!t || [e.Message, e.MessageId, e.Username, e.Oem?.CxlPool?.URI, origin(e)].some((v) => v && String(v).toLowerCase().includes(t))));
  const download = () => {
    const blob = new Blob([JSON.stringify(entries, null, 2)], { type: 'application/json' });
    const a = document.createElement('a');
    a.href = URL.createObjectURL(blob);
    a.download = `cxlpool-${log}-${new Date().toISOString().replace(/[:.]/g, '-')}.json`;
    a.click();
    setTimeout(() => URL.revokeObjectURL(a.href), 1000);
  };
  return html`<${Card} title=${log === 'EventLog' ? 'Event log' : 'Audit log'} actions=${html`
      ${log === 'EventLog' && principal.can.manager ? html`<${ActionButton} cls="small" onError=${setErr} onClick=${async () => { if (confirm('Clear the event log? The audit log keeps a record of the clearing.')) { await api.post(`${LOGS}/EventLog/Actions/LogService.ClearLog`, {}); await reload(); } }}>Clear…<//>` : null}
      <button class="small" onClick=${download} disabled=${!entries}>Download JSON</button>`}>
    <div class="row">
      <label for="log-filter">Filter</label><input id="log-filter" type="search" placeholder="text, user, URI, message id" value=${text} onInput=${(e) => setText(e.target.value)} />
      <label for="log-sev">Severity</label><select id="log-sev" value=${sev} onChange=${(e) => setSev(e.target.value)}>
        <option value="">any</option><option>OK</option><option>Warning</option><option>Critical</option></select>
      <span class="hint" role="status" aria-live="polite">${entries ? `${shown.length} of ${entries.length} shown (newest ${LIMIT})` : ''}</span>
    </div>
    <${ErrorBox} error=${err} />
    ${!entries ? html`<${Loading} />` : html`<div class="table-wrap"><table id=${'log-' + log}>
      <thead><tr><th>Time</th><th>Severity</th>${log === 'AuditLog' ? html`<th>User</th><th>Request</th><th>Status</th>` : html`<th>Message</th><th>Resource</th><th>Message id</th>`}</tr></thead>
      <tbody>${shown.map((e) => html`<tr class=${e.live ? 'live' : ''}>
        <td>${fmtTime(e.Created)}</td><td><${Badge} value=${sevValue(e.Severity)} label=${e.Severity || 'OK'} /></td>
        ${log === 'AuditLog' ? html`<td>${e.Username}</td><td class="mono">${e.Oem?.CxlPool?.Method} ${e.Oem?.CxlPool?.URI}</td><td>${e.Oem?.CxlPool?.StatusCode}</td>`
          : html`<td>${e.Message}</td><td class="mono">${origin(e)}</td><td class="mono hint">${e.MessageId}</td>`}</tr>`)}</tbody></table></div>`}
  <//>`;
}

function LiveOnly() {
  const [recs, setRecs] = useState([]);
  useEffect(() => subscribe((r) => setRecs((l) => [r, ...l].slice(0, 200))), []);
  return html`<${Card} title="Live events">${recs.length === 0 ? html`<p class="hint">Waiting for events…</p>` : html`
    <table><thead><tr><th>Time</th><th>Severity</th><th>Message</th><th>Resource</th></tr></thead>
    <tbody>${recs.map((r) => html`<tr><td>${fmtTime(r.EventTimestamp)}</td><td><${Badge} value=${sevValue(r.MessageSeverity)} label=${r.MessageSeverity} /></td><td>${r.Message}</td><td class="mono">${origin(r)}</td></tr>`)}</tbody></table>`}<//>`;
}
