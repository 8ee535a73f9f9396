// Dashboard: pool capacity by state, per-host usage, health and the
// latest events, kept current by the event stream.
import { html, useState, useEffect } from '../lib.js';
import * as api from '../api.js';
import { subscribe, useLive } from '../live.js';
import { Card, Gauge, StackBar, Meter, Health, LinkBadge, ErrorBox, Loading, fmtMiB, fmtTime, Badge, hostColor, hostNum, origin } from '../ui.js';
import * as hist from '../history.js';
import { Sparkline, TimeChart } from '../chart.js';
import { useAlerts, worst } from '../notify.js';

const DOMAIN = '/redfish/v1/Chassis/Pool/MemoryDomains/Pool';
const FREE_STRANDED = DOMAIN + '/Actions/Oem/CxlPool.FreeStrandedChunks';
const EVENT_LOG = '/redfish/v1/Managers/FM/LogServices/EventLog/Entries';

async function load(principal) {
  const root = await api.get('/redfish/v1');
  const [dom, systems, conns] = await Promise.all([
    api.get(DOMAIN),
    api.members('/redfish/v1/Systems'),
    api.members('/redfish/v1/Fabrics/CXL/Connections'),
  ]);
  // The pool's own health: Warning while lost grants strand chunks.
  const health = [{ label: 'Memory pool', href: '#/hosts', status: dom.Status }];
  const add = async (label, uri, href) => {
    try { health.push({ label, href, status: (await api.get(uri)).Status }); } catch (e) { health.push({ label, href, error: e.message }); }
  };
  await Promise.all([
    add('Fabric Manager', '/redfish/v1/Managers/FM', '#/settings'),
    root.Chassis ? add('Chassis', '/redfish/v1/Chassis/Pool', '#/board') : null,
    root.Chassis ? add('Dynamic Capacity Device', '/redfish/v1/Chassis/Pool/PCIeDevices/DCD', '#/topology') : null,
  ]);
  const events = principal.can.appliance ? await api.lastEntries(EVENT_LOG, 8).catch(() => []) : [];
  return { dom, systems, conns, health, events };
}

// loadHistory reads the last hour of the pool's and the hosts' capacity
// (one bucket a minute for the sparklines, 20 s for the chart).
// A host account reads its own host's series only (HostHistory).
async function loadHistory(principal) {
  const pool = (metric) => (principal.can.appliance ? hist.load('PoolHistory', { metric, points: 60 }) : null);
  const [free, granted, reserved, hosts] = await Promise.all([
    pool('PoolFreeBytes'), pool('PoolGrantedBytes'), pool('PoolReservedBytes'),
    hist.load('HostHistory', { metric: 'HostGrantedBytes', points: 180 }),
  ]);
  return { free, granted, reserved, hosts };
}

const GiB = 2 ** 30;
const gib = (vs) => vs.map((v) => (v === null ? null : v / GiB));

