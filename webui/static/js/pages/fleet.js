// Fleet: every box on the fleet plane (NATS JetStream) as this box sees
// it — boxes, the hosts cabled to them, free capacity per region — and
// the placement question "which box can give host X N GiB". Nothing here
// changes a ledger: the answer names the box whose API to ask.
// Backed by /redfish/v1/Oem/CxlPool/Fleet and its CxlPool.Place action.
import { html, useState, useEffect } from '../lib.js';
import * as api from '../api.js';
import { useLive } from '../live.js';
import { Card, ErrorBox, Loading, Unavailable, Field, Badge, LinkBadge, fmtMiB, fmtTime } from '../ui.js';

const FLEET = '/redfish/v1/Oem/CxlPool/Fleet';
const PLACE = FLEET + '/Actions/CxlPool.Place';

// Plane states in the Badge's words.
const PLANE_CLASS = { Connected: 'OK', Disconnected: 'Warning', Retrying: 'Warning', Joining: 'Starting' };

export default function Fleet() {
  const [fleet, setFleet] = useState(undefined);
  const [err, setErr] = useState(null);
  const reload = async () => {
    try { setFleet(await api.get(FLEET)); setErr(null); } catch (e) {
      if (e.status === 404) setFleet(null); else setErr(e);
    }
  };
  useEffect(() => { reload(); }, []);
  useLive(reload, { every: 5000 });

  if (fleet === undefined) return html`<h1>Fleet</h1>${err ? html`<${ErrorBox} error=${err} />` : html`<${Loading} />`}`;
  if (fleet === null) return html`<h1>Fleet</h1><${Unavailable} what="This box runs no fleet plane (started with --fleet off)." detail="With the plane on, every box of the fleet, its hosts and its free capacity appear here." />`;
  const plane = fleet.Plane || {};
  const boxes = fleet.Boxes || [];
  const hosts = boxes.flatMap((b) => (b.Heads || []).map((h) => ({ box: b.Box, ...h })));
  const regions = boxes.flatMap((b) => (b.Regions || []).map((r) => ({ box: b.Box, ...r })));
  return html`
    <div class="page-h"><h1>Fleet</h1><span class="hint">this box: <span class="mono">${fleet.Box}</span></span></div>
    <${ErrorBox} error=${err} />
    <${Card} title="Fleet plane" id="fleet-plane">
      <dl class="kv">
        <dt>State</dt><dd id="fleet-state"><${Badge} value=${PLANE_CLASS[plane.State] || plane.State} label=${plane.State} /></dd>
        <dt>Servers</dt><dd class="mono">${plane.Servers || '–'}${plane.Embedded ? ' (embedded)' : ''}</dd>
        ${plane.LastError ? html`<dt>Last error</dt><dd id="fleet-error">${plane.LastError} <span class="hint">(attempt ${plane.Attempts}; the box serves its hosts and retries${plane.NextAttempt ? ' at ' + fmtTime(plane.NextAttempt) : ''})</span></dd>` : null}
        ${plane.ReadError ? html`<dt>Records</dt><dd>${plane.ReadError}</dd>` : null}
        <dt>Events</dt><dd>${plane.QueuedEvents || 0} queued, ${plane.DroppedEvents || 0} dropped</dd>
      </dl>
    <//>
    <${Card} title=${`Boxes (${boxes.length})`}>
      ${boxes.length === 0 ? html`<p class="hint">No box records${plane.State === 'Connected' ? '' : ' until the plane is connected'}.</p>` : html`<div class="table-wrap"><table id="fleet-boxes">
        <thead><tr><th>Box</th><th>Health</th><th>Links</th><th class="num">Free</th><th>Firmware</th><th>API</th><th>Updated</th></tr></thead>
        <tbody>${boxes.map((b) => html`<tr><td class="mono">${b.Box}${b.Box === fleet.Box ? html` <span class="hint">(this box)</span>` : null}</td>
          <td><${Badge} value=${b.Health} /></td>
          <td>${(b.Heads || []).filter((h) => h.LinkUp).length}/${(b.Heads || []).length}</td>
          <td class="num">${fmtMiB(b.FreeMiB)}</td><td>${b.Firmware || '–'}</td>
          <td class="mono">${b.API || '–'}</td><td>${fmtTime(b.Updated)}</td></tr>`)}</tbody></table></div>`}
    <//>
    <${Card} title="Free capacity per region">
      ${regions.length === 0 ? html`<p class="hint">No regions.</p>` : html`<div class="table-wrap"><table id="fleet-regions">
        <thead><tr><th>Box</th><th class="num">Region</th><th class="num">Free</th><th class="num">Reserved</th><th class="num">Granted</th><th class="num">Size</th><th class="num">Block</th></tr></thead>
        <tbody>${regions.map((r) => html`<tr><td class="mono">${r.box}</td><td class="num">${r.Region}</td><td class="num">${fmtMiB(r.FreeMiB)}</td>
          <td class="num">${fmtMiB(r.ReservedMiB)}</td><td class="num">${fmtMiB(r.GrantedMiB)}</td><td class="num">${fmtMiB(r.SizeMiB)}</td><td class="num">${fmtMiB(r.BlockSizeMiB)}</td></tr>`)}</tbody></table></div>`}
    <//>
    <${Card} title=${`Hosts (${hosts.length})`}>
      ${hosts.length === 0 ? html`<p class="hint">No hosts.</p>` : html`<div class="table-wrap"><table id="fleet-hosts">
        <thead><tr><th>Box</th><th>Host</th><th class="num">LD</th><th>Link</th><th class="num">Granted</th><th class="num">Quota</th></tr></thead>
        <tbody>${hosts.map((h) => html`<tr><td class="mono">${h.box}</td><td>${h.Host}</td><td class="num">${h.LD}</td><td><${LinkBadge} up=${h.LinkUp} /></td>
          <td class="num">${fmtMiB(h.GrantedMiB)}</td><td class="num">${h.QuotaMiB ? fmtMiB(h.QuotaMiB) : 'none'}</td></tr>`)}</tbody></table></div>`}
    <//>
    <${Place} hosts=${hosts} />`;
}

