// Topology: the box as an SVG: its eight host heads, each head's link,
// and where each host's memory chunks lie in the device's capacity,
// redrawn live from the event stream.
import { html, useState, useEffect } from '../lib.js';
import * as api from '../api.js';
import { useLive } from '../live.js';
import { Card, ErrorBox, Loading, fmtMiB, hostColor, hostNum, LinkBadge } from '../ui.js';
import { holders, ranges } from './heatmap.js';

const DOMAIN = '/redfish/v1/Chassis/Pool/MemoryDomains/Pool';

async function load() {
  const [dom, systems, chunks, dcd] = await Promise.all([
    api.get(DOMAIN), api.members('/redfish/v1/Systems'), api.members(DOMAIN + '/MemoryChunks'),
    api.get('/redfish/v1/Chassis/Pool/PCIeDevices/DCD').catch(() => null),
  ]);
  return { dom, systems, chunks, dcd };
}

const W = 1000;
const H = 600;
const BOX = { x: 330, y: 40, w: 340, h: 520 };
const POOL = { x: BOX.x + 95, y: BOX.y + 60, w: 150, h: BOX.h - 110 };

export default function Topology() {
  const [d, setD] = useState(null);
  const [err, setErr] = useState(null);
  const reload = () => load().then((x) => { setD(x); setErr(null); }, setErr);
  useEffect(() => { reload(); }, []);
  useLive(reload, { every: 10000 });
  if (!d) return html`<h1>Topology</h1>${err ? html`<${ErrorBox} error=${err} />` : html`<${Loading} />`}`;

  const { dom, systems, chunks, dcd } = d;
  const total = dom.MemorySizeMiB || 1;
  const n = systems.length;
  const left = Math.ceil(n / 2);
  const yFor = (i, count) => BOX.y + 50 + ((BOX.h - 100) * (i + 0.5)) / count;
  const heads = systems.map((s, i) => {
    const isLeft = i < left;
    const k = isLeft ? i : i - left;
    const y = yFor(k, isLeft ? left : n - left);
    return { s, i, isLeft, y, px: isLeft ? BOX.x : BOX.x + BOX.w, hx: isLeft ? 40 : W - 240, up: !!s.Oem?.CxlPool?.LinkUp };
  });
  const headOf = Object.fromEntries(heads.map((h) => [h.s.Id, h]));
  const yOf = (mib) => POOL.y + (POOL.h * mib) / total;
  const placed = chunks.filter((c) => c.AddressRangeOffsetMiB !== undefined);
  const unplaced = chunks.filter((c) => c.AddressRangeOffsetMiB === undefined);
  // Regions lie one after the other on the device, in index order.
  const regions = (dom.Oem?.CxlPool?.Regions || []).map((r, i, all) => ({ ...r, off: all.slice(0, i).reduce((a, x) => a + x.SizeMiB, 0) }));

  const desc = `The memory box with ${n} host heads. ` + heads.map((h) => `${h.s.Id} link ${h.up ? 'up' : 'down'}`).join(', ') + '. ' +
    regions.map((r) => `Region ${r.Region}, ${r.Sharable ? 'sharable' : 'not sharable'}: ${fmtMiB(r.SizeMiB - r.FreeMiB)} used, ${fmtMiB(r.FreeMiB)} free`).join('. ') + '. ' +
    placed.map((c) => `Chunk ${c.Id} (${fmtMiB(c.MemoryChunkSizeMiB)}) to ${holders(c).join(' and ') || 'no host'}`).join('. ');

  return html`
    <div class="page-h"><h1>Topology</h1><span class="hint">Updated live from the event stream</span></div>
    ${err ? html`<${ErrorBox} error=${err} />` : null}
    <${Card} class="topo">
      <svg viewBox=${`0 0 ${W} ${H}`} role="img" aria-labelledby="topo-title topo-desc" id="topology-svg">
        <title id="topo-title">Topology of the memory box</title>
        <desc id="topo-desc">${desc}</desc>
        <defs>${systems.map((s) => html`<pattern id=${'hatch-' + s.Id} width="8" height="8" patternUnits="userSpaceOnUse" patternTransform="rotate(45)">
          <rect width="8" height="8" fill=${hostColor(hostNum(s.Id))} /><rect width="3" height="8" fill="#ffffff" opacity="0.55" /></pattern>`)}</defs>
        <rect class="box" x=${BOX.x} y=${BOX.y} width=${BOX.w} height=${BOX.h} rx="14" />
        <text x=${BOX.x + BOX.w / 2} y=${BOX.y + 24} text-anchor="middle" font-weight="700">CXL memory box</text>
        <text x=${BOX.x + BOX.w / 2} y=${BOX.y + 42} text-anchor="middle" class="small">${dcd ? `${dcd.Model || 'DCD'} · ${fmtMiB(total)}` : fmtMiB(total)}</text>
        <rect class="pool-bg" x=${POOL.x} y=${POOL.y} width=${POOL.w} height=${POOL.h} rx="4" />
        <text x=${POOL.x + POOL.w / 2} y=${POOL.y + POOL.h + 18} text-anchor="middle" class="small">device capacity (DPA)</text>
        ${regions.map((r) => html`<g data-region=${r.Region} class=${'region ' + (r.Sharable ? 'sharable' : 'private')}>
          <rect class="region-band" x=${POOL.x} y=${yOf(r.off)} width=${POOL.w} height=${(POOL.h * r.SizeMiB) / total} />
          ${r.off > 0 ? html`<line x1=${POOL.x - 6} x2=${POOL.x + POOL.w + 6} y1=${yOf(r.off)} y2=${yOf(r.off)} class="region-edge" />` : null}
        </g>`)}
        ${placed.map((c) => {
          const hs = holders(c);
          // Each of its device ranges; the lines leave from the first.
          const parts = ranges(c).map((r) => ({ y: yOf(r.start / 2 ** 20), h: Math.max(6, (POOL.h * (r.end - r.start)) / 2 ** 20 / total) }));
          const { y, h } = parts[0] || { y: yOf(c.AddressRangeOffsetMiB), h: 6 };
          const fill = hs.length > 1 ? `url(#hatch-${hs[0]})` : hs.length ? hostColor(hostNum(hs[0])) : undefined;
          return html`<g data-chunk=${c.Id} data-holders=${hs.join(' ')}>
            ${parts.map((p) => html`<rect x=${POOL.x} y=${p.y} width=${POOL.w} height=${p.h} fill=${fill} class=${fill ? undefined : 'reserved-chunk'} stroke="#000" stroke-width="0.5"><title>Chunk ${c.Id}: ${fmtMiB(c.MemoryChunkSizeMiB)} at ${fmtMiB(c.AddressRangeOffsetMiB)}${parts.length > 1 ? ` in ${parts.length} ranges` : ''}, ${hs.length > 1 ? 'shared by ' + hs.join(', ') : hs[0] || 'unassigned'}</title></rect>`)}
            ${hs.map((sid) => {
              const hd = headOf[sid];
              if (!hd) return null;
              const sx = hd.isLeft ? POOL.x : POOL.x + POOL.w;
              const cy = y + h / 2;
              const mx = (sx + hd.px) / 2;
              return html`<path class=${'chunk-line' + (hs.length > 1 ? ' shared' : '')} data-to=${sid} stroke=${hostColor(hostNum(sid))} d=${`M ${hd.px} ${hd.y} C ${mx} ${hd.y}, ${mx} ${cy}, ${sx} ${cy}`} />`;
            })}
          </g>`;
        })}
        ${regions.map((r) => {
          // The label sits at the region's foot: chunks are placed from
          // its base, so the foot is the last part to fill.
          const y1 = yOf(r.off + r.SizeMiB);
          return html`<g class="region-label" data-region-label=${r.Region}>
            <rect x=${POOL.x + 4} y=${y1 - 40} width=${POOL.w - 8} height="36" rx="4" />
            <text x=${POOL.x + POOL.w / 2} y=${y1 - 25} text-anchor="middle">Region ${r.Region} · ${r.Sharable ? 'sharable' : 'not sharable'}</text>
            <text x=${POOL.x + POOL.w / 2} y=${y1 - 10} text-anchor="middle" class="small">${fmtMiB(r.SizeMiB - r.FreeMiB)} used · ${fmtMiB(r.FreeMiB)} free</text>
          </g>`;
        })}
        ${heads.map((h) => {
          const color = hostColor(hostNum(h.s.Id));
          const o = h.s.Oem?.CxlPool || {};
          return html`<g data-head=${h.s.Id}>
            <line class=${'link ' + (h.up ? 'up' : 'down')} stroke=${h.up ? color : undefined} x1=${h.isLeft ? h.hx + 200 : h.hx} y1=${h.y} x2=${h.px} y2=${h.y} />
            ${!h.up ? html`<text x=${(h.px + (h.isLeft ? h.hx + 200 : h.hx)) / 2} y=${h.y - 7} text-anchor="middle" class="label-bad">link down</text>` : null}
            <rect class="port" x=${h.px - 9} y=${h.y - 9} width="18" height="18" rx="3" />
            <text x=${h.isLeft ? h.px + 14 : h.px - 14} y=${h.y + 4} text-anchor=${h.isLeft ? 'start' : 'end'} class="small">LD${hostNum(h.s.Id)}·p${o.Port}</text>
            <rect class="hostbox" x=${h.hx} y=${h.y - 26} width="200" height="52" rx="8" stroke=${color} />
            <text x=${h.hx + 12} y=${h.y - 6} font-weight="700">${h.s.Name}</text>
            <text x=${h.hx + 12} y=${h.y + 14} class="small">${fmtMiB(o.GrantedMiB)} granted${o.QuotaMiB ? ` · quota ${fmtMiB(o.QuotaMiB)}` : ''}</text>
          </g>`;
        })}
      </svg>
    <//>
    <${Card} title="Chunks on the device">
      ${placed.length === 0 ? html`<p class="hint">No chunk is placed on the device yet.</p>` : html`<div class="table-wrap"><table id="topo-chunks">
        <thead><tr><th>Chunk</th><th>Region</th><th class="num">Size</th><th class="num">Offset</th><th>Held by</th></tr></thead>
        <tbody>${placed.slice().sort((a, b) => a.AddressRangeOffsetMiB - b.AddressRangeOffsetMiB).map((c) => {
          const hs = holders(c);
          const r = c.Oem?.CxlPool?.Region;
          const reg = regions.find((x) => x.Region === r);
          return html`<tr data-chunk=${c.Id}><td>${c.Id}${c.DisplayName ? ' ' + c.DisplayName : ''}</td>
            <td>${r === undefined ? '–' : `${r}${reg ? (reg.Sharable ? ' · sharable' : ' · not sharable') : ''}`}</td>
            <td class="num">${fmtMiB(c.MemoryChunkSizeMiB)}</td><td class="num">${fmtMiB(c.AddressRangeOffsetMiB)}${ranges(c).length > 1 ? html`<div class="hint">${ranges(c).length} ranges</div>` : null}</td>
            <td>${hs.length ? hs.map((sid) => html`<span class="nowrap"><span class="sw" style=${{ background: hostColor(hostNum(sid)) }}></span> ${sid} </span>`) : html`<span class="hint">nobody</span>`}${hs.length > 1 ? html` <span class="badge info">shared</span>` : null}</td></tr>`;
        })}</tbody></table></div>`}
      <p class="hint">Hatched chunks are shared: a line runs from the chunk to every host that holds it.</p>
    <//>
    <div class="grid">
      <${Card} title="Heads">
        <ul class="plain">${systems.map((s) => html`<li><span class="sw" style=${{ background: hostColor(hostNum(s.Id)) }}></span> ${s.Name} <${LinkBadge} up=${s.Oem?.CxlPool?.LinkUp} /></li>`)}</ul>
      <//>
      <${Card} title="Reserved, not placed">
        ${unplaced.length === 0 ? html`<p class="hint">Every chunk is placed on the device.</p>` : html`<ul class="plain">${unplaced.map((c) => html`<li>Chunk ${c.Id}: ${fmtMiB(c.MemoryChunkSizeMiB)} (${c.Status?.State})</li>`)}</ul>`}
        <p class="hint">A chunk gets device addresses when it is first offered to a host. Striped chunks are shared by several hosts.</p>
      <//>
    </div>`;
}
