// Hosts & capacity: one row per host head with its link, what it holds and
// its quota; grant (reserve a chunk, then connect it), share a chunk
// another host holds, release. Every change is confirmed first and its
// task followed live; a refusal shows the server's message.
import { html, useState, useEffect, useRef } from '../lib.js';
import * as api from '../api.js';
import { useLive } from '../live.js';
import { Card, Badge, LinkBadge, ErrorBox, Loading, Modal, TaskView, Field, Notice, Meter, fmtMiB, hostColor, hostNum } from '../ui.js';

const DOMAIN = '/redfish/v1/Chassis/Pool/MemoryDomains/Pool';
const CHUNKS = DOMAIN + '/MemoryChunks';
const CONNS = '/redfish/v1/Fabrics/CXL/Connections';
const initiator = (sys) => '/redfish/v1/Fabrics/CXL/Endpoints/' + sys;

async function load() {
  const [dom, systems, chunks, conns] = await Promise.all([
    api.get(DOMAIN), api.members('/redfish/v1/Systems'), api.members(CHUNKS), api.members(CONNS),
  ]);
  const chunkBy = Object.fromEntries(chunks.map((c) => [c['@odata.id'], c]));
  // Per host: its connections with their chunks.
  const byHost = {};
  for (const c of conns) {
    const host = api.last(api.id(c.Links?.InitiatorEndpoints?.[0]));
    const chunk = chunkBy[api.id(c.MemoryChunkInfo?.[0]?.MemoryChunk)];
    (byHost[host] = byHost[host] || []).push({ conn: c, chunk });
  }
  return { dom, systems, chunks, conns, byHost };
}

