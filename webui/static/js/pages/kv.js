// KV-cache namespaces (/redfish/v1/Oem/CxlPool/KVNamespaces): the box's
// KV-cache store, one namespace per model and serving cluster, each on
// shared Dynamic Capacity granted to its member hosts. Lists them with
// their size, quota, members and block counts; administrators and
// operators (ConfigureComponents) create, resize and delete them and
// have hosts join and leave. A token the box hands out (create, join) is
// shown once, as the box shows it once. Redrawn from the event stream:
// the namespace's own changes and its BlockStored/BlockRemoved events.
import { html, useState, useEffect } from '../lib.js';
import * as api from '../api.js';
import { useLive } from '../live.js';
import { Card, ErrorBox, Loading, Unavailable, Modal, Field, Confirm, Notice, fmtMiB, fmtBytes, fmtTime, hostColor, hostNum } from '../ui.js';

export const KV = '/redfish/v1/Oem/CxlPool/KVNamespaces';

async function load() {
  const r = await api.request('GET', KV + '?$expand=.', undefined, { accept: [404] });
  if (r.status === 404) return { absent: true, list: [] };
  return { absent: false, list: (r.body && r.body.Members) || [] };
}

const HostChip = ({ id }) => html`<span class="chip"><span class="sw" style=${{ background: hostColor(hostNum(id)) }}></span>${id}</span>`;

