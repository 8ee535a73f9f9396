// Exports: pool memory made reachable by remote racks over the network
// (the RDMA fabric: /redfish/v1/Fabrics/RDMA). Each Connection grants a
// remote endpoint access to a chunk; create, revoke and watch traffic.
import { html, useState, useEffect, useRef } from '../lib.js';
import * as api from '../api.js';
import { useLive } from '../live.js';
import { Card, ErrorBox, Loading, Unavailable, Modal, Field, Badge, Confirm, fmtMiB, fmtBytes, fmtTime, useRoot } from '../ui.js';
import { TimeChart } from '../chart.js';
import * as histo from '../history.js';

const CHUNKS = '/redfish/v1/Chassis/Pool/MemoryDomains/Pool/MemoryChunks';

async function findFabric(root) {
  if (!root.Fabrics) return null;
  const fabrics = await api.members(api.id(root.Fabrics));
  return fabrics.find((f) => f.Id === 'RDMA' || /RoCE|TCP|InfiniBand/i.test(f.FabricType || '')) || null;
}

// counters reads the traffic counters an export reports (Oem.CxlPool).
function counters(c) {
  const o = c.Oem?.CxlPool || {};
  const t = o.Traffic || o;
  const pick = (...ks) => { for (const k of ks) if (typeof t[k] === 'number') return t[k]; return undefined; };
  return { read: pick('BytesRead'), written: pick('BytesWritten'), ops: (t.Reads || 0) + (t.Writes || 0) + (t.Atomics || 0) };
}