// Place asks the box which box of the fleet can give a host a size.
function Place({ hosts }) {
  const [host, setHost] = useState('');
  const [gib, setGiB] = useState('1');
  const [ans, setAns] = useState(null);
  const [err, setErr] = useState(null);
  const [busy, setBusy] = useState(false);
  const names = [...new Set(hosts.map((h) => h.Host))];
  const submit = async (e) => {
    e.preventDefault();
    setBusy(true); setErr(null); setAns(null);
    try {
      const r = await api.post(PLACE, { Host: host.trim(), SizeMiB: Math.round(Number(gib) * 1024) });
      setAns(r.body);
    } catch (x) { setErr(x); } finally { setBusy(false); }
  };
  const best = ans && ans.Offers && ans.Offers[0];
  return html`<${Card} title="Which box can give a host memory?" id="fleet-place">
    <form class="inline" onSubmit=${submit}>
      <${Field} label="Host (HOST or BOX/HOST)" id="place-host"><input id="place-host" required list="place-hosts" value=${host} onInput=${(e) => setHost(e.target.value)} />
        <datalist id="place-hosts">${names.map((n) => html`<option value=${n} />`)}</datalist><//>
      <${Field} label="Size (GiB)" id="place-size"><input id="place-size" type="number" min="0.001" step="any" required value=${gib} onInput=${(e) => setGiB(e.target.value)} /><//>
      <button class="primary" type="submit" id="place-ask" disabled=${busy || !host.trim()}>Ask the fleet</button>
    </form>
    <${ErrorBox} error=${err} />
    ${ans ? html`<div id="place-answer">
      ${best ? html`<p class="alert ok" role="status" id="place-best">Ask <b class="mono">${best.Box}</b> at <span class="mono">${best.API || '–'}</span>:
        ${best.Via === 'head' ? html` through ${best.Host}'s own head (LD ${best.LD}), region ${best.Region}.` : html` ${ans.Host} is cabled to no box: an export from region ${best.Region} (${best.Export}).`}</p>`
        : html`<p class="alert warn" role="status" id="place-none">No box in the fleet can give ${ans.Host} ${fmtMiB(ans.SizeMiB)}.</p>`}
      ${ans.Offers.length ? html`<div class="table-wrap"><table id="place-offers">
        <thead><tr><th>Box</th><th>Via</th><th class="num">Region</th><th class="num">Free</th><th>API</th></tr></thead>
        <tbody>${ans.Offers.map((o) => html`<tr><td class="mono">${o.Box}</td><td>${o.Via}</td><td class="num">${o.Region}</td><td class="num">${fmtMiB(o.FreeMiB)}</td><td class="mono">${o.API || '–'}</td></tr>`)}</tbody></table></div>` : null}
      ${ans.Refusals.length ? html`<ul id="place-refusals">${ans.Refusals.map((r) => html`<li>${r}</li>`)}</ul>` : null}
    </div>` : null}
  <//>`;
}