export default function KVNamespaces({ principal }) {
  const [d, setD] = useState(null);
  const [systems, setSystems] = useState([]);
  const [err, setErr] = useState(null);
  const [dlg, setDlg] = useState(null);
  const reload = () => load().then((x) => { setD(x); setErr(null); }, (e) => { setErr(e); setD((o) => o || { absent: false, list: [] }); });
  useEffect(() => {
    reload();
    api.members('/redfish/v1/Systems').then(setSystems, () => {});
  }, []);
  // Block events come in bursts under load: the debounce keeps this to a
  // reload per half second at most.
  useLive(reload, { match: (r) => api.id(r.OriginOfCondition).startsWith(KV), every: 15000, delay: 500 });

  if (!d) return html`<h1>KV-cache namespaces</h1>${err ? html`<${ErrorBox} error=${err} />` : html`<${Loading} />`}`;
  if (d.absent) return html`<h1>KV-cache namespaces</h1><${Unavailable} what="This box runs no KV-cache store (/redfish/v1/Oem/CxlPool/KVNamespaces)." detail="The daemon serves it when its KV store is enabled." />`;
  const can = principal.can.components;
  const close = () => { setDlg(null); reload(); };
  const hosts = systems.map((s) => s.Id);
  return html`
    <div class="page-h"><h1>KV-cache namespaces</h1><span class="hint">Live from the event stream</span>
      ${can ? html`<button class="primary" id="kv-create" onClick=${() => setDlg({ kind: 'create' })}>New namespace…</button>` : null}</div>
    <${ErrorBox} error=${err} />
    <${Card} title=${`Namespaces (${d.list.length})`}>
      ${d.list.length === 0 ? html`<p class="hint" id="kv-none">No namespace yet.${can ? ' Create one to give a serving cluster shared KV-cache capacity.' : ''}</p>` : html`<div class="table-wrap"><table id="kv-namespaces">
        <thead><tr><th>Namespace</th><th class="num">Size</th><th class="num">Quota</th><th class="num">Chunks</th><th>Members</th>
          <th class="num">Blocks</th><th class="num">Bytes</th><th class="num">Evictions</th><th class="num">Sessions</th><th>Remote</th>${can ? html`<th></th>` : null}</tr></thead>
        <tbody>${d.list.map((ns) => {
          const s = ns.Stats || {};
          return html`<tr data-ns=${ns.Id}>
            <td><b>${ns.Name}</b><div class="hint">chunks of ${fmtMiB(ns.ChunkSizeMiB)} · since ${fmtTime(ns.Created)}</div></td>
            <td class="num kv-size">${fmtMiB(s.CapacityMiB)}</td>
            <td class="num kv-quota">${ns.QuotaMiB ? fmtMiB(ns.QuotaMiB) : 'none'}</td>
            <td class="num">${(ns.Chunks || []).length}</td>
            <td class="kv-members">${(ns.Hosts || []).map((h) => html`<${HostChip} id=${h} />`)}</td>
            <td class="num kv-blocks">${s.Blocks ?? '–'}</td>
            <td class="num">${fmtBytes(s.UsedBytes)}${s.ReservedBytes ? html`<div class="hint">+ ${fmtBytes(s.ReservedBytes)} being written</div>` : null}</td>
            <td class="num">${s.Evictions ?? '–'}</td>
            <td class="num">${s.Sessions ?? '–'}</td>
            <td>${ns.Remote ? html`<span class="badge info">${ns.Remote.Client}</span>` : html`<span class="hint">–</span>`}</td>
            ${can ? html`<td class="actions">
              <button class="small" aria-label=${'Resize namespace ' + ns.Id} onClick=${() => setDlg({ kind: 'resize', ns })}>Resize…</button>
              <button class="small" aria-label=${'Members of namespace ' + ns.Id} onClick=${() => setDlg({ kind: 'members', ns })}>Members…</button>
              <button class="small" aria-label=${'Delete namespace ' + ns.Id} onClick=${() => setDlg({ kind: 'delete', ns })}>Delete…</button>
            </td>` : null}
          </tr>`;
        })}</tbody></table></div>`}
      <p class="hint">Size is the shared capacity the namespace holds now; it grows by a chunk at a time up to its quota when full and evicts its coldest blocks beyond it. Bytes are committed blocks. The box does not count lookups, so there is no hit rate to show.</p>
    <//>
    ${d.list.length ? html`<${Card} title="Members: who reaches which namespace">
      <div class="table-wrap"><table id="kv-matrix"><thead><tr><th>Host</th>${d.list.map((ns) => html`<th>${ns.Name}</th>`)}</tr></thead>
        <tbody>${hosts.map((h) => html`<tr><td><${HostChip} id=${h} /></td>${d.list.map((ns) => html`<td>${(ns.Hosts || []).includes(h) ? html`<span class="badge ok">member</span>` : html`<span class="hint">–</span>`}</td>`)}</tr>`)}</tbody></table></div>
    <//>` : null}
    ${dlg && dlg.kind === 'create' ? html`<${CreateDialog} hosts=${hosts} onClose=${close} />` : null}
    ${dlg && dlg.kind === 'resize' ? html`<${ResizeDialog} ns=${dlg.ns} onClose=${close} />` : null}
    ${dlg && dlg.kind === 'members' ? html`<${MembersDialog} ns=${dlg.ns} hosts=${hosts} onClose=${close} />` : null}
    ${dlg && dlg.kind === 'delete' ? html`<${DeleteDialog} ns=${dlg.ns} onClose=${close} />` : null}`;
}

// Tokens shows the per-host tokens the box just handed out, once.
function Tokens({ tokens }) {
  return html`<${Notice} kind="warn">Copy these tokens now: the box shows each host's token only once (a host's agent presents it to the KV index).<//>
    <div class="table-wrap"><table id="kv-tokens"><thead><tr><th>Host</th><th>Token</th></tr></thead>
      <tbody>${tokens.map((t) => html`<tr><td>${t.Host}</td><td class="mono kv-token">${t.Token}</td></tr>`)}</tbody></table></div>`;
}

function CreateDialog({ hosts, onClose }) {
  const [name, setName] = useState('');
  const [chunk, setChunk] = useState('1024');
  const [quota, setQuota] = useState('');
  const [sel, setSel] = useState([]);
  const [busy, setBusy] = useState(false);
  const [err, setErr] = useState(null);
  const [done, setDone] = useState(null);
  const toggle = (h) => setSel((s) => (s.includes(h) ? s.filter((x) => x !== h) : [...s, h]));
  const submit = async (e) => {
    e.preventDefault();
    setBusy(true);
    setErr(null);
    try {
      const body = { Name: name, ChunkSizeMiB: Number(chunk), Hosts: sel };
      if (quota !== '') body.QuotaMiB = Number(quota);
      setDone((await api.post(KV, body)).body);
    } catch (x) { setErr(x); } finally { setBusy(false); }
  };
  if (done) {
    return html`<${Modal} title=${'Namespace ' + done.Name + ' created'} onClose=${onClose} wide>
      <p id="kv-created">${fmtMiB(done.Stats?.CapacityMiB)} of shared capacity granted to ${(done.Hosts || []).join(', ')}.</p>
      <${Tokens} tokens=${done.Tokens || []} />
      <div class="dlg-actions"><button class="primary" id="kv-done" onClick=${onClose}>Done</button></div>
    <//>`;
  }
  return html`<${Modal} title="New KV-cache namespace" onClose=${onClose}>
    <form onSubmit=${submit}>
      <${Field} label="Name" id="kv-name" hint="Letters, digits, '-', '_' and '.'; e.g. one per model and serving cluster.">
        <input id="kv-name" required value=${name} onInput=${(e) => setName(e.target.value)} autocomplete="off" /><//>
      <${Field} label="Chunk size (MiB)" id="kv-chunk" hint="The namespace grows and shrinks by whole chunks; a multiple of the sharable region's block size.">
        <input id="kv-chunk" type="number" min="1" required value=${chunk} onInput=${(e) => setChunk(e.target.value)} /><//>
      <${Field} label="Quota (MiB, optional)" id="kv-quota" hint="At most this much capacity; empty for the box's default.">
        <input id="kv-quota" type="number" min="1" value=${quota} onInput=${(e) => setQuota(e.target.value)} /><//>
      <fieldset class="kv-hosts"><legend>Member hosts</legend>
        ${hosts.map((h) => html`<label class="nowrap"><input type="checkbox" id=${'kv-host-' + h} checked=${sel.includes(h)} onChange=${() => toggle(h)} /> ${h}</label>`)}
      </fieldset>
      <${ErrorBox} error=${err} />
      <div class="dlg-actions"><button type="button" onClick=${onClose}>Cancel</button>
        <button class="primary" type="submit" id="kv-create-submit" disabled=${busy || !sel.length}>${busy ? 'Creating…' : 'Create'}</button></div>
    </form>
  <//>`;
}

