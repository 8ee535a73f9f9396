// Heatmap views of the hot-page telemetry, for the Hot pages page: the
// capacity that is allocated, grouped by the host that holds it and the
// chunk it belongs to (the default: the rest of a 1 TiB pool is cold by
// construction and would drown the few chunks in use), and the whole
// pool as one square. The frames carry heat per DPA cell only; who holds
// a cell comes from the MemoryChunks the page reads (their device ranges,
// Oem.CxlPool.Extents, and grants): the holders' grants, which the box
// maps its telemetry with too. Colours are
// on a log scale: a cell's byte is already log-quantized (8 steps per
// doubling, hmu/stream), so the scale is linear in it.
import { html, useEffect, useRef } from '../lib.js';
import { fmtMiB, fmtBytes, hostColor, hostNum } from '../ui.js';
import { heat, viridisTable } from '../telemetry.js';

const LUT = viridisTable();
const MiB = 2 ** 20;
// COLS is the cells per row of a chunk's strip: wide enough that a 16 GiB
// chunk of 256 MiB cells is one row, narrow enough for a phone.
const COLS = 32;

// holders are the systems that hold (or are being given, or are giving
// back) a chunk's capacity: the heat of its cells is theirs.
export const holders = (c) => (c.Oem?.CxlPool?.Grants || [])
  .filter((g) => g.State === 'granted' || g.State === 'releasing' || g.State === 'adding')
  .map((g) => g.SystemId);

const placed = (c) => c.AddressRangeOffsetMiB !== undefined && c.AddressRangeOffsetMiB !== null;

// ranges are a chunk's device ranges in bytes, lowest first: its
// Oem.CxlPool.Extents (a chunk placed first fit may lie in several), else
// the one range its offset and size make.
export function ranges(c) {
  const ex = c.Oem?.CxlPool?.Extents;
  if (ex && ex.length) return ex.map((e) => ({ start: e.OffsetMiB * MiB, end: (e.OffsetMiB + e.SizeMiB) * MiB }));
  if (!placed(c)) return [];
  return [{ start: c.AddressRangeOffsetMiB * MiB, end: (c.AddressRangeOffsetMiB + c.MemoryChunkSizeMiB) * MiB }];
}

// offsetIn is dpa's byte offset in chunk c (its ranges end to end), or −1
// if c does not hold dpa.
export function offsetIn(c, dpa) {
  let off = 0;
  for (const r of ranges(c)) {
    if (dpa >= r.start && dpa < r.end) return off + dpa - r.start;
    off += r.end - r.start;
  }
  return -1;
}

// chunkAt is the chunk whose device ranges hold dpa, or null.
export function chunkAt(chunks, dpa) {
  return chunks.find((c) => offsetIn(c, dpa) >= 0) || null;
}

// whose names the holders of a chunk shortly ("Host2", "Host2 + Host5").
export const whose = (c) => (c ? holders(c).join(' + ') || 'no host' : '');

// groups lays the held chunks out by holder: one group per host (by
// number), then one for capacity several hosts share; each chunk with
// the range of heatmap cells it covers.
export function groups(chunks, hm) {
  const cell = 2 ** hm.cellShift;
  const by = new Map();
  for (const c of chunks) {
    const hs = holders(c);
    const rs = ranges(c);
    if (!rs.length || !hs.length) continue;
    // The cells of each range, in order, each cell once; a cell's DPA is
    // where the chunk's part of it starts.
    const idx = [];
    const dpa = [];
    for (const r of rs) {
      const a = Math.max(0, Math.floor((r.start - hm.base) / cell));
      const b = Math.min(hm.cells.length, Math.max(a + 1, Math.ceil((r.end - hm.base) / cell)));
      for (let i = a; i < b; i++) {
        if (idx.length && idx[idx.length - 1] >= i) continue;
        idx.push(i);
        dpa.push(Math.max(r.start, hm.base + i * cell));
      }
    }
    if (!idx.length) continue;
    const key = hs.length > 1 ? 'shared' : hs[0];
    if (!by.has(key)) by.set(key, { key, shared: hs.length > 1, host: hs.length > 1 ? null : hs[0], chunks: [] });
    by.get(key).chunks.push({ c, hs, idx, dpa, start: rs[0].start });
  }
  const out = [...by.values()];
  out.forEach((g) => g.chunks.sort((x, y) => x.start - y.start));
  return out.sort((x, y) => (x.shared - y.shared) || hostNum(x.host) - hostNum(y.host));
}