export default function Dashboard({ principal }) {
  const [history, setHistory] = useState(null);
  useEffect(() => {
    const get = () => loadHistory(principal).then(setHistory, () => setHistory(null));
    get();
    const iv = setInterval(get, 30000);
    return () => clearInterval(iv);
  }, []);
  const alerts = useAlerts(principal);
  const [st, setSt] = useState({});
  const [err, setErr] = useState(null);
  const [liveEvents, setLiveEvents] = useState([]);
  const [freeing, setFreeing] = useState({ busy: false, error: null, done: null });
  const reload = () => load(principal).then((d) => { setSt(d); setErr(null); }, setErr);
  useEffect(() => { reload(); }, []);
  useLive(reload, { every: 10000 });
  useEffect(() => subscribe((rec) => setLiveEvents((l) => [rec, ...l].slice(0, 8))), []);

  if (!st.dom) return html`<h1>Dashboard</h1>${err ? html`<${ErrorBox} error=${err} />` : html`<${Loading} />`}`;
  const { dom, systems, conns, health } = st;
  const o = (dom.Oem && dom.Oem.CxlPool) || {};
  const total = dom.MemorySizeMiB || 0;
  // Capacity being given back: sanitize-on-release runs while a
  // connection is releasing.
  const sanitizing = conns.filter((c) => c.Oem?.CxlPool?.GrantState === 'releasing').reduce((n, c) => n + (c.Oem.CxlPool.GrantedMiB || 0), 0);
  const upCount = systems.filter((s) => s.Oem?.CxlPool?.LinkUp).length;
  // One step frees every stranded chunk: the pool's OEM action.
  const freeStranded = async () => {
    setFreeing({ busy: true, error: null, done: null });
    try {
      const r = await api.post(FREE_STRANDED, {});
      const x = r.body?.Oem?.CxlPool || {};
      setFreeing({ busy: false, error: null, done: { n: (x.FreedChunks || []).length, mib: x.FreedMiB || 0 } });
      reload();
    } catch (e) { setFreeing({ busy: false, error: e, done: null }); }
  };

  const events = principal.can.appliance
    ? mergeEvents(liveEvents, st.events)
    : liveEvents.map((r) => ({ Created: r.EventTimestamp, Message: r.Message, Severity: r.MessageSeverity, Id: r.EventId, origin: origin(r) }));

  return html`
    <div class="page-h"><h1>Dashboard</h1></div>
    ${err ? html`<${ErrorBox} error=${err} />` : null}
    ${o.StrandedChunks ? html`<div class="alert warn" role="alert" id="stranded-banner">
      <b>${o.StrandedChunks} ${o.StrandedChunks === 1 ? 'chunk' : 'chunks'} stranded by lost grants</b> (${fmtMiB(o.StrandedMiB)}):
      the device no longer holds what their hosts were granted (after a restart of the box, for example), so this
      capacity is neither used nor free. The hosts' data in them is gone.
      ${principal.can.components
        ? html` <button class="small" id="free-stranded" disabled=${freeing.busy} onClick=${freeStranded}>${freeing.busy ? 'Freeing…' : 'Free stranded chunks'}</button>`
        : html` <span class="hint">An administrator or operator can free them.</span>`}
    </div>` : null}
    ${freeing.error ? html`<${ErrorBox} error=${freeing.error} />` : null}
    ${freeing.done ? html`<p class="alert ok" role="status" id="stranded-freed">Freed ${freeing.done.n} stranded ${freeing.done.n === 1 ? 'chunk' : 'chunks'} (${fmtMiB(freeing.done.mib)}).</p>` : null}
    <${Card} title="Pool capacity" id="cap">
      ${principal.can.appliance ? html`
        <div class="gauges">
          <${Gauge} label="Free" value=${o.FreeMiB} total=${total} cls="free" />
          <${Gauge} label="Reserved" value=${o.ReservedMiB} total=${total} cls="reserved" />
          <${Gauge} label="Granted" value=${o.GrantedMiB} total=${total} cls="granted" />
          <${Gauge} label="Shared" value=${o.SharedMiB} total=${total} cls="shared" />
          <${Gauge} label="Being sanitized" value=${sanitizing} total=${total} cls="sanitize" />
          ${o.OrphanedMiB ? html`<${Gauge} label="Orphaned" value=${o.OrphanedMiB} total=${total} cls="orphan" />` : null}
        </div>
        <${StackBar} label="Pool capacity" total=${total} parts=${[
          { label: 'Free', value: o.FreeMiB, cls: 'free' },
          { label: 'Reserved', value: o.ReservedMiB, cls: 'reserved' },
          { label: 'Granted', value: Math.max(0, (o.GrantedMiB || 0) - sanitizing), cls: 'granted' },
          { label: 'Shared', value: o.SharedMiB, cls: 'shared' },
          { label: 'Being sanitized', value: sanitizing, cls: 'sanitize' },
          { label: 'Orphaned', value: o.OrphanedMiB, cls: 'orphan' },
        ]} />
        <p class="hint">Total ${fmtMiB(total)} · chunks in steps of ${fmtMiB(dom.MemoryChunkIncrementMiB)}.</p>
        ${history?.free ? html`<div class="sparks" id="pool-sparks">
          ${[['Free', history.free, 'free'], ['Granted', history.granted, 'granted'], ['Reserved', history.reserved, 'reserved']].map(([lbl, h, cls]) => {
            const vs = gib(h?.series[0]?.values || []);
            return html`<div class="spark-item"><span class="hint">${lbl}, last hour</span>
              <${Sparkline} cls=${cls} values=${vs} title=${`${lbl} capacity over the last hour: from ${(vs.find((v) => v !== null) ?? 0).toFixed(1)} to ${(vs[vs.length - 1] ?? 0).toFixed(1)} GiB`} /></div>`;
          })}</div>` : null}`
      : html`
        <div class="gauges">
          <${Gauge} label=${'Held by ' + principal.host} value=${o.HeldMiB} total=${o.QuotaMiB || total} cls="granted" />
          <${Gauge} label="Free in the pool" value=${o.FreeMiB} total=${total} cls="free" />
        </div>
        <p class="hint">${o.QuotaMiB ? `Quota ${fmtMiB(o.QuotaMiB)}.` : 'No quota set for this host.'}</p>`}
    <//>
    <div class="grid">
      <${Card} title="Per-host usage" id="hostuse">
        <table><thead><tr><th>Host</th><th>Link</th><th class="num">Granted</th><th>Of quota</th>${history?.hosts ? html`<th title="Granted over the last hour">1 h</th>` : null}</tr></thead>
        <tbody>${systems.map((s) => {
          const c = s.Oem?.CxlPool || {};
          return html`<tr><td><span class="sw" style=${{ background: hostColor(hostNum(s.Id)) }}></span> <a href=${'#/hosts?host=' + s.Id}>${s.Name}</a></td>
            <td><${LinkBadge} up=${c.LinkUp} /></td><td class="num">${fmtMiB(c.GrantedMiB)}</td>
            <td>${c.QuotaMiB ? html`<${Meter} value=${c.GrantedMiB} max=${c.QuotaMiB} label=${`${s.Id}: ${fmtMiB(c.GrantedMiB)} of ${fmtMiB(c.QuotaMiB)}`} />` : html`<span class="hint">no quota</span>`}</td>
            ${history?.hosts ? html`<td><${Sparkline} width=${48} values=${gib(history.hosts.series.find((x) => x.subject === s.Id)?.values || [])} title=${`${s.Id}'s granted capacity over the last hour`} /></td>` : null}</tr>`;
        })}</tbody></table>
      <//>
      <${Card} title="Health" id="health">
        <dl class="kv">
          ${health.map((h) => html`<dt><a href=${h.href}>${h.label}</a></dt><dd>${h.error ? html`<span class="badge bad">${h.error}</span>` : html`<${Health} status=${h.status} />`}</dd>`)}
          ${alerts ? html`<dt><a href="#/alerts">Alerts</a></dt><dd id="health-alerts">${alerts.open.length === 0 ? html`<${Badge} value="OK" label="none open" />`
            : html`<${Badge} value=${worst(alerts.open)} label=${`${alerts.open.length} open${alerts.unacked ? `, ${alerts.unacked} new` : ''}`} />`}</dd>` : null}
          <dt>Host links</dt><dd><${Badge} value=${upCount === systems.length ? 'OK' : 'Warning'} label=${`${upCount} of ${systems.length} up`} /></dd>
          <dt>Active connections</dt><dd>${conns.length}</dd>
        </dl>
      <//>
      ${history?.hosts && history.hosts.times.length > 1 ? html`<${Card} title="Per-host usage over the last hour" id="hostuse-chart" class="wide">
        <${TimeChart} id="host-history" label="Granted capacity per host over the last hour" unit="GiB" times=${history.hosts.times}
          series=${history.hosts.series.map((x) => ({ label: x.subject, color: hostColor(hostNum(x.subject)), values: gib(x.values) }))} /><//>` : null}
      <${Card} title="Recent events" id="recent" actions=${principal.can.appliance ? html`<a href="#/events">All events</a>` : null}>
        ${events.length === 0 ? html`<p class="hint">No events yet.</p>` : html`
        <ul class="plain events-mini">${events.map((e) => html`<li><${Badge} value=${sev(e.Severity)} label=${e.Severity || 'OK'} /> <span class="hint">${fmtTime(e.Created)}</span><br />${e.Message}${e.origin ? html` <span class="hint mono">${e.origin}</span>` : null}</li>`)}</ul>`}
      <//>
    </div>`;
}

const sev = (s) => (s === 'Critical' ? 'Critical' : s === 'Warning' ? 'Warning' : 'OK');

// mergeEvents puts the stream's records before the log's newest entries,
// without showing one twice (the log entry of a streamed event has the
// same message and time).
function mergeEvents(liveRecs, logged) {
  const out = liveRecs.map((r) => ({ Created: r.EventTimestamp, Message: r.Message, Severity: r.MessageSeverity, origin: origin(r), key: r.EventTimestamp + r.Message }));
  const seen = new Set(out.map((e) => e.key));
  for (const e of logged || []) {
    const k = e.Created + e.Message;
    if (!seen.has(k)) out.push({ ...e, origin: origin(e), key: k });
  }
  return out.slice(0, 8);
}