function ResizeDialog({ ns, onClose }) {
  const [quota, setQuota] = useState(String(ns.QuotaMiB || ''));
  const [busy, setBusy] = useState(false);
  const [err, setErr] = useState(null);
  const submit = async (e) => {
    e.preventDefault();
    setBusy(true);
    setErr(null);
    try {
      await api.patch(api.id(ns), { QuotaMiB: Number(quota) });
      onClose();
    } catch (x) { setErr(x); setBusy(false); }
  };
  return html`<${Modal} title=${'Resize ' + ns.Name} onClose=${onClose}>
    <form onSubmit=${submit}>
      <p>It holds ${fmtMiB(ns.Stats?.CapacityMiB)} in chunks of ${fmtMiB(ns.ChunkSizeMiB)}. Under what it holds, its coldest chunks are released after their blocks are evicted; the box refuses while clients pin blocks in them.</p>
      <${Field} label="Quota (MiB)" id="kv-resize-quota"><input id="kv-resize-quota" type="number" min=${ns.ChunkSizeMiB} required value=${quota} onInput=${(e) => setQuota(e.target.value)} /><//>
      <${ErrorBox} error=${err} />
      <div class="dlg-actions"><button type="button" onClick=${onClose}>Cancel</button>
        <button class="primary" type="submit" id="kv-resize-submit" disabled=${busy}>${busy ? 'Resizing…' : 'Resize'}</button></div>
    </form>
  <//>`;
}

function MembersDialog({ ns, hosts, onClose }) {
  const [cur, setCur] = useState(ns);
  const [busy, setBusy] = useState('');
  const [err, setErr] = useState(null);
  const [tokens, setTokens] = useState(null);
  const act = async (action, h) => {
    setBusy(h);
    setErr(null);
    setTokens(null);
    try {
      const r = (await api.post(api.id(ns) + '/Actions/CxlPool.' + action, { Host: h })).body;
      setCur(r);
      if (r.Tokens) setTokens(r.Tokens);
    } catch (x) { setErr(x); } finally { setBusy(''); }
  };
  const members = cur.Hosts || [];
  return html`<${Modal} title=${'Members of ' + ns.Name} onClose=${onClose} wide>
    <p class="hint">A host that joins is granted every chunk of the namespace and gets its own token; one that leaves gives them back and its sessions end.</p>
    <div class="table-wrap"><table id="kv-member-list"><thead><tr><th>Host</th><th>State</th><th></th></tr></thead>
      <tbody>${hosts.map((h) => {
        const m = members.includes(h);
        return html`<tr data-host=${h}><td><${HostChip} id=${h} /></td><td>${m ? html`<span class="badge ok">member</span>` : html`<span class="hint">not a member</span>`}</td>
          <td>${m ? html`<button class="small" aria-label=${`Remove ${h} from ${ns.Id}`} disabled=${!!busy || members.length === 1} title=${members.length === 1 ? 'The last member cannot leave: delete the namespace instead' : undefined} onClick=${() => act('Leave', h)}>${busy === h ? 'Leaving…' : 'Leave'}</button>`
            : html`<button class="small" aria-label=${`Add ${h} to ${ns.Id}`} disabled=${!!busy} onClick=${() => act('Join', h)}>${busy === h ? 'Joining…' : 'Join'}</button>`}</td></tr>`;
      })}</tbody></table></div>
    <${ErrorBox} error=${err} />
    ${tokens ? html`<${Tokens} tokens=${tokens} />` : null}
    <div class="dlg-actions"><button class="primary" id="kv-members-done" onClick=${onClose}>Done</button></div>
  <//>`;
}

function DeleteDialog({ ns, onClose }) {
  const [busy, setBusy] = useState(false);
  const [err, setErr] = useState(null);
  const go = async () => {
    setBusy(true);
    setErr(null);
    try { await api.del(api.id(ns)); onClose(); } catch (x) { setErr(x); setBusy(false); }
  };
  return html`<${Confirm} title=${'Delete ' + ns.Name + '?'} danger confirmLabel="Delete namespace" onConfirm=${go} onClose=${onClose} busy=${busy}>
    <p>Ends its sessions, evicts all ${ns.Stats?.Blocks ?? 0} blocks (${fmtBytes(ns.Stats?.UsedBytes)}) and releases its ${(ns.Chunks || []).length} chunks (${fmtMiB(ns.Stats?.CapacityMiB)}) from ${(ns.Hosts || []).join(', ')}${ns.Remote ? ', revoking the exports to ' + ns.Remote.Client : ''}.</p>
    <${ErrorBox} error=${err} />
  <//>`;
}
