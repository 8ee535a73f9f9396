// Hot pages: a live heatmap of the allocated capacity by host and chunk
// (or of the whole pool) and each scope's hottest units with the host and
// chunk they lie in, from the telemetry WebSocket stream; with placement
// hints.
import { html, useState, useEffect, useRef } from '../lib.js';
import * as api from '../api.js';
import { useLive } from '../live.js';
import { Card, ErrorBox, Loading, Unavailable, useRoot, fmtMiB, fmtBytes, hostColor, hostNum } from '../ui.js';
import { decodeFrame, findStreamURI, KIND_HEATMAP, KIND_TOPK, SCOPE_POOL, SCOPE_SHARED } from '../telemetry.js';
import { AllocatedHeat, PoolHeat, HeatLegend, groups, chunkAt, offsetIn, ranges, holders, hoverText } from './heatmap.js';
const DOMAIN = '/redfish/v1/Chassis/Pool/MemoryDomains/Pool';

function wsURL(uri) {
  if (/^wss?:/.test(uri)) return uri;
  return (location.protocol === 'https:' ? 'wss://' : 'ws://') + location.host + uri;
}

// openStream connects to the telemetry WebSocket. Browsers cannot send
// X-Auth-Token with a WebSocket, so each connection first asks for a
// single-use ticket (Oem.CxlPool.StreamTicketUri) and opens the URI it
// returns.
async function openStream(oem) {
  let uri = oem.StreamUri;
  if (oem.StreamTicketUri) uri = (await api.post(oem.StreamTicketUri)).body.StreamUri;
  return new WebSocket(wsURL(uri));
}

export default function HotPages() {
  const root = useRoot();
  const [svc, setSvc] = useState(undefined);
  const [err, setErr] = useState(null);
  useEffect(() => {
    if (!root.TelemetryService) { setSvc(null); return; }
    api.get(api.id(root.TelemetryService)).then(setSvc, (e) => { setErr(e); setSvc(null); });
  }, []);
  if (svc === undefined) return html`<h1>Hot pages</h1><${Loading} />`;
  const oem = (svc && svc.Oem && svc.Oem.CxlPool) || {};
  const uri = svc && (oem.StreamUri || findStreamURI(svc));
  return html`
    <div class="page-h"><h1>Hot pages</h1></div>
    ${err ? html`<${ErrorBox} error=${err} />` : null}
    ${!svc ? html`<${Unavailable} what="This box serves no TelemetryService, so there is no hot-page telemetry to show."
        detail="Hot pages come from the device's hotness monitoring unit (CHMU) through /redfish/v1/TelemetryService and its WebSocket stream." />`
      : svc.ServiceEnabled === false ? html`<${Unavailable} what="Hot-page telemetry is switched off on this box." detail=${oem.DisabledReason || ''} />`
      : !uri ? html`<${Unavailable} what="The TelemetryService does not advertise a live stream." detail="Metric reports are still listed below." />` : html`<${Live} oem=${{ ...oem, StreamUri: uri }} svc=${svc} />`}
    ${svc && svc.ServiceEnabled !== false ? html`<${Reports} svc=${svc} />` : null}
    ${oem.CHMU ? html`<${Card} title="Monitoring unit (CHMU)"><dl class="kv">${Object.entries(oem.CHMU).map(([k, v]) => html`<dt>${k}</dt><dd class="mono">${typeof v === 'object' ? JSON.stringify(v) : String(v)}</dd>`)}</dl>
      <p class="hint">An administrator setting (PATCH TelemetryService Oem.CxlPool.CHMU); a change resets the counters.</p><//>` : null}`;
}

