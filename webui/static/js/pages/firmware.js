// Firmware: the box's two A/B image slots (UpdateService
// FirmwareInventory, linked from the Manager's Links.SoftwareImages), the
// other running firmware, uploading an image with its progress (the
// multipart push: the browser's upload, then the task's PercentComplete),
// activating the other slot or rolling back to it (PATCH Managers/FM
// Links.ActiveSoftwareImage: a trial boot at the next reset) and
// rebooting into it (Manager.Reset). Changes are for ConfigureManager
// accounts only; others see the state.
import { html, useState, useEffect } from '../lib.js';
import * as api from '../api.js';
import { Card, ErrorBox, Loading, Unavailable, Health, Badge, Confirm, TaskView, Notice, fmtBytes, useRoot } from '../ui.js';

export default function Firmware({ principal }) {
  const root = useRoot();
  const [svc, setSvc] = useState(undefined);
  const [inv, setInv] = useState([]);
  const [mgr, setMgr] = useState(null);
  const [err, setErr] = useState(null);
  const [dlg, setDlg] = useState(null);
  const reload = async () => {
    try {
      if (!root.UpdateService) { setSvc(null); return; }
      const [s, managers] = await Promise.all([api.get(api.id(root.UpdateService)),
        root.Managers ? api.members(api.id(root.Managers)) : Promise.resolve([])]);
      setSvc(s);
      setMgr(managers[0] || null);
      setInv(s.FirmwareInventory ? await api.members(api.id(s.FirmwareInventory)) : []);
      setErr(null);
    } catch (e) { setErr(e); setSvc((x) => (x === undefined ? null : x)); }
  };
  useEffect(() => { reload(); }, []);
  if (svc === undefined) return html`<h1>Firmware</h1><${Loading} />`;
  if (!svc) return html`<h1>Firmware</h1><${ErrorBox} error=${err} /><${Unavailable} what="This box serves no UpdateService." />`;

  const admin = principal.can.manager;
  const links = (mgr && mgr.Links) || {};
  const slotURIs = (links.SoftwareImages || []).map(api.id);
  const slots = slotURIs.map((u) => inv.find((i) => api.id(i) === u)).filter(Boolean);
  const others = inv.filter((i) => !slotURIs.includes(api.id(i)));
  const running = slots.find((s) => api.id(s) === api.id(links.ActiveSoftwareImage));
  const trial = slots.find((s) => oem(s).Trial && s !== running);
  const reset = mgr && mgr.Actions && mgr.Actions['#Manager.Reset'];
  const push = svc.MultipartHttpPushUri;
  return html`
    <div class="page-h"><h1>Firmware</h1></div>
    <${ErrorBox} error=${err} onDismiss=${() => setErr(null)} />
    ${slots.length ? html`
      <div class="grid" id="fw-slots">${slots.map((s) => html`<${Slot} slot=${s} running=${running} admin=${admin && !!mgr} onAct=${(kind) => setDlg({ kind, slot: s })} />`)}</div>
      ${trial ? html`<${Notice} kind="warn"><span id="fw-trial">${trial.Name || trial.Id} (${trial.Version || 'no version'}) boots at the next reset for a trial:
        it becomes the active image once the box reports healthy, otherwise the box comes back on ${running ? running.Name || running.Id : 'the running image'}.</span>
        ${admin && reset ? html` <button class="primary" id="fw-reboot" onClick=${() => setDlg({ kind: 'reboot' })}>Reboot now…</button>` : null}<//>` : null}` :
      html`<${Notice}>This box does not run from A/B image slots (it is not the box image), so there is nothing to activate.<//>`}
    <${Card} title="Running firmware">
      <div class="table-wrap"><table id="firmware">
        <thead><tr><th>Component</th><th>Version</th><th>Health</th></tr></thead>
        <tbody>${others.map((i) => html`<tr><td>${i.Name || i.Id}<div class="hint">${i.Id}</div></td>
          <td class="mono">${i.Version || '–'}</td><td><${Health} status=${i.Status} /></td></tr>`)}</tbody>
      </table></div>
    <//>
    ${admin ? (push ? html`<${Upload} uri=${push} target=${slots.find((s) => s !== running)} onDone=${reload} />` : null) :
      html`<${Notice}>Only administrators (ConfigureManager) may upload, activate or roll back images.<//>`}
    ${dlg && dlg.kind === 'reboot' ? html`<${Reboot} action=${reset} trial=${trial} onClose=${() => setDlg(null)} />` : null}
    ${dlg && dlg.kind !== 'reboot' ? html`<${Activate} kind=${dlg.kind} slot=${dlg.slot} running=${running} manager=${api.id(mgr)}
      reset=${reset} onClose=${() => { setDlg(null); reload(); }} />` : null}`;
}

const oem = (s) => (s && s.Oem && s.Oem.CxlPool) || {};

// older compares dotted versions numerically ("1.9" < "1.10"): activating
// an image older than the running one is a roll back.
const older = (b, a) => String(b || '').localeCompare(String(a || ''), undefined, { numeric: true }) < 0;

function Slot({ slot, running, admin, onAct }) {
  const o = oem(slot);
  const isRunning = slot === running;
  const label = slot.Name || slot.Id;
  const ready = o.State === 'ready';
  let action = null;
  if (admin && !isRunning) {
    if (o.Trial) {
      action = html`<button aria-label=${'Cancel the trial of ' + slot.Id} onClick=${() => onAct('cancel')}>Cancel trial…</button>`;
    } else if (ready) {
      const back = running && older(slot.Version, running.Version);
      action = html`<button class="primary" aria-label=${(back ? 'Roll back to ' : 'Activate ') + slot.Id}
        onClick=${() => onAct(back ? 'rollback' : 'activate')}>${back ? 'Roll back…' : 'Activate…'}</button>`;
    }
  }
  return html`<${Card} title=${label} id=${'slot-' + slot.Id} actions=${action}>
    <p class="row" data-slot=${slot.Id}>
      ${isRunning ? html`<${Badge} value="Enabled" label="running" />` : null}
      ${o.Trial ? html`<${Badge} value="Warning" label=${isRunning ? 'on trial' : 'pending trial: boots next'} />` : null}
      ${o.Active && !isRunning ? html`<${Badge} value="Transitioning" label="committed" />` : null}
      <${Badge} value=${{ ready: 'OK', bad: 'Critical', writing: 'Running', empty: 'Absent' }[o.State] || 'Unknown'} label=${o.State || 'unknown'} />
    </p>
    <dl class="kv">
      <dt>Version</dt><dd class="mono">${slot.Version || '–'}</dd>
      <dt>Security version</dt><dd>${o.SecurityVersion ?? '–'}</dd>
      <dt>Size</dt><dd>${slot.SizeBytes ? fmtBytes(slot.SizeBytes) : '–'}</dd>
      <dt>Health</dt><dd><${Health} status=${slot.Status} /></dd>
      ${o.Error ? html`<dt>Error</dt><dd>${o.Error}</dd>` : null}
    </dl>
  <//>`;
}