export default function Hosts({ principal, query }) {
  const [data, setData] = useState(null);
  const [err, setErr] = useState(null);
  const [dlg, setDlg] = useState(null);
  const reload = () => load().then((d) => { setData(d); setErr(null); }, setErr);
  useEffect(() => { reload(); }, []);
  useLive(reload, { every: 10000 });
  // A deep link (#/hosts?grant=Host2) opens the grant dialog whatever the
  // role: the box decides, and the console shows its answer.
  useEffect(() => {
    const g = query.get('grant');
    if (g) setDlg({ kind: 'grant', host: g });
  }, []);

  if (!data) return html`<h1>Hosts & capacity</h1>${err ? html`<${ErrorBox} error=${err} />` : html`<${Loading} />`}`;
  const { dom, systems, chunks, byHost } = data;
  const may = (sys) => api.canChangeHost(principal, sys);
  const sharable = dom.Oem?.CxlPool?.Regions?.some((r) => r.Sharable);
  const close = () => { setDlg(null); reload(); if (location.hash.includes('?')) history.replaceState(null, '', '#/hosts'); };
  const focus = query.get('host');

  return html`
    <div class="page-h"><h1>Hosts & capacity</h1>
      <span class="hint">Pool free: <b>${fmtMiB(dom.Oem?.CxlPool?.FreeMiB)}</b> of ${fmtMiB(dom.MemorySizeMiB)}</span></div>
    ${err ? html`<${ErrorBox} error=${err} />` : null}
    ${!principal.can.components && !principal.can.hostCapacity ? html`<${Notice}>Your role (${principal.role}) can view capacity but not change it.<//>` : null}
    <${Card} title=${`Hosts (${systems.length})`} id="hosts">
      <div class="table-wrap"><table id="hosts-table">
        <thead><tr><th>Host</th><th>Head</th><th>Link</th><th class="num">Granted</th><th class="num">Quota</th><th>Memory chunks</th><th>Actions</th></tr></thead>
        <tbody>${systems.map((s) => {
          const o = s.Oem?.CxlPool || {};
          const held = byHost[s.Id] || [];
          const shareable = sharable && chunks.some((c) => c.Oem?.CxlPool?.Sharable && c.Status?.State === 'Enabled' && !held.some((h) => h.chunk && h.chunk['@odata.id'] === c['@odata.id']));
          return html`<tr data-host=${s.Id} class=${focus === s.Id ? 'focus' : ''}>
            <td><span class="sw" style=${{ background: hostColor(hostNum(s.Id)) }}></span> <b>${s.Name}</b>${s.Name !== s.Id ? html` <span class="hint">${s.Id}</span>` : null}</td>
            <td>LD ${hostNum(s.Id)} · port ${o.Port}</td>
            <td><${LinkBadge} up=${o.LinkUp} />${s.PowerState === 'Off' ? html` <span class="badge bad">power off</span>` : null}</td>
            <td class="num">${fmtMiB(o.GrantedMiB)}</td>
            <td class="num">${o.QuotaMiB ? html`${fmtMiB(o.QuotaMiB)}<${Meter} value=${o.GrantedMiB} max=${o.QuotaMiB} label=${`${s.Id} quota use`} />` : html`<span class="hint">none</span>`}</td>
            <td class="chunks">${held.length === 0 ? html`<span class="hint">none</span>` : held.map(({ conn, chunk }) => html`
              <span class="chip" data-connection=${conn.Id}>
                <span>#${chunk ? chunk.Id : '?'} ${fmtMiB(conn.Oem?.CxlPool?.GrantedMiB || chunk?.MemoryChunkSizeMiB)}</span>
                ${chunk?.Oem?.CxlPool?.Grants?.length > 1 ? html`<span class="badge info">shared</span>` : null}
                <${Badge} value=${conn.Status?.State} label=${conn.Oem?.CxlPool?.GrantState || conn.Status?.State} />
                ${may(s.Id) && conn.Oem?.CxlPool?.GrantState === 'granted' ? html`<button class="small" aria-label=${`Release chunk ${chunk ? chunk.Id : conn.Id} from ${s.Id}`}
                  onClick=${() => setDlg({ kind: 'release', host: s.Id, conn, chunk })}>Release</button>` : null}
              </span>`)}</td>
            <td class="actions">
              ${may(s.Id) ? html`<button class="primary small" aria-label=${'Grant capacity to ' + s.Id} disabled=${!o.LinkUp}
                  title=${o.LinkUp ? '' : 'The host link is down'} onClick=${() => setDlg({ kind: 'grant', host: s.Id })}>Grant…</button>` : null}
              ${may(s.Id) && shareable ? html`<button class="small" aria-label=${'Share a chunk with ' + s.Id} disabled=${!o.LinkUp}
                  onClick=${() => setDlg({ kind: 'share', host: s.Id })}>Share…</button>` : null}
              ${s.Actions?.['#ComputerSystem.Reset'] && principal.can.components ? html`<button class="small" aria-label=${'Power control of ' + s.Id}
                  onClick=${() => setDlg({ kind: 'reset', host: s.Id, system: s })}>Power…</button>` : null}
            </td></tr>`;
        })}</tbody>
      </table></div>
    <//>
    ${dlg?.kind === 'grant' ? html`<${GrantDialog} host=${dlg.host} dom=${dom} principal=${principal} onClose=${close} />` : null}
    ${dlg?.kind === 'share' ? html`<${ShareDialog} host=${dlg.host} chunks=${chunks} held=${byHost[dlg.host] || []} onClose=${close} />` : null}
    ${dlg?.kind === 'release' ? html`<${ReleaseDialog} ...${dlg} onClose=${close} />` : null}
    ${dlg?.kind === 'reset' ? html`<${ResetDialog} system=${dlg.system} onClose=${close} />` : null}`;
}

// useOperation runs a multi-step change and records each step's state and
// the task it follows, for the dialogs below.
function useOperation() {
  const [steps, setSteps] = useState([]);
  const [task, setTask] = useState(null);
  const [error, setError] = useState(null);
  const [done, setDone] = useState(false);
  const [busy, setBusy] = useState(false);
  const ctrl = useRef(null);
  useEffect(() => () => ctrl.current && ctrl.current.abort(), []);
  const mark = (i, state) => setSteps((s) => s.map((x, j) => (j === i ? { ...x, state } : x)));
  const run = async (labels, fn) => {
    ctrl.current = new AbortController();
    setSteps(labels.map((label) => ({ label, state: 'pending' })));
    setError(null); setTask(null); setBusy(true); setDone(false);
    try {
      await fn({ mark, setTask, signal: ctrl.current.signal });
      setDone(true);
    } catch (e) {
      if (e.name !== 'AbortError') setError(e);
    } finally {
      setBusy(false);
    }
  };
  return { steps, task, error, done, busy, run };
}

function Steps({ steps }) {
  if (!steps.length) return null;
  return html`<ol class="steps">${steps.map((s) => html`<li class=${s.state}>${s.label}</li>`)}</ol>`;
}

function OpFooter({ op, onClose, confirmLabel, onConfirm, danger, disabled }) {
  return html`<div class="dlg-actions">
    ${op.done || op.error ? html`<button class="primary" onClick=${onClose} id="dlg-done">Close</button>` : html`
      <button onClick=${onClose} disabled=${op.busy}>Cancel</button>
      <button class=${danger ? 'danger' : 'primary'} onClick=${onConfirm} disabled=${op.busy || disabled} id="dlg-confirm">${confirmLabel}</button>`}
  </div>`;
}

function GrantDialog({ host, dom, principal, onClose }) {
  const inc = dom.MemoryChunkIncrementMiB || 256;
  const regions = dom.Oem?.CxlPool?.Regions || [];
  const [sizeGiB, setSize] = useState(String(Math.max(1, inc / 1024)));
  const [sharable, setSharable] = useState(false);
  const [confirming, setConfirming] = useState(false);
  const op = useOperation();
  const sizeMiB = Math.round(Number(sizeGiB) * 1024);
  const valid = sizeMiB > 0 && sizeMiB % inc === 0;
  const allowed = api.canChangeHost(principal, host);

  const grant = () => op.run([`Reserve ${fmtMiB(sizeMiB)} in the pool`, `Offer it to ${host} and wait for the host to accept`], async ({ mark, setTask, signal }) => {
    mark(0, 'active');
    const body = { MemoryChunkSizeMiB: sizeMiB, AddressRangeType: 'Volatile' };
    if (sharable) body.Oem = { CxlPool: { Sharable: true } };
    let chunk;
    try {
      chunk = (await api.post(CHUNKS, body)).headers.get('Location');
    } catch (e) { mark(0, 'failed'); throw e; }
    mark(0, 'done');
    mark(1, 'active');
    try {
      await api.startTask('POST', CONNS, {
        ConnectionType: 'Memory',
        MemoryChunkInfo: [{ MemoryChunk: { '@odata.id': chunk }, AccessCapabilities: ['Read', 'Write'] }],
        Links: { InitiatorEndpoints: [{ '@odata.id': initiator(host) }] },
      }, setTask, signal);
      mark(1, 'done');
    } catch (e) {
      mark(1, 'failed');
      // Nothing was granted: give the reservation back so that nothing
      // is left half done.
      await api.del(chunk).catch(() => {});
      throw e;
    }
  });

  return html`<${Modal} title=${'Grant capacity to ' + host} onClose=${onClose}>
    ${!allowed ? html`<${Notice} kind="warn">Your role (${principal.role}) is not expected to be allowed to change ${host}; the box will decide.<//>` : null}
    ${!confirming ? html`
      <form onSubmit=${(e) => { e.preventDefault(); if (valid) setConfirming(true); }}>
        <${Field} label="Size (GiB)" id="grant-size" hint=${`A multiple of ${fmtMiB(inc)}. Free in the pool: ${fmtMiB(dom.Oem?.CxlPool?.FreeMiB)}.`}>
          <input id="grant-size" autofocus type="number" min=${inc / 1024} step=${inc / 1024} required value=${sizeGiB}
            aria-describedby="grant-size-hint" aria-invalid=${!valid} onInput=${(e) => setSize(e.target.value)} />
        <//>
        ${regions.some((r) => r.Sharable) ? html`<div class="field"><label><input type="checkbox" id="grant-sharable" checked=${sharable} onChange=${(e) => setSharable(e.target.checked)} /> Sharable (other hosts may be given the same memory)</label></div>` : null}
        ${!valid ? html`<p class="alert warn" role="alert">The size must be a positive multiple of ${fmtMiB(inc)}.</p>` : null}
        <div class="dlg-actions"><button type="button" onClick=${onClose}>Cancel</button><button class="primary" type="submit" id="grant-next" disabled=${!valid}>Review…</button></div>
      </form>` : html`
      <p>Grant <b>${fmtMiB(sizeMiB)}</b>${sharable ? ' (sharable)' : ''} to <b>${host}</b>: the box reserves a memory chunk, then offers its extents to the host. ${host} must accept them; if it does not, nothing is granted and the reservation is returned.</p>
      <${Steps} steps=${op.steps} />
      <${TaskView} task=${op.task} />
      <${ErrorBox} error=${op.error} />
      ${op.done ? html`<p class="alert ok" role="status" id="grant-result">${host} now holds ${fmtMiB(sizeMiB)} more.</p>` : null}
      <${OpFooter} op=${op} onClose=${onClose} confirmLabel=${'Grant ' + fmtMiB(sizeMiB)} onConfirm=${grant} />`}
  <//>`;
}

