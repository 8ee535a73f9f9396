// Firmware: the image slots and running versions (UpdateService
// FirmwareInventory), upload of a new image with progress, and whatever
// actions the UpdateService and its inventory offer (activate, rollback).
import { html, useState, useEffect } from '../lib.js';
import * as api from '../api.js';
import { Card, ErrorBox, Loading, Unavailable, Health, Badge, Confirm, TaskView, Notice, fmtBytes, useRoot } from '../ui.js';

export default function Firmware({ principal }) {
  const root = useRoot();
  const [svc, setSvc] = useState(undefined);
  const [inv, setInv] = useState([]);
  const [err, setErr] = useState(null);
  const [act, setAct] = useState(null);
  const reload = async () => {
    try {
      if (!root.UpdateService) { setSvc(null); return; }
      const s = await api.get(api.id(root.UpdateService));
      setSvc(s);
      setInv(s.FirmwareInventory ? await api.members(api.id(s.FirmwareInventory)) : []);
      setErr(null);
    } catch (e) { setErr(e); setSvc((x) => (x === undefined ? null : x)); }
  };
  useEffect(() => { reload(); }, []);
  if (svc === undefined) return html`<h1>Firmware</h1><${Loading} />`;
  if (!svc) return html`<h1>Firmware</h1><${ErrorBox} error=${err} /><${Unavailable} what="This box serves no UpdateService." />`;
  const admin = principal.can.manager;
  const actions = [...listActions(svc), ...inv.flatMap(listActions)];
  const push = svc.MultipartHttpPushUri || svc.HttpPushUri;
  return html`
    <div class="page-h"><h1>Firmware</h1></div>
    <${ErrorBox} error=${err} />
    <${Card} title="Images">
      <div class="table-wrap"><table id="firmware">
        <thead><tr><th>Image</th><th>Version</th><th>Active</th><th>Updateable</th><th>Health</th>${admin ? html`<th>Actions</th>` : null}</tr></thead>
        <tbody>${inv.map((i) => html`<tr><td>${i.Name || i.Id}<div class="hint">${i.Id}${i.ReleaseDate ? ' · ' + i.ReleaseDate : ''}</div></td>
          <td class="mono">${i.Version || '–'}</td><td>${i.Active === undefined ? '–' : i.Active ? html`<${Badge} value="Enabled" label="active" />` : html`<${Badge} value="StandbyOffline" label="standby" />`}</td>
          <td>${i.Updateable ? 'yes' : 'no'}</td><td><${Health} status=${i.Status} /></td>
          ${admin ? html`<td class="actions">${listActions(i).map((a) => html`<button class="small" onClick=${() => setAct(a)}>${a.label}</button>`)}</td>` : null}</tr>`)}</tbody>
      </table></div>
    <//>
    ${admin && listActions(svc).length ? html`<${Card} title="Update service actions"><div class="actions">${listActions(svc).map((a) => html`<button onClick=${() => setAct(a)}>${a.label}</button>`)}</div><//>` : null}
    ${admin ? (push ? html`<${Upload} uri=${push} multipart=${!!svc.MultipartHttpPushUri} inv=${inv} onDone=${reload} />` : html`<${Card} title="Upload"><${Notice}>This box's UpdateService accepts no image uploads (no MultipartHttpPushUri).<//><//>`) : html`<${Notice}>Only administrators may update firmware.<//>`}
    ${!actions.length && admin ? html`<p class="hint">The UpdateService offers no activate or rollback action on this box.</p>` : null}
    ${act ? html`<${RunAction} action=${act} inv=${inv} onClose=${() => { setAct(null); reload(); }} />` : null}`;
}

// listActions turns a resource's Actions into buttons' descriptions.
function listActions(res) {
  const out = [];
  const walk = (acts, prefix) => {
    for (const [k, v] of Object.entries(acts || {})) {
      if (k === 'Oem') { walk(v, 'Oem '); continue; }
      if (!v || !v.target) continue;
      const name = k.replace(/^#/, '').split('.').pop();
      if (name === 'SimpleUpdate' || name === 'StartUpdate') continue;
      out.push({ label: prefix + name.replace(/([a-z])([A-Z])/g, '$1 $2') + (res.Id && res.Id !== 'UpdateService' ? ' ' + res.Id : ''), name, target: v.target, info: v, res });
    }
  };
  walk(res.Actions, '');
  return out;
}

function RunAction({ action, inv, onClose }) {
  const [task, setTask] = useState(null);
  const [err, setErr] = useState(null);
  const [done, setDone] = useState(false);
  const [busy, setBusy] = useState(false);
  const targets = action.info['Targets@Redfish.AllowableValues'] || (action.name === 'Activate' ? inv.filter((i) => !i.Active).map((i) => i['@odata.id']) : null);
  const [target, setTarget] = useState(targets && targets[0]);
  const go = async () => {
    setBusy(true); setErr(null);
    try {
      const body = targets && target ? { Targets: [target] } : {};
      await api.startTask('POST', action.target, body, setTask);
      setDone(true);
    } catch (e) { setErr(e); } finally { setBusy(false); }
  };
  return html`<${Confirm} title=${action.label} confirmLabel=${done ? 'Done' : action.label} onConfirm=${done ? onClose : go} onClose=${onClose} busy=${busy} danger=${!done}>
    <p>${action.name === 'Activate' ? 'The box will boot the chosen image next; the running services restart.' : action.name.match(/Rollback|Revert/i) ? 'The box goes back to the previous image; the running services restart.' : `Runs ${action.name} on the box.`}</p>
    ${targets ? html`<label for="act-target">Image</label> <select id="act-target" value=${target} onChange=${(e) => setTarget(e.target.value)}>${targets.map((t) => html`<option value=${t}>${api.last(t)}</option>`)}</select>` : null}
    <${TaskView} task=${task} /><${ErrorBox} error=${err} />
    ${done ? html`<p class="alert ok" role="status">Accepted.</p>` : null}
  <//>`;
}