// colour maps a quantized cell to its viridis colour, scaled to maxQ.
function colour(q, maxQ) {
  const k = Math.round((255 * q) / Math.max(1, maxQ)) * 3;
  return [LUT[k], LUT[k + 1], LUT[k + 2]];
}

function paint(cv, cells, cols, maxQ) {
  if (!cv) return;
  const rows = Math.ceil(cells.length / cols);
  if (cv.width !== cols || cv.height !== rows) { cv.width = cols; cv.height = rows; }
  const ctx = cv.getContext('2d');
  const img = ctx.createImageData(cols, rows);
  for (let i = 0; i < cols * rows; i++) {
    const [r, g, b] = i < cells.length ? colour(cells[i], maxQ) : [0, 0, 0];
    img.data.set([r, g, b, i < cells.length ? 255 : 0], i * 4);
  }
  ctx.putImageData(img, 0, 0);
}

// cellAt is the index of the cell under a pointer event on a canvas of
// cols columns and n cells, or −1.
function cellAt(e, cols, n) {
  const r = e.currentTarget.getBoundingClientRect();
  const rows = Math.ceil(n / cols);
  const x = Math.floor(((e.clientX - r.left) / r.width) * cols);
  const y = Math.floor(((e.clientY - r.top) / r.height) * rows);
  const i = y * cols + x;
  return x >= 0 && x < cols && i >= 0 && i < n ? i : -1;
}

// hoverText names what lies under the pointer: host, chunk, offset in
// the chunk, DPA and heat.
export function hoverText(h) {
  const rate = `≈ ${heat(h.q).toFixed(h.q && heat(h.q) < 10 ? 1 : 0)} accesses/epoch`;
  if (!h.chunk) return `DPA 0x${h.dpa.toString(16)} · not allocated · ${rate}`;
  return `${whose(h.chunk)} · chunk ${h.chunk.Id} · offset ${fmtMiB(Math.max(0, offsetIn(h.chunk, h.dpa)) / MiB)} of ${fmtMiB(h.chunk.MemoryChunkSizeMiB)} · DPA 0x${h.dpa.toString(16)} · ${rate}`;
}

function ChunkStrip({ hm, item, maxQ, onHover }) {
  const ref = useRef(null);
  const cells = Uint8Array.from(item.idx, (i) => hm.cells[i]);
  const cols = Math.min(COLS, cells.length);
  useEffect(() => paint(ref.current, cells, cols, maxQ));
  const cell = 2 ** hm.cellShift;
  const hot = cells.reduce((m, q) => Math.max(m, q), 0);
  const move = (e) => {
    const i = cellAt(e, cols, cells.length);
    if (i >= 0) onHover({ dpa: item.dpa[i], q: cells[i], chunk: item.c });
  };
  const c = item.c;
  return html`<figure class="heat-chunk" data-chunk=${c.Id}>
    <figcaption><b>Chunk ${c.Id}</b>${c.DisplayName ? ' ' + c.DisplayName : ''} · ${fmtMiB(c.MemoryChunkSizeMiB)}
      ${item.hs.length > 1 ? html` · ${item.hs.map((s) => html`<span class="sw" style=${{ background: hostColor(hostNum(s)) }}></span> ${s} `)}` : null}
      <span class="hint"> · hottest ≈ ${heat(hot).toFixed(0)}</span></figcaption>
    <canvas ref=${ref} class="heat-strip" role="img" style=${{ width: `min(100%, ${cols * 22}px)`, aspectRatio: `${cols} / ${Math.ceil(cells.length / cols)}` }}
      aria-label=${`Chunk ${c.Id} of ${whose(c)}: ${cells.length} cells of ${fmtBytes(cell)}, hottest ≈ ${heat(hot).toFixed(0)} accesses per epoch`}
      onMouseMove=${move} onMouseLeave=${() => onHover(null)}></canvas>
  </figure>`;
}