function ShareDialog({ host, chunks, held, onClose }) {
  const candidates = chunks.filter((c) => c.Oem?.CxlPool?.Sharable && c.Status?.State === 'Enabled' &&
    !held.some((h) => h.chunk && h.chunk['@odata.id'] === c['@odata.id']));
  const [pick, setPick] = useState(candidates[0] ? candidates[0]['@odata.id'] : '');
  const op = useOperation();
  const chosen = candidates.find((c) => c['@odata.id'] === pick);
  const share = () => op.run([`Offer chunk ${api.last(pick)} to ${host} as a shared extent`], async ({ mark, setTask, signal }) => {
    mark(0, 'active');
    try {
      await api.startTask('POST', CONNS, {
        ConnectionType: 'Memory',
        MemoryChunkInfo: [{ MemoryChunk: { '@odata.id': pick }, AccessCapabilities: ['Read', 'Write'] }],
        Links: { InitiatorEndpoints: [{ '@odata.id': initiator(host) }] },
      }, setTask, signal);
      mark(0, 'done');
    } catch (e) { mark(0, 'failed'); throw e; }
  });
  return html`<${Modal} title=${'Share memory with ' + host} onClose=${onClose}>
    ${candidates.length === 0 ? html`<p>No sharable chunk is held by another host.</p>` : html`
      <${Field} label="Chunk to share" id="share-chunk">
        <select id="share-chunk" value=${pick} onChange=${(e) => setPick(e.target.value)} disabled=${op.busy || op.done}>
          ${candidates.map((c) => html`<option value=${c['@odata.id']}>#${c.Id} · ${fmtMiB(c.MemoryChunkSizeMiB)} · held by ${(c.Oem?.CxlPool?.Grants || []).map((g) => g.SystemId).join(', ')}</option>`)}
        </select>
      <//>
      ${chosen ? html`<p>${host} will map the same ${fmtMiB(chosen.MemoryChunkSizeMiB)} its other holders use (CXL shared extents under one tag).</p>` : null}`}
    <${Steps} steps=${op.steps} />
    <${TaskView} task=${op.task} />
    <${ErrorBox} error=${op.error} />
    ${op.done ? html`<p class="alert ok" role="status">${host} now shares chunk ${api.last(pick)}.</p>` : null}
    <${OpFooter} op=${op} onClose=${onClose} confirmLabel="Share" onConfirm=${share} disabled=${!pick} />
  <//>`;
}