// Activate asks before scheduling a slot (activate, roll back) or
// cancelling its trial (activating the running slot), then PATCHes the
// Manager and offers the reboot.
function Activate({ kind, slot, running, manager, reset, onClose }) {
  const [busy, setBusy] = useState(false);
  const [err, setErr] = useState(null);
  const [done, setDone] = useState(false);
  const [rebooting, setRebooting] = useState(false);
  const target = kind === 'cancel' ? running : slot;
  const title = { activate: `Activate ${slot.Id}?`, rollback: `Roll back to ${slot.Id}?`, cancel: `Cancel the trial of ${slot.Id}?` }[kind];
  const go = async () => {
    setBusy(true); setErr(null);
    try {
      await api.patch(manager, { Links: { ActiveSoftwareImage: { '@odata.id': api.id(target) } } });
      setDone(true);
    } catch (e) { setErr(e); } finally { setBusy(false); }
  };
  const reboot = async () => {
    setBusy(true); setErr(null);
    try { await api.post(reset.target, { ResetType: 'GracefulRestart' }); setRebooting(true); } catch (e) { setErr(e); } finally { setBusy(false); }
  };
  const what = kind === 'cancel'
    ? html`<p>${slot.Id} (${slot.Version || 'no version'}) will not be tried: the box keeps running ${running.Id} (${running.Version || 'no version'}).</p>`
    : html`<p>${slot.Id} (${slot.Version || 'no version'}, security version ${oem(slot).SecurityVersion ?? '–'}) boots at the next reset for a trial.
      It becomes the active image once the box reports healthy; if it does not come up healthy the box returns to ${running ? running.Id : 'the running image'}.
      The box checks the image's signature and rollback floor first.</p>`;
  if (done) {
    return html`<${Confirm} title=${title} confirmLabel=${rebooting ? 'Close' : reset && kind !== 'cancel' ? 'Reboot now' : 'Close'} busy=${busy}
        onConfirm=${rebooting || !reset || kind === 'cancel' ? onClose : reboot} onClose=${onClose}>
      <p class="alert ok" role="status" id="fw-activated">${kind === 'cancel' ? 'Trial cancelled.' : `${slot.Id} is scheduled for the next reset.`}</p>
      ${rebooting ? html`<p class="alert info" role="status">The box is restarting. Sign in again once it is back.</p>` :
        reset && kind !== 'cancel' ? html`<p>Reboot now to try it, or later (any reset tries it).</p>` : null}
      <${ErrorBox} error=${err} />
    <//>`;
  }
  return html`<${Confirm} title=${title} confirmLabel=${{ activate: 'Activate', rollback: 'Roll back', cancel: 'Cancel trial' }[kind]}
      danger=${kind === 'rollback'} busy=${busy} onConfirm=${go} onClose=${onClose}>
    ${what}<${ErrorBox} error=${err} />
  <//>`;
}