function Live({ oem, svc }) {
  const [st, setSt] = useState({ state: 'connecting', frames: 0, dropped: 0, lag: null, heatmap: null, topk: {} });
  const [chunks, setChunks] = useState([]);
  const [hover, setHover] = useState(null);
  const [hints, setHints] = useState(null);
  const [view, setView] = useState('allocated');
  const last = useRef({ seq: null });

  // Who holds which DPA: the chunks' placement and grants, reread when
  // capacity changes (and every 15 s).
  const loadChunks = () => api.members(DOMAIN + '/MemoryChunks').then(setChunks, () => {});
  useLive(loadChunks, { match: (r) => /\/(MemoryChunks|Connections)\b/.test(api.id(r.OriginOfCondition)) });

  useEffect(() => {
    loadChunks();
    let ws;
    let closed = false;
    let retry = null;
    const connect = async () => {
      try {
        ws = await openStream(oem);
      } catch {
        if (!closed) retry = setTimeout(connect, 3000);
        return;
      }
      if (closed) { ws.close(); return; }
      ws.binaryType = 'arraybuffer';
      ws.onopen = () => setSt((s) => ({ ...s, state: 'open' }));
      ws.onclose = () => {
        setSt((s) => ({ ...s, state: closed ? 'closed' : 'reconnecting' }));
        if (!closed) retry = setTimeout(connect, 2000);
      };
      ws.onmessage = (m) => {
        let f;
        try { f = decodeFrame(m.data); } catch { return; }
        const prev = last.current.seq;
        const gap = prev !== null && f.seq > prev + 1 ? f.seq - prev - 1 : 0;
        last.current.seq = f.seq;
        setSt((s) => ({
          ...s, state: 'open', frames: s.frames + 1, dropped: s.dropped + gap, lag: Date.now() - f.timeMs,
          heatmap: f.kind === KIND_HEATMAP ? f : s.heatmap,
          topk: f.kind === KIND_TOPK ? { ...s.topk, [f.scope]: f } : s.topk,
        }));
      };
    };
    connect();
    return () => { closed = true; clearTimeout(retry); if (ws) ws.close(); };
  }, [oem.StreamUri]);

  // The box's own placement hints, per host, from its MetricReports.
  useEffect(() => {
    if (!svc.MetricReports) return;
    const load = () => api.members(api.id(svc.MetricReports)).then((rs) => setHints(rs.filter((r) => r.Oem?.CxlPool?.Hints).map((r) => ({ id: r.Id, ...r.Oem.CxlPool.Hints }))), () => {});
    load();
    const iv = setInterval(load, 5000);
    return () => clearInterval(iv);
  }, []);

  const hm = st.heatmap;
  const cellBytes = hm ? 2 ** hm.cellShift : 0;
  // The colour scale spans the cells shown: in the allocated view the
  // hottest held cell is yellow even when a cold pool surrounds it.
  const shownQ = (() => {
    if (!hm) return 0;
    if (view === 'pool') return hm.cells.reduce((a, b) => Math.max(a, b), 0);
    let m = 0;
    for (const g of groups(chunks, hm)) for (const it of g.chunks) for (const i of it.idx) m = Math.max(m, hm.cells[i]);
    return m;
  })();
  const maxQ = Math.max(1, shownQ);
  const cold = hm ? coldChunks(hm, chunks) : [];
  // Pool (scope −2) first, then shared capacity (−1), then the hosts;
  // empty scopes are named in one line instead of a table each.
  const all = Object.values(st.topk).sort((a, b) => a.scope - b.scope);
  const topk = all.filter((t) => t.entries.length);
  const idle = all.filter((t) => !t.entries.length).map((t) => t.scope);
  const tab = (v, label) => html`<button role="tab" id=${'heat-view-' + v} aria-selected=${view === v ? 'true' : 'false'} onClick=${() => { setView(v); setHover(null); }}>${label}</button>`;

  return html`
    <${Card} title="Heatmap" actions=${html`<div role="tablist" aria-label="Heatmap view" class="row">${tab('allocated', 'Allocated capacity')}${tab('pool', 'Whole pool')}</div>
        <span class=${'live-dot ' + (st.state === 'open' ? 'open' : 'reconnecting')} id="heat-state">${st.state}</span>`}>
      <div class="heat-wrap">
        <div class="heat-main">
          ${!hm ? html`<${Loading} what="Waiting for the first heatmap frame" />`
            : view === 'pool' ? html`<${PoolHeat} hm=${hm} chunks=${chunks} maxQ=${maxQ} onHover=${setHover} />`
            : html`<${AllocatedHeat} hm=${hm} chunks=${chunks} maxQ=${maxQ} onHover=${setHover} />`}
          <${HeatLegend} maxQ=${maxQ} />
        </div>
        <div class="heat-side">
          <p><span class="stat"><b id="heat-frames">${st.frames}</b>frames</span><span class="stat"><b>${st.dropped}</b>dropped</span><span class="stat"><b>${st.lag === null ? '–' : st.lag + ' ms'}</b>lag</span></p>
          ${hm ? html`<dl class="kv"><dt>Cells</dt><dd>${hm.cells.length} × ${fmtBytes(cellBytes)}</dd><dt>Base DPA</dt><dd class="mono">0x${hm.base.toString(16)}</dd><dt>Sequence</dt><dd>${hm.seq}</dd></dl>` : null}
          <p class="mono heat-hover" id="heat-hover" aria-live="polite">${hover ? hoverText(hover) : html`<span class="hint">Point at a cell for its host, chunk, offset and access rate.</span>`}</p>
        </div>
      </div>
    <//>
    <div class="grid">
      ${topk.map((t) => html`<${TopK} t=${t} chunks=${chunks} />`)}
      ${Object.keys(st.topk).length === 0 ? html`<${Card} title="Top-K"><${Loading} what="Waiting for top-K frames" /><//>`
        : idle.length ? html`<${Card} title="Top-K"><p id="topk-idle">No hot units yet: ${idle.map(scopeName).join(', ')}.</p><//>` : null}
      <${Card} title="Hints">${hints && hints.length ? html`<${BoxHints} hints=${hints} />` : html`
        <p class="hint">Derived here from the live heatmap and the chunk placement.</p>
        ${cold.length === 0 ? html`<p>No granted chunk has been cold in the latest heatmap.</p>` : html`<ul>${cold.map((c) => html`<li>Chunk ${c.Id} (${fmtMiB(c.MemoryChunkSizeMiB)}, ${(c.Oem?.CxlPool?.Grants || []).map((g) => g.SystemId).join(', ')}) shows no accesses: a candidate to shrink or release.</li>`)}</ul>`}`}
      <//>
    </div>`;
}

// BoxHints shows each host's placement advice from the box: the units to
// keep close (promote) and the memory gone cold (shrink candidates).
function BoxHints({ hints }) {
  const useful = hints.filter((h) => (h.Promote || []).length || (h.Shrink || []).length);
  if (!useful.length) return html`<p>No advice yet: the hosts hold no memory with recorded accesses.</p>`;
  return html`<div id="hints">${useful.map((h) => html`<div class="hint-host"><h3>${h.id}</h3>
    <p class="hint">Holds ${fmtBytes(h.HeldBytes)}, of which ${fmtBytes(h.ColdBytes)} is cold.</p>
    ${(h.Promote || []).length ? html`<p><b>Keep close (promote):</b> ${(h.Promote || []).slice(0, 4).map((u) => html`<span class="chip mono">0x${Number(u.DPA).toString(16)} · ${u.Accesses}</span>`)}</p>` : null}
    ${(h.Shrink || []).length ? html`<p><b>Cold, could be given back:</b> ${(h.Shrink || []).map((a) => html`<span class="chip">${fmtBytes(a.ColdBytes)} of ${fmtBytes(a.Bytes)}${a.Memory ? ' · memory ' + api.last(api.id(a.Memory)) : ''}</span>`)}</p>` : null}
  </div>`)}</div>`;
}

const scopeName = (scope) => (scope === SCOPE_POOL ? 'whole pool' : scope === SCOPE_SHARED ? 'shared capacity' : 'Host' + scope);

// TopK lists a scope's hottest units with the host and chunk each lies
// in (from the chunks' placement), not only its device address.
function TopK({ t, chunks }) {
  const name = scopeName(t.scope);
  const unit = 2 ** t.unitShift;
  return html`<${Card} title=${`Top ${t.entries.length}: ${name}`}>
    ${t.scope >= 0 ? html`<span class="sw" style=${{ background: hostColor(t.scope) }}></span>` : null}
    <div class="table-wrap"><table class="topk" data-scope=${t.scope}><thead><tr><th>#</th><th>Host</th><th>Chunk</th><th class="num">Offset</th><th class="num">Count ± error</th><th>DPA</th></tr></thead>
      <tbody>${t.entries.slice(0, 10).map((e, i) => {
        const dpa = e.unit * unit;
        const c = chunkAt(chunks, dpa);
        const hs = c ? holders(c) : [];
        return html`<tr><td>${i + 1}</td>
          <td class="topk-host">${hs.length ? hs.map((s) => html`<span class="nowrap"><span class="sw" style=${{ background: hostColor(hostNum(s)) }}></span> ${s} </span>`) : html`<span class="hint">${t.scope >= 0 ? 'Host' + t.scope : '–'}</span>`}</td>
          <td class="topk-chunk">${c ? c.Id : '–'}</td>
          <td class="num nowrap">${c ? fmtBytes(offsetIn(c, dpa)) : '–'}</td>
          <td class="num nowrap">${e.count} <span class="hint">±${e.err}</span></td><td class="mono">0x${dpa.toString(16)}</td></tr>`;
      })}</tbody></table></div>
    <p class="hint">Unit ${fmtBytes(unit)}; no count is over by more than ${t.errorBound}. Offset is within the chunk.</p>
  <//>`;
}