// Upload sends an image with XMLHttpRequest, whose upload events give the
// progress fetch does not.
function Upload({ uri, multipart, inv, onDone }) {
  const [file, setFile] = useState(null);
  const [sent, setSent] = useState(null);
  const [task, setTask] = useState(null);
  const [err, setErr] = useState(null);
  const [msg, setMsg] = useState('');
  const targets = inv.filter((i) => i.Updateable);
  const [target, setTarget] = useState('');
  const send = (e) => {
    e.preventDefault();
    if (!file) return;
    setErr(null); setTask(null); setMsg('');
    const xhr = new XMLHttpRequest();
    xhr.open('POST', uri);
    xhr.setRequestHeader('X-Auth-Token', api.token() || '');
    xhr.upload.onprogress = (ev) => setSent({ loaded: ev.loaded, total: ev.total || file.size });
    xhr.onerror = () => setErr(new Error('The upload failed: the connection was lost.'));
    xhr.onload = async () => {
      let body = null;
      try { body = JSON.parse(xhr.responseText); } catch { body = null; }
      if (xhr.status >= 400) { setErr(new api.ApiError(xhr.status, body, `${xhr.status} ${xhr.statusText}`)); return; }
      const monitor = xhr.status === 202 ? xhr.getResponseHeader('Location') : null;
      if (!monitor) { setMsg('Image accepted.'); onDone(); return; }
      try { await api.waitTask(monitor, setTask); setMsg('Image accepted and staged.'); onDone(); } catch (x) { setErr(x); }
    };
    if (multipart) {
      const fd = new FormData();
      fd.append('UpdateParameters', new Blob([JSON.stringify(target ? { Targets: [target] } : {})], { type: 'application/json' }));
      fd.append('UpdateFile', file, file.name);
      xhr.send(fd);
    } else {
      xhr.setRequestHeader('Content-Type', 'application/octet-stream');
      xhr.send(file);
    }
  };
  return html`<${Card} title="Upload an image">
    <form onSubmit=${send} class="row">
      <label for="fw-file">Image file</label><input id="fw-file" type="file" onChange=${(e) => setFile(e.target.files[0] || null)} />
      ${targets.length > 1 ? html`<label for="fw-target">Slot</label><select id="fw-target" value=${target} onChange=${(e) => setTarget(e.target.value)}><option value="">(the box chooses)</option>${targets.map((t) => html`<option value=${t['@odata.id']}>${t.Name || t.Id}</option>`)}</select>` : null}
      <button class="primary" type="submit" disabled=${!file}>Upload</button>
    </form>
    ${sent ? html`<div class="task"><div class="task-h"><span>Upload</span><span>${fmtBytes(sent.loaded)} of ${fmtBytes(sent.total)}</span></div><progress max=${sent.total} value=${sent.loaded} aria-label="Upload progress"></progress></div>` : null}
    <${TaskView} task=${task} /><${ErrorBox} error=${err} />
    ${msg ? html`<p class="alert ok" role="status">${msg}</p>` : null}
    <p class="hint">The image is checked (signature and manifest) by the box before it is staged; it runs only after activation.</p>
  <//>`;
}
