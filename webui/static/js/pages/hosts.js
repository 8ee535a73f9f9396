// Hosts & capacity: one row per host head with its link, what it holds and
// its quota; grant (reserve a chunk, then connect it), share a chunk
// another host holds, release, resize (grow by one new chunk, shrink by
// releasing whole chunks) and set a host's quota. Every change is
// confirmed first and its task followed live; a refusal shows the
// server's message.
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

// AgentBadge shows whether the host's agent (cxlhost) reports what the
// host does with its memory: nothing when none ever did, "agent silent"
// once its reports stopped (the host or its agent is gone).
function AgentBadge({ agent }) {
  if (!agent || agent.State === 'None') return null;
  const silent = agent.State === 'Silent';
  return html` <span class=${'badge ' + (silent ? 'bad' : 'ok')} data-agent=${agent.State}
    title=${`${agent.Agent || 'host agent'}: ${agent.TagCount || 0} tags`}>${silent ? 'agent silent' : 'agent'}</span>`;
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
            <td><${LinkBadge} up=${o.LinkUp} />${s.PowerState === 'Off' ? html` <span class="badge bad">power off</span>` : null}<${AgentBadge} agent=${o.HostAgent} /></td>
            <td class="num">${fmtMiB(o.GrantedMiB)}</td>
            <td class="num quota">${o.QuotaMiB ? html`${fmtMiB(o.QuotaMiB)}<${Meter} value=${o.GrantedMiB} max=${o.QuotaMiB} label=${`${s.Id} quota use`} />` : html`<span class="hint">none</span>`}</td>
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
              ${may(s.Id) ? html`<button class="small" aria-label=${'Resize ' + s.Id}
                  onClick=${() => setDlg({ kind: 'resize', host: s.Id, system: s })}>Resize…</button>` : null}
              ${principal.can.components ? html`<button class="small" aria-label=${'Set quota of ' + s.Id}
                  onClick=${() => setDlg({ kind: 'quota', host: s.Id, system: s })}>Quota…</button>` : null}
              ${s.Actions?.['#ComputerSystem.Reset'] && principal.can.components ? html`<button class="small" aria-label=${'Power control of ' + s.Id}
                  onClick=${() => setDlg({ kind: 'reset', host: s.Id, system: s })}>Power…</button>` : null}
            </td></tr>`;
        })}</tbody>
      </table></div>
    <//>
    ${dlg?.kind === 'grant' ? html`<${GrantDialog} host=${dlg.host} dom=${dom} principal=${principal} onClose=${close} />` : null}
    ${dlg?.kind === 'share' ? html`<${ShareDialog} host=${dlg.host} chunks=${chunks} held=${byHost[dlg.host] || []} onClose=${close} />` : null}
    ${dlg?.kind === 'release' ? html`<${ReleaseDialog} ...${dlg} principal=${principal} onClose=${close} />` : null}
    ${dlg?.kind === 'reset' ? html`<${ResetDialog} system=${dlg.system} onClose=${close} />` : null}
    ${dlg?.kind === 'resize' ? html`<${ResizeDialog} host=${dlg.host} system=${dlg.system} held=${byHost[dlg.host] || []} dom=${dom} principal=${principal} onClose=${close} />` : null}
    ${dlg?.kind === 'quota' ? html`<${QuotaDialog} host=${dlg.host} system=${dlg.system} dom=${dom} onClose=${close} />` : null}`;
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

// grantFlow is the grant's steps: reserve a chunk of sizeMiB, then connect
// it to host and follow the task; if the host does not get it, the
// reservation is given back so that nothing is left half done. It returns
// useOperation.run's arguments.
function grantFlow(host, sizeMiB, sharable) {
  const labels = [`Reserve ${fmtMiB(sizeMiB)} in the pool`, `Offer it to ${host} and wait for the host to accept`];
  return [labels, async ({ mark, setTask, signal }) => {
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
      await api.del(chunk).catch(() => {});
      throw e;
    }
  }];
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

  const grant = () => op.run(...grantFlow(host, sizeMiB, sharable));

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

function ReleaseDialog({ host, conn, chunk, principal, onClose }) {
  const others = (chunk?.Oem?.CxlPool?.Grants || []).filter((g) => g.SystemId !== host).length;
  // A host account may return only the chunks it reserved itself (the box
  // answers 404 for the others): offer the pool only where it would work.
  const mayFree = !!chunk && (principal.can.components || chunk.Oem?.CxlPool?.Owner === host);
  const [free, setFree] = useState(others === 0 && mayFree);
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
    ${others ? html`<p class="hint">${others} other host(s) keep sharing this chunk.</p>` : !mayFree ? null : html`
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

// heldChunks are what a host may give back: its granted connections, each
// with its size, whether other hosts keep sharing the chunk, and whether
// the chunk then goes back to the pool (nobody else holds it, and the
// principal may delete it: a host account only the chunks it reserved).
function heldChunks(host, held, principal) {
  return held.filter(({ conn }) => conn.Oem?.CxlPool?.GrantState === 'granted').map(({ conn, chunk }) => {
    const others = (chunk?.Oem?.CxlPool?.Grants || []).filter((g) => g.SystemId !== host).length;
    return {
      conn, chunk, id: conn.Id, others,
      mib: conn.Oem?.CxlPool?.GrantedMiB || chunk?.MemoryChunkSizeMiB || 0,
      free: !!chunk && !others && (principal.can.components || chunk.Oem?.CxlPool?.Owner === host),
    };
  });
}

// planShrink proposes which chunks to release so that at least needMiB
// goes back, giving back as little more as possible: a subset sum over the
// chunk sizes (in their greatest common unit, so the table stays small).
// It returns the chosen connection Ids.
function planShrink(items, needMiB) {
  if (needMiB <= 0 || items.length === 0) return [];
  const gcd = (a, b) => (b ? gcd(b, a % b) : a);
  const unit = items.reduce((g, it) => gcd(g, it.mib), 0) || 1;
  const sizes = items.map((it) => it.mib / unit);
  const total = sizes.reduce((a, b) => a + b, 0);
  const need = Math.ceil(needMiB / unit);
  if (need >= total) return items.map((it) => it.id);
  // by[s] is the item that first reached sum s (-1: unreachable), so
  // that walking back from s names distinct items.
  const by = new Int32Array(total + 1).fill(-1);
  by[0] = items.length;
  sizes.forEach((size, i) => {
    for (let s = total; s >= size; s--) if (by[s] === -1 && by[s - size] !== -1) by[s] = i;
  });
  let s = need;
  while (by[s] === -1) s++;
  const out = [];
  while (s > 0) { const i = by[s]; out.push(items[i].id); s -= sizes[i]; }
  return out;
}

// ResizeDialog brings a host to a target size: growing grants one new
// chunk of the difference (the grant's flow); shrinking releases whole
// chunks, proposed so that the host ends at most at the target.
function ResizeDialog({ host, system, held, dom, principal, onClose }) {
  const inc = dom.MemoryChunkIncrementMiB || 256;
  const o = system.Oem?.CxlPool || {};
  const granted = o.GrantedMiB || 0;
  const quota = o.QuotaMiB || 0;
  const items = heldChunks(host, held, principal);
  const [targetGiB, setTarget] = useState(String(granted / 1024));
  const [picked, setPicked] = useState(null); // connection Ids to release, once reviewed
  const op = useOperation();
  const n = Number(targetGiB);
  const target = Math.round(n * 1024);
  const diff = target - granted;
  const valid = targetGiB.trim() !== '' && Number.isFinite(n) && n >= 0 && (diff <= 0 || diff % inc === 0);
  const chosen = items.filter((it) => picked && picked.includes(it.id));
  const releaseMiB = chosen.reduce((a, it) => a + it.mib, 0);

  const review = () => setPicked(diff < 0 ? planShrink(items, -diff) : []);
  const toggle = (id, on) => setPicked((p) => (on ? [...p, id] : p.filter((x) => x !== id)));
  const shrink = () => op.run(chosen.map((it) => `Release chunk ${it.chunk ? it.chunk.Id : '?'} (${fmtMiB(it.mib)}) from ${host}` +
    (it.free ? ' and return it to the pool' : '')), async ({ mark, setTask, signal }) => {
    for (const [i, it] of chosen.entries()) {
      mark(i, 'active');
      try {
        await api.startTask('DELETE', it.conn['@odata.id'], undefined, setTask, signal);
        if (it.free) await api.del(it.chunk['@odata.id']);
        mark(i, 'done');
      } catch (e) { mark(i, 'failed'); throw e; }
    }
  });
  const grow = () => op.run(...grantFlow(host, diff, false));

  const summary = html`<p>${host} holds <b id="resize-granted">${fmtMiB(granted)}</b> in ${items.length} chunk(s); quota: <b>${quota ? fmtMiB(quota) : 'none'}</b>.</p>`;
  if (picked === null) {
    return html`<${Modal} title=${'Resize ' + host} onClose=${onClose}>
      ${summary}
      <form onSubmit=${(e) => { e.preventDefault(); if (valid && diff !== 0) review(); }}>
        <${Field} label="Target size (GiB)" id="resize-target" hint=${`Growing grants one new chunk of the difference (a multiple of ${fmtMiB(inc)}); shrinking releases whole chunks.`}>
          <input id="resize-target" autofocus type="number" min="0" step="any" required value=${targetGiB}
            aria-describedby="resize-target-hint" aria-invalid=${!valid} onInput=${(e) => setTarget(e.target.value)} />
        <//>
        ${!valid ? html`<p class="alert warn" role="alert">To grow, the target must exceed ${fmtMiB(granted)} by a multiple of ${fmtMiB(inc)}; to shrink, it must be 0 or more.</p>` : null}
        ${valid && diff === 0 ? html`<p class="hint" role="status">${host} already holds ${fmtMiB(granted)}.</p>` : null}
        <div class="dlg-actions"><button type="button" onClick=${onClose}>Cancel</button><button class="primary" type="submit" id="resize-next" disabled=${!valid || diff === 0}>Review…</button></div>
      </form>
    <//>`;
  }
  const locked = op.busy || op.done || !!op.error;
  return html`<${Modal} title=${'Resize ' + host} onClose=${onClose}>
    ${summary}
    ${diff > 0 ? html`
      <p>Grant one new chunk of <b>${fmtMiB(diff)}</b> to ${host}, from ${fmtMiB(granted)} to <b>${fmtMiB(target)}</b>: the box reserves it, then offers its extents to the host, which must accept them; if it does not, nothing is granted and the reservation is returned.</p>
      ${quota && target > quota ? html`<${Notice} kind="warn">That is more than ${host}'s quota of ${fmtMiB(quota)}: the box will refuse it.<//>` : null}
      <${Steps} steps=${op.steps} /><${TaskView} task=${op.task} /><${ErrorBox} error=${op.error} />
      ${op.done ? html`<p class="alert ok" role="status" id="resize-result">${host} now holds ${fmtMiB(target)}.</p>` : null}
      <${OpFooter} op=${op} onClose=${onClose} confirmLabel=${'Grant ' + fmtMiB(diff)} onConfirm=${grow} />` : html`
      <p>Chunks are the unit: the box takes back whole chunks, never part of one. To reach at most <b>${fmtMiB(target)}</b>, release:</p>
      <fieldset class="field" disabled=${locked}><legend>Chunks to release from ${host}</legend>
        ${items.map((it) => html`<label><input type="checkbox" name="resize-chunk" value=${it.id} checked=${picked.includes(it.id)}
          onChange=${(e) => toggle(it.id, e.target.checked)} /> Chunk ${it.chunk ? it.chunk.Id : '?'} · ${fmtMiB(it.mib)}${it.others ? ` · shared with ${it.others} other host(s), who keep it` : ''}</label>`)}
      </fieldset>
      <p>${host} goes from ${fmtMiB(granted)} to <b id="resize-after">${fmtMiB(granted - releaseMiB)}</b>${granted - releaseMiB > target ? html` <span class="badge warn">above the target</span>` : null}. Applications on the host using these chunks must have stopped; the device sanitizes them.</p>
      <${Steps} steps=${op.steps} /><${TaskView} task=${op.task} /><${ErrorBox} error=${op.error} />
      ${op.done ? html`<p class="alert ok" role="status" id="resize-result">Released ${fmtMiB(releaseMiB)} from ${host}.</p>` : null}
      <${OpFooter} op=${op} onClose=${onClose} confirmLabel=${`Release ${chosen.length} chunk(s)`} danger onConfirm=${shrink} disabled=${chosen.length === 0} />`}
  <//>`;
}

// QuotaDialog sets a host's quota (PATCH Systems/HostN
// Oem.CxlPool.QuotaMiB): every later grant to the host must fit under it.
// A quota below what the host holds is accepted; the box's note says what
// follows.
function QuotaDialog({ host, system, dom, onClose }) {
  const o = system.Oem?.CxlPool || {};
  const [gib, setGiB] = useState(String((o.QuotaMiB || 0) / 1024));
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState(null);
  const [result, setResult] = useState(null);
  const n = Number(gib);
  const mib = n * 1024;
  const valid = gib.trim() !== '' && Number.isFinite(n) && n >= 0 && Number.isInteger(mib) && mib <= (dom.MemorySizeMiB || Infinity);
  const save = async (e) => {
    e.preventDefault();
    if (!valid || busy) return;
    setBusy(true); setError(null);
    try {
      const r = await api.patch(api.id(system), { Oem: { CxlPool: { QuotaMiB: mib } } });
      const note = (r.body?.['@Message.ExtendedInfo'] || []).map((m) => m.Resolution || m.Message).filter(Boolean).join(' ');
      setResult({ quota: r.body?.Oem?.CxlPool?.QuotaMiB ?? mib, note });
    } catch (err) { setError(err); } finally { setBusy(false); }
  };
  return html`<${Modal} title=${'Quota of ' + host} onClose=${onClose}>
    <p>${host} holds <b>${fmtMiB(o.GrantedMiB || 0)}</b>; its quota is <b>${o.QuotaMiB ? fmtMiB(o.QuotaMiB) : 'none'}</b>. Every later grant to it, by anyone, must fit under the quota; what it holds is kept.</p>
    <form onSubmit=${save}>
      <${Field} label="Quota (GiB)" id="quota-size" hint=${`0 for no limit; whole MiB, at most the pool (${fmtMiB(dom.MemorySizeMiB)}).`}>
        <input id="quota-size" autofocus type="number" min="0" step="any" required value=${gib} disabled=${busy || !!result}
          aria-describedby="quota-size-hint" aria-invalid=${!valid} onInput=${(e) => setGiB(e.target.value)} />
      <//>
      ${!valid ? html`<p class="alert warn" role="alert">The quota must be 0 or more whole MiB, at most the pool's size.</p>` : null}
      <${ErrorBox} error=${error} />
      ${result ? html`<p class="alert ok" role="status" id="quota-result">${host}'s quota is ${result.quota ? fmtMiB(result.quota) : 'none'} now.</p>` : null}
      ${result?.note ? html`<p class="alert warn" role="status" id="quota-note">${result.note}</p>` : null}
      <div class="dlg-actions">${result ? html`<button type="button" class="primary" id="dlg-done" onClick=${onClose}>Close</button>` : html`
        <button type="button" onClick=${onClose} disabled=${busy}>Cancel</button>
        <button class="primary" type="submit" id="quota-save" disabled=${!valid || busy}>Set quota</button>`}</div>
    </form>
  <//>`;
}