function ReleaseDialog({ host, conn, chunk, onClose }) {
  const others = (chunk?.Oem?.CxlPool?.Grants || []).filter((g) => g.SystemId !== host).length;
  const [free, setFree] = useState(others === 0);
  const op = useOperation();
  const labels = [`Release chunk ${chunk ? chunk.Id : '?'} from ${host} (the host gives the extents back; the device sanitizes them)`];
  if (free) labels.push('Return the chunk to the pool');
  const release = () => op.run(labels, async ({ mark, setTask, signal }) => {
    mark(0, 'active');
    try {
      await api.startTask('DELETE', conn['@odata.id'], undefined, setTask, signal);
      mark(0, 'done');
    } catch (e) { mark(0, 'failed'); throw e; }
    if (free && chunk) {
      mark(1, 'active');
      try { await api.del(chunk['@odata.id']); mark(1, 'done'); } catch (e) { mark(1, 'failed'); throw e; }
    }
  });
  return html`<${Modal} title=${'Release memory from ' + host} onClose=${onClose}>
    <p>${host} loses access to <b>${fmtMiB(conn.Oem?.CxlPool?.GrantedMiB || chunk?.MemoryChunkSizeMiB)}</b> (chunk ${chunk ? chunk.Id : '?'}). Applications on the host using it must have stopped.</p>
    ${others ? html`<p class="hint">${others} other host(s) keep sharing this chunk.</p>` : html`
      <div class="field"><label><input type="checkbox" id="release-free" checked=${free} disabled=${op.busy || op.done} onChange=${(e) => setFree(e.target.checked)} /> Return the capacity to the pool afterwards</label></div>`}
    <${Steps} steps=${op.steps} />
    <${TaskView} task=${op.task} />
    <${ErrorBox} error=${op.error} />
    ${op.done ? html`<p class="alert ok" role="status" id="release-result">Released from ${host}.</p>` : null}
    <${OpFooter} op=${op} onClose=${onClose} confirmLabel="Release" danger onConfirm=${release} />
  <//>`;
}

function ResetDialog({ system, onClose }) {
  const action = system.Actions['#ComputerSystem.Reset'];
  const values = action['ResetType@Redfish.AllowableValues'] || ['ForceOff', 'On', 'PowerCycle'];
  const [type, setType] = useState(values[0]);
  const op = useOperation();
  const go = () => op.run([`${type} ${system.Id}`], async ({ mark, setTask, signal }) => {
    mark(0, 'active');
    try { await api.startTask('POST', action.target, { ResetType: type }, setTask, signal); mark(0, 'done'); } catch (e) { mark(0, 'failed'); throw e; }
  });
  return html`<${Modal} title=${'Power control of ' + system.Id} onClose=${onClose}>
    <p>Cuts or restores power of ${system.Id}'s head. Capacity the host holds is fenced and recovered by the box.</p>
    <${Field} label="Action" id="reset-type"><select id="reset-type" value=${type} onChange=${(e) => setType(e.target.value)}>${values.map((v) => html`<option>${v}</option>`)}</select><//>
    <${Steps} steps=${op.steps} /><${TaskView} task=${op.task} /><${ErrorBox} error=${op.error} />
    ${op.done ? html`<p class="alert ok" role="status">Done.</p>` : null}
    <${OpFooter} op=${op} onClose=${onClose} confirmLabel=${type} danger onConfirm=${go} />
  <//>`;
}