function coldChunks(hm, chunks) {
  const cell = 2 ** hm.cellShift;
  return chunks.filter((c) => {
    const rs = ranges(c);
    if (!rs.length || c.Status?.State !== 'Enabled') return false;
    let seen = false;
    for (const r of rs) {
      const a = Math.floor((r.start - hm.base) / cell);
      const b = Math.ceil((r.end - hm.base) / cell);
      for (let i = Math.max(0, a); i < Math.min(b, hm.cells.length); i++) if (hm.cells[i] > 0) return false;
      seen = seen || a < hm.cells.length;
    }
    return seen;
  });
}

function Reports({ svc }) {
  const [reports, setReports] = useState(null);
  useEffect(() => {
    if (svc.MetricReports) api.members(api.id(svc.MetricReports)).then(setReports, () => setReports([]));
    else setReports([]);
  }, []);
  if (!reports || reports.length === 0) return null;
  return html`<${Card} title="Metric reports">
    ${reports.map((r) => html`<details><summary>${r.Name || r.Id} <span class="hint">${r.Timestamp || ''}</span></summary>
      <div class="table-wrap"><table><thead><tr><th>Metric</th><th>Property</th><th class="num">Value</th></tr></thead>
      <tbody>${(r.MetricValues || []).slice(0, 50).map((v) => html`<tr><td>${v.MetricId}</td><td class="mono">${v.MetricProperty || ''}</td><td class="num">${v.MetricValue}</td></tr>`)}</tbody></table></div></details>`)}
  <//>`;
}