function Reboot({ action, trial, onClose }) {
  const [busy, setBusy] = useState(false);
  const [err, setErr] = useState(null);
  const [sent, setSent] = useState(false);
  const go = async () => {
    setBusy(true); setErr(null);
    try { await api.post(action.target, { ResetType: 'GracefulRestart' }); setSent(true); } catch (e) { setErr(e); } finally { setBusy(false); }
  };
  return html`<${Confirm} title="Reboot the box?" confirmLabel=${sent ? 'Close' : 'Reboot'} danger=${!sent} busy=${busy} onConfirm=${sent ? onClose : go} onClose=${onClose}>
    <p>The box restarts${trial ? ` into ${trial.Id} (${trial.Version || 'no version'}) for its trial` : ''}. Capacity already granted stays with the hosts;
      the API and this console are away until it is back.</p>
    ${sent ? html`<p class="alert info" role="status" id="fw-rebooting">The box is restarting. Sign in again once it is back.</p>` : null}
    <${ErrorBox} error=${err} />
  <//>`;
}

// Upload sends an image with XMLHttpRequest, whose upload events give the
// progress fetch does not; then the box verifies and writes it, which the
// task monitor reports until Completed or Exception.
function Upload({ uri, target, onDone }) {
  const [file, setFile] = useState(null);
  const [sent, setSent] = useState(null);
  const [task, setTask] = useState(null);
  const [err, setErr] = useState(null);
  const [busy, setBusy] = useState(false);
  const [msg, setMsg] = useState('');
  const send = (e) => {
    e.preventDefault();
    if (!file || busy) return;
    setErr(null); setTask(null); setMsg(''); setBusy(true);
    setSent({ loaded: 0, total: file.size });
    const xhr = new XMLHttpRequest();
    xhr.open('POST', uri);
    xhr.setRequestHeader('X-Auth-Token', api.token() || '');
    xhr.setRequestHeader('Accept', 'application/json');
    xhr.setRequestHeader('X-Requested-With', 'XMLHttpRequest'); // no Basic challenge on a 401
    xhr.upload.onprogress = (ev) => setSent({ loaded: ev.loaded, total: ev.lengthComputable ? ev.total : file.size });
    xhr.onerror = () => { setBusy(false); setErr(new Error('The upload failed: the connection was lost.')); };
    xhr.onload = async () => {
      let body = null;
      try { body = JSON.parse(xhr.responseText); } catch { body = null; }
      if (xhr.status >= 400) { setBusy(false); setErr(new api.ApiError(xhr.status, body, `${xhr.status} ${xhr.statusText}`)); return; }
      setSent((s) => (s ? { loaded: s.total, total: s.total } : s));
      const monitor = xhr.status === 202 ? xhr.getResponseHeader('Location') : null;
      if (body && body.TaskState) setTask(body);
      try {
        if (monitor) await api.waitTask(monitor, setTask);
        setMsg('The image is verified and staged. Activate it to try it at the next reset.');
      } catch (x) { setErr(x); } finally { setBusy(false); onDone(); }
    };
    const fd = new FormData();
    fd.append('UpdateParameters', new Blob([JSON.stringify({ '@Redfish.OperationApplyTime': 'OnReset' })], { type: 'application/json' }));
    fd.append('UpdateFile', file, file.name);
    xhr.send(fd);
  };
  const p = sent && sent.total ? Math.round((100 * sent.loaded) / sent.total) : 0;
  return html`<${Card} title="Upload an image" id="fw-upload-card"><div id="fw-upload">
    <form onSubmit=${send} class="row">
      <label for="fw-file">Signed image bundle</label>
      <input id="fw-file" type="file" aria-describedby="fw-file-hint" disabled=${busy} onChange=${(e) => setFile(e.target.files[0] || null)} />
      <button class="primary" type="submit" id="fw-send" disabled=${!file || busy}>Upload</button>
    </form>
    <p class="hint" id="fw-file-hint">The image goes to ${target ? `${target.Id}, the slot not running` : 'the slot not running'}. The box checks its signature,
      manifest and security version while it writes it, and runs it only once activated.</p>
    ${sent ? html`<div class="task" id="fw-progress"><div class="task-h"><span>Upload</span><span>${fmtBytes(sent.loaded)} of ${fmtBytes(sent.total)} (${p}%)</span></div>
      <progress max="100" value=${p} aria-label="Upload progress"></progress></div>` : null}
    <${TaskView} task=${task} /><${ErrorBox} error=${err} />
    ${msg ? html`<p class="alert ok" role="status" id="fw-uploaded">${msg}</p>` : null}
  </div><//>`;
}