export default function Exports({ principal }) {
  const root = useRoot();
  const [fabric, setFabric] = useState(undefined);
  const [conns, setConns] = useState(null);
  const [err, setErr] = useState(null);
  const [dlg, setDlg] = useState(null);
  const hist = useRef({ times: [], prev: {}, rate: {} });
  // The box's history of the exports' throughput: the last hour at once.
  const [past, setPast] = useState(null);
  useEffect(() => {
    const get = () => histo.load('ExportHistory').then(setPast, () => {});
    get();
    const iv = setInterval(get, 30000);
    return () => clearInterval(iv);
  }, []);

  const reload = async () => {
    try {
      const f = fabric === undefined ? await findFabric(root) : fabric;
      if (fabric === undefined) setFabric(f);
      if (!f || !f.Connections) { setConns([]); return; }
      const cs = await api.members(api.id(f.Connections));
      track(hist.current, cs);
      setConns(cs);
      setErr(null);
    } catch (e) { setErr(e); if (fabric === undefined) setFabric(null); }
  };
  useEffect(() => { reload(); }, []);
  useLive(reload, { every: 3000 });

  if (fabric === undefined) return html`<h1>Exports</h1><${Loading} />`;
  if (!fabric) return html`<h1>Exports</h1>${err ? html`<${ErrorBox} error=${err} />` : null}<${Unavailable} what="This box serves no RDMA/TCP fabric for remote racks (/redfish/v1/Fabrics/RDMA)." detail="Exports of pool memory to remote racks appear here once the export service is part of the box's API." />`;
  const can = principal.can.components;
  const h = hist.current;
  return html`
    <div class="page-h"><h1>Exports</h1><span class="hint">${fabric.Name || fabric.Id} · ${fabric.FabricType || ''}</span>
      ${can ? html`<button class="primary" onClick=${() => setDlg({ kind: 'create' })} id="export-create">New export…</button>` : null}</div>
    <${ErrorBox} error=${err} />
    ${past && past.times.length > 1 ? html`<${Card} title="Throughput over the last hour (all exports)"><${TimeChart} id="export-history" label="Export throughput over the last hour"
      unit="MiB/s" times=${past.times} series=${past.series.map((x, i) => ({ label: x.metric === 'ExportReadBytesPerSecond' ? 'Read' : 'Written',
        color: i ? '#D55E00' : '#0072B2', values: x.values.map((v) => (v === null ? null : v / 2 ** 20)) }))} /><//>` : null}
    ${h.times.length > 1 && Object.keys(h.rate).length ? html`<${Card} title="Traffic per export (live)"><${TimeChart} label="Export throughput" unit="MiB/s" times=${h.times} series=${Object.entries(h.rate).map(([label, values]) => ({ label, values }))} /><//>` : null}
    <${Card} title=${`Exports (${conns ? conns.length : '…'})`}>
      ${!conns ? html`<${Loading} />` : conns.length === 0 ? html`<p class="hint">No exports.</p>` : html`<div class="table-wrap"><table id="exports">
        <thead><tr><th>Export</th><th>Remote client</th><th>Chunk</th><th>Access</th><th>Expires</th><th class="num">Read</th><th class="num">Written</th><th class="num">Operations</th><th>State</th><th></th></tr></thead>
        <tbody>${conns.map((c) => {
          const k = counters(c);
          const info = c.MemoryChunkInfo?.[0] || {};
          return html`<tr><td>${c.Name || c.Id}</td><td>${c.Oem?.CxlPool?.Client || (c.Links?.InitiatorEndpoints || []).map((e) => api.last(api.id(e))).join(', ')}</td>
            <td>${api.last(api.id(info.MemoryChunk))}</td><td>${(info.AccessCapabilities || []).join(', ')}</td>
            <td>${c.Oem?.CxlPool?.Expiry ? fmtTime(c.Oem.CxlPool.Expiry) : 'never'}</td>
            <td class="num">${fmtBytes(k.read)}</td><td class="num">${fmtBytes(k.written)}</td><td class="num">${k.ops}</td><td><${Badge} value=${c.Status?.State} /></td>
            <td>${can ? html`<button class="small danger" aria-label=${'Revoke export ' + (c.Name || c.Id)} onClick=${() => setDlg({ kind: 'revoke', conn: c })}>Revoke</button>` : null}</td></tr>`;
        })}</tbody></table></div>`}
    <//>
    ${dlg?.kind === 'create' ? html`<${CreateExport} fabric=${fabric} onClose=${() => { setDlg(null); reload(); }} />` : null}
    ${dlg?.kind === 'revoke' ? html`<${RevokeExport} conn=${dlg.conn} onClose=${() => { setDlg(null); reload(); }} />` : null}`;
}

function track(h, conns) {
  const now = Date.now() / 1000;
  const dt = h.times.length ? now - h.times[h.times.length - 1] : 0;
  h.times.push(now);
  for (const c of conns) {
    const k = counters(c);
    const total = (k.read || 0) + (k.written || 0);
    const name = c.Name || c.Id;
    if (!h.rate[name]) h.rate[name] = new Array(h.times.length - 1).fill(null);
    const prev = h.prev[name];
    h.rate[name].push(prev !== undefined && dt > 0 ? Math.max(0, (total - prev) / dt / 2 ** 20) : null);
    h.prev[name] = total;
  }
  for (const k of Object.keys(h.rate)) if (h.rate[k].length < h.times.length) h.rate[k].push(null);
  if (h.times.length > 100) { h.times.shift(); for (const k of Object.keys(h.rate)) h.rate[k].shift(); }
}

function CreateExport({ fabric, onClose }) {
  const [chunks, setChunks] = useState(null);
  const [chunk, setChunk] = useState('');
  const [client, setClient] = useState('');
  const [read, setRead] = useState(true);
  const [write, setWrite] = useState(false);
  const [expires, setExpires] = useState('');
  const [err, setErr] = useState(null);
  const [result, setResult] = useState(null);
  const [busy, setBusy] = useState(false);
  // Only capacity placed on the device can be exported: chunks held by a host.
  useEffect(() => { api.members(CHUNKS).then((all) => { const cs = all.filter((c) => c.Status?.State === 'Enabled'); setChunks(cs); if (cs[0]) setChunk(cs[0]['@odata.id']); }, setErr); }, []);
  const submit = async (e) => {
    e.preventDefault();
    setBusy(true); setErr(null);
    try {
      const caps = [read && 'Read', write && 'Write'].filter(Boolean);
      const body = {
        ConnectionType: 'Memory',
        MemoryChunkInfo: [{ MemoryChunk: { '@odata.id': chunk }, AccessCapabilities: caps }],
        Oem: { CxlPool: { Client: client, ...(expires ? { Expiry: new Date(expires).toISOString() } : {}) } },
      };
      const r = await api.startTask('POST', api.id(fabric.Connections), body);
      setResult(r.body || {});
    } catch (x) { setErr(x); } finally { setBusy(false); }
  };
  const token = result && (result.Oem?.CxlPool?.Token || result.Oem?.CxlPool?.Secret);
  return html`<${Modal} title="New export" onClose=${onClose}>
    ${result ? html`<p class="alert ok" role="status">Export created.</p>
      ${token ? html`<p>Give the remote client this token now; it is not shown again:</p><p class="mono" id="export-token">${token}</p>` : null}
      <div class="dlg-actions"><button class="primary" onClick=${onClose}>Close</button></div>` : html`
    <form onSubmit=${submit}>
      <${Field} label="Memory chunk" id="exp-chunk">${!chunks ? html`<${Loading} />` : chunks.length === 0 ? html`<p class="hint" id="exp-chunk">No chunk holds capacity on the device yet: grant one to a host first.</p>` : html`<select id="exp-chunk" value=${chunk} onChange=${(e) => setChunk(e.target.value)} required>
        ${chunks.map((c) => html`<option value=${c['@odata.id']}>#${c.Id} · ${fmtMiB(c.MemoryChunkSizeMiB)} · ${c.Status?.State}</option>`)}</select>`}<//>
      <${Field} label="Remote client name" id="exp-client" hint="Letters, digits, dot, dash and underscore; up to 64."><input id="exp-client" required pattern="[A-Za-z0-9][A-Za-z0-9._\\-]{0,63}" value=${client} onInput=${(e) => setClient(e.target.value)} /><//>
      <fieldset class="field"><legend>Access</legend>
        <label><input type="checkbox" checked=${read} onChange=${(e) => setRead(e.target.checked)} /> Read</label>
        <label><input type="checkbox" checked=${write} onChange=${(e) => setWrite(e.target.checked)} /> Write</label></fieldset>
      <${Field} label="Expires (optional)" id="exp-expires"><input id="exp-expires" type="datetime-local" value=${expires} onInput=${(e) => setExpires(e.target.value)} /><//>
      <${ErrorBox} error=${err} />
      <div class="dlg-actions"><button type="button" onClick=${onClose}>Cancel</button><button class="primary" type="submit" disabled=${busy || !chunk || !(read || write)}>Create export</button></div>
    </form>`}
  <//>`;
}

function RevokeExport({ conn, onClose }) {
  const [err, setErr] = useState(null);
  const [busy, setBusy] = useState(false);
  const go = async () => {
    setBusy(true);
    try { await api.startTask('DELETE', conn['@odata.id']); onClose(); } catch (e) { setErr(e); setBusy(false); }
  };
  return html`<${Confirm} title=${'Revoke export ' + (conn.Name || conn.Id)} danger confirmLabel="Revoke" onConfirm=${go} onClose=${onClose} busy=${busy}>
    <p>The remote client loses access at once; operations in flight fail.</p><${ErrorBox} error=${err} />
  <//>`;
}