// AllocatedHeat draws each held chunk's cells, grouped by holder, each
// group edged in its host's colour (shared capacity hatched).
export function AllocatedHeat({ hm, chunks, maxQ, onHover }) {
  const gs = groups(chunks, hm);
  if (!gs.length) return html`<p class="hint" id="heat-empty">No capacity is allocated to a host yet: there is nothing hot to show. The whole-pool view shows every cell.</p>`;
  return html`<div class="heat-groups" id="heat-groups">${gs.map((g) => html`<section class=${'heat-group' + (g.shared ? ' shared' : '')} data-group=${g.key}
      style=${g.shared ? undefined : { borderColor: hostColor(hostNum(g.host)) }}>
    <h3>${g.shared ? html`Shared capacity` : html`<span class="sw" style=${{ background: hostColor(hostNum(g.host)) }}></span> ${g.host}`}
      <span class="hint"> · ${g.chunks.length} chunk${g.chunks.length === 1 ? '' : 's'}, ${fmtMiB(g.chunks.reduce((a, x) => a + x.c.MemoryChunkSizeMiB, 0))}</span></h3>
    <div class="heat-chunks">${g.chunks.map((item) => html`<${ChunkStrip} key=${item.c.Id} hm=${hm} item=${item} maxQ=${maxQ} onHover=${onHover} />`)}</div>
  </section>`)}</div>`;
}

// PoolHeat draws every cell of the pool as one square.
export function PoolHeat({ hm, chunks, maxQ, onHover }) {
  const ref = useRef(null);
  const cols = Math.ceil(Math.sqrt(hm.cells.length));
  useEffect(() => paint(ref.current, hm.cells, cols, maxQ));
  const cell = 2 ** hm.cellShift;
  const move = (e) => {
    const i = cellAt(e, cols, hm.cells.length);
    if (i < 0) return;
    const dpa = hm.base + i * cell;
    onHover({ dpa, q: hm.cells[i], chunk: chunkAt(chunks, dpa) });
  };
  return html`<canvas ref=${ref} class="heat-canvas" id="heatmap" role="img" onMouseMove=${move} onMouseLeave=${() => onHover(null)}
    aria-label=${`Heatmap of the whole pool: ${hm.cells.length} cells of ${fmtBytes(cell)}; hottest ≈ ${heat(maxQ).toFixed(0)} accesses per epoch`}></canvas>`;
}

// qOf is the quantized value of heat h (stream.Quantize).
const qOf = (h) => (h > 0 ? Math.min(255, 1 + Math.floor(8 * Math.log2(1 + h))) : 0);

// HeatLegend is the colour bar with its log ticks (1, 10, 100, … up to
// the hottest cell shown).
export function HeatLegend({ maxQ }) {
  const top = heat(maxQ);
  const ticks = [];
  for (let v = 1; v <= top; v *= 10) ticks.push(v);
  const at = (v) => (100 * qOf(v)) / Math.max(1, maxQ);
  return html`<div class="heat-legend-wrap">
    <div class="heat-legend" role="img" id="heat-legend" aria-label=${`Colour scale, logarithmic: dark purple is cold, yellow is the hottest cell shown, ≈ ${top.toFixed(0)} accesses per epoch`}></div>
    <div class="heat-ticks" aria-hidden="true">
      <span style=${{ left: '0%' }}>0</span>
      ${ticks.filter((v) => at(v) < 92).map((v) => html`<span style=${{ left: at(v) + '%' }}>${v >= 1000 ? v / 1000 + 'k' : v}</span>`)}
      <span style=${{ left: '100%' }}>${top >= 1000 ? (top / 1000).toFixed(1) + 'k' : top.toFixed(0)}</span>
    </div>
    <p class="hint">Accesses per epoch (decayed), log scale.</p>
  </div>`;
}
