// Hot pages: a live heatmap of the pool and each host's hottest units,
// from the telemetry WebSocket stream; with placement hints.
import { html, useState, useEffect, useRef } from '../lib.js';
import * as api from '../api.js';
import { Card, ErrorBox, Loading, Unavailable, useRoot, fmtMiB, fmtBytes, hostColor } from '../ui.js';
import { decodeFrame, heat, viridisTable, findStreamURI, KIND_HEATMAP, KIND_TOPK, SCOPE_POOL, SCOPE_SHARED } from '../telemetry.js';

const LUT = viridisTable();
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
  const canvas = useRef(null);
  const [st, setSt] = useState({ state: 'connecting', frames: 0, dropped: 0, lag: null, heatmap: null, topk: {} });
  const [chunks, setChunks] = useState([]);
  const [hover, setHover] = useState(null);
  const [hints, setHints] = useState(null);
  const last = useRef({ seq: null, heatmap: null });

  useEffect(() => {
    api.members(DOMAIN + '/MemoryChunks').then(setChunks, () => {});
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
        if (f.kind === KIND_HEATMAP) { last.current.heatmap = f; draw(canvas.current, f); }
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
  const cols = hm ? Math.ceil(Math.sqrt(hm.cells.length)) : 0;
  const maxQ = hm ? hm.cells.reduce((a, b) => Math.max(a, b), 0) : 0;
  const cellBytes = hm ? 2 ** hm.cellShift : 0;
  const onMove = (e) => {
    if (!hm) return;
    const r = e.currentTarget.getBoundingClientRect();
    const x = Math.floor(((e.clientX - r.left) / r.width) * cols);
    const y = Math.floor(((e.clientY - r.top) / r.height) * Math.ceil(hm.cells.length / cols));
    const i = y * cols + x;
    if (i >= 0 && i < hm.cells.length) setHover({ i, q: hm.cells[i] });
  };
  const owner = (dpa) => chunks.find((c) => c.AddressRangeOffsetMiB !== undefined && dpa >= c.AddressRangeOffsetMiB * 2 ** 20 && dpa < (c.AddressRangeOffsetMiB + c.MemoryChunkSizeMiB) * 2 ** 20);
  const hoverDPA = hover && hm ? hm.base + hover.i * cellBytes : 0;
  const hoverChunk = hover ? owner(hoverDPA) : null;
  const cold = hm ? coldChunks(hm, chunks) : [];
  // Pool (scope −2) first, then shared capacity (−1), then the hosts;
  // empty scopes are named in one line instead of a table each.
  const all = Object.values(st.topk).sort((a, b) => a.scope - b.scope);
  const topk = all.filter((t) => t.entries.length);
  const idle = all.filter((t) => !t.entries.length).map((t) => t.scope);

  return html`
    <${Card} title="Pool heatmap" actions=${html`<span class=${'live-dot ' + (st.state === 'open' ? 'open' : 'reconnecting')} id="heat-state">${st.state}</span>`}>
      <div class="heat-wrap">
        <div>
          <canvas ref=${canvas} class="heat-canvas" id="heatmap" role="img" onMouseMove=${onMove} onMouseLeave=${() => setHover(null)}
            aria-label=${hm ? `Heatmap of ${hm.cells.length} cells of ${fmtBytes(cellBytes)}; hottest cell heat ${heat(maxQ).toFixed(0)}` : 'Waiting for the first heatmap'}></canvas>
          <div class="heat-legend" role="img" aria-label="Colour scale: dark purple is cold, yellow is hottest" id="heat-legend"></div>
          <div class="heat-scale"><span>cold (0)</span><span>≈ ${heat(maxQ).toFixed(0)} accesses/epoch</span></div>
        </div>
        <div>
          <p><span class="stat"><b id="heat-frames">${st.frames}</b>frames</span><span class="stat"><b>${st.dropped}</b>dropped</span><span class="stat"><b>${st.lag === null ? '–' : st.lag + ' ms'}</b>lag</span></p>
          ${hm ? html`<dl class="kv"><dt>Cells</dt><dd>${hm.cells.length} × ${fmtBytes(cellBytes)}</dd><dt>Base DPA</dt><dd class="mono">0x${hm.base.toString(16)}</dd><dt>Sequence</dt><dd>${hm.seq}</dd></dl>` : html`<${Loading} what="Waiting for the first heatmap frame" />`}
          ${hover ? html`<p class="mono" aria-live="polite">cell ${hover.i} · DPA 0x${hoverDPA.toString(16)} · heat ≈ ${heat(hover.q).toFixed(1)}${hoverChunk ? ` · chunk ${hoverChunk.Id} (${(hoverChunk.Oem?.CxlPool?.Grants || []).map((g) => g.SystemId).join(', ') || 'unassigned'})` : ''}</p>` : html`<p class="hint">Point at a cell for its address, heat and owner.</p>`}
        </div>
      </div>
    <//>
    <div class="grid">
      ${topk.map((t) => html`<${TopK} t=${t} />`)}
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

function TopK({ t }) {
  const name = scopeName(t.scope);
  return html`<${Card} title=${`Top ${t.entries.length}: ${name}`}>
    ${t.scope >= 0 ? html`<span class="sw" style=${{ background: hostColor(t.scope) }}></span>` : null}
    <table class="topk" data-scope=${t.scope}><thead><tr><th>#</th><th>DPA</th><th class="num">Count</th><th class="num">± error</th></tr></thead>
      <tbody>${t.entries.slice(0, 10).map((e, i) => html`<tr><td>${i + 1}</td><td class="mono">0x${(e.unit * 2 ** t.unitShift).toString(16)}</td><td class="num">${e.count}</td><td class="num">${e.err}</td></tr>`)}</tbody></table>
    <p class="hint">Unit ${fmtBytes(2 ** t.unitShift)}; no count is over by more than ${t.errorBound}.</p>
  <//>`;
}

function coldChunks(hm, chunks) {
  const cell = 2 ** hm.cellShift;
  return chunks.filter((c) => {
    if (c.AddressRangeOffsetMiB === undefined || c.Status?.State !== 'Enabled') return false;
    const a = Math.floor((c.AddressRangeOffsetMiB * 2 ** 20 - hm.base) / cell);
    const b = Math.ceil(((c.AddressRangeOffsetMiB + c.MemoryChunkSizeMiB) * 2 ** 20 - hm.base) / cell);
    for (let i = Math.max(0, a); i < Math.min(b, hm.cells.length); i++) if (hm.cells[i] > 0) return false;
    return a < hm.cells.length;
  });
}

function draw(cv, f) {
  if (!cv) return;
  const n = f.cells.length;
  const cols = Math.ceil(Math.sqrt(n));
  const rows = Math.ceil(n / cols);
  if (cv.width !== cols || cv.height !== rows) { cv.width = cols; cv.height = rows; }
  const ctx = cv.getContext('2d');
  const img = ctx.createImageData(cols, rows);
  let maxQ = 1;
  for (let i = 0; i < n; i++) if (f.cells[i] > maxQ) maxQ = f.cells[i];
  for (let i = 0; i < n; i++) {
    const k = Math.round((255 * f.cells[i]) / maxQ) * 3;
    img.data[i * 4] = LUT[k];
    img.data[i * 4 + 1] = LUT[k + 1];
    img.data[i * 4 + 2] = LUT[k + 2];
    img.data[i * 4 + 3] = 255;
  }
  ctx.putImageData(img, 0, 0);
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

