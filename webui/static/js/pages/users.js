// Users & roles: accounts (administrators manage them all; everyone may
// change their own password) and the predefined roles' privileges.
import { html, useState, useEffect } from '../lib.js';
import * as api from '../api.js';
import { Card, ErrorBox, Loading, Modal, Field, Badge, Confirm, ActionButton } from '../ui.js';

const ACCOUNTS = '/redfish/v1/AccountService/Accounts';
const ROLES = '/redfish/v1/AccountService/Roles';

export default function Users({ principal }) {
  const [accts, setAccts] = useState(null);
  const [roles, setRoles] = useState([]);
  const [systems, setSystems] = useState([]);
  const [err, setErr] = useState(null);
  const [dlg, setDlg] = useState(null);
  const admin = principal.can.users;
  const reload = async () => {
    try {
      const [a, r, s] = await Promise.all([api.members(ACCOUNTS), api.members(ROLES), api.members('/redfish/v1/Systems').catch(() => [])]);
      setAccts(a); setRoles(r); setSystems(s); setErr(null);
    } catch (e) { setErr(e); }
  };
  useEffect(() => { reload(); }, []);
  const change = async (a, body) => { await api.patch(a['@odata.id'], body); await reload(); };
  return html`
    <div class="page-h"><h1>Users & roles</h1>
      ${admin ? html`<button class="primary" onClick=${() => setDlg({ kind: 'new' })} id="user-new">New account…</button>` : null}
      ${principal.can.self || admin ? html`<button onClick=${() => setDlg({ kind: 'password' })} id="password-change">Change my password…</button>` : null}</div>
    <${ErrorBox} error=${err} onDismiss=${() => setErr(null)} />
    <${Card} title="Accounts">
      ${!accts ? html`<${Loading} />` : html`<div class="table-wrap"><table id="accounts">
        <thead><tr><th>User</th><th>Role</th><th>Host</th><th>State</th>${admin ? html`<th>Actions</th>` : null}</tr></thead>
        <tbody>${accts.map((a) => html`<tr data-user=${a.UserName}>
          <td><b>${a.UserName}</b>${a.UserName === principal.user ? html` <span class="hint">(you)</span>` : null}</td>
          <td>${admin && a.UserName !== principal.user ? html`<select aria-label=${'Role of ' + a.UserName} value=${a.RoleId}
              onChange=${(e) => change(a, { RoleId: e.target.value }).catch(setErr)}>${roles.map((r) => html`<option value=${r.Id}>${r.Id}</option>`)}</select>` : a.RoleId}</td>
          <td>${a.Oem?.CxlPool?.SystemId || html`<span class="hint">–</span>`}</td>
          <td>${a.Enabled ? html`<${Badge} value="Enabled" />` : html`<${Badge} value="Disabled" />`} ${a.Locked ? html`<${Badge} value="Critical" label="locked out" />` : null}
            ${a.PasswordChangeRequired ? html`<${Badge} value="Warning" label="must change password" />` : null}</td>
          ${admin ? html`<td class="actions">${a.UserName !== principal.user ? html`
            <${ActionButton} cls="small" onError=${setErr} onClick=${() => change(a, { Enabled: !a.Enabled })} label=${(a.Enabled ? 'Disable ' : 'Enable ') + a.UserName}>${a.Enabled ? 'Disable' : 'Enable'}<//>
            ${a.Locked ? html`<${ActionButton} cls="small" onError=${setErr} onClick=${() => change(a, { Locked: false })}>Unlock<//>` : null}
            <button class="small" onClick=${() => setDlg({ kind: 'reset', acct: a })}>Set password…</button>
            <button class="small danger" aria-label=${'Delete ' + a.UserName} onClick=${() => setDlg({ kind: 'delete', acct: a })}>Delete</button>` : html`<span class="hint">–</span>`}</td>` : null}
        </tr>`)}</tbody></table></div>`}
    <//>
    <${Card} title="Roles">
      <div class="table-wrap"><table id="roles"><thead><tr><th>Role</th><th>Privileges</th><th>Description</th></tr></thead>
      <tbody>${roles.map((r) => html`<tr><td><b>${r.Id}</b>${r.Restricted ? html` <span class="badge info">host-bound</span>` : null}</td>
        <td>${[...(r.AssignedPrivileges || []), ...(r.OemPrivileges || [])].map((p) => html`<span class="badge muted">${p}</span> `)}</td><td>${r.Description}</td></tr>`)}</tbody></table></div>
      <p class="hint">Roles are predefined. A host-bound account sees and changes only the host it is bound to.</p>
    <//>
    ${dlg?.kind === 'new' ? html`<${NewAccount} roles=${roles} systems=${systems} onClose=${() => { setDlg(null); reload(); }} />` : null}
    ${dlg?.kind === 'password' ? html`<${SetPassword} acct=${{ '@odata.id': principal.account, UserName: principal.user }} self onClose=${() => setDlg(null)} />` : null}
    ${dlg?.kind === 'reset' ? html`<${SetPassword} acct=${dlg.acct} onClose=${() => { setDlg(null); reload(); }} />` : null}
    ${dlg?.kind === 'delete' ? html`<${DeleteAccount} acct=${dlg.acct} onClose=${() => { setDlg(null); reload(); }} />` : null}`;
}

function NewAccount({ roles, systems, onClose }) {
  // A password an administrator types for someone else is temporary by
  // default: the account must choose its own at its first sign-in.
  const [f, setF] = useState({ UserName: '', Password: '', RoleId: 'ReadOnly', SystemId: systems[0]?.Id || '', mustChange: true });
  const [err, setErr] = useState(null);
  const set = (k) => (e) => setF({ ...f, [k]: e.target.value });
  const hostBound = roles.find((r) => r.Id === f.RoleId)?.Restricted;
  const submit = async (e) => {
    e.preventDefault();
    try {
      const body = { UserName: f.UserName, Password: f.Password, RoleId: f.RoleId, PasswordChangeRequired: f.mustChange };
      if (hostBound) body.Oem = { CxlPool: { SystemId: f.SystemId } };
      await api.post(ACCOUNTS, body);
      onClose();
    } catch (x) { setErr(x); }
  };
  return html`<${Modal} title="New account" onClose=${onClose}><form onSubmit=${submit}>
    <${Field} label="User name" id="na-user"><input id="na-user" required autocomplete="off" value=${f.UserName} onInput=${set('UserName')} /><//>
    <${Field} label="Password" id="na-pw" hint="8 to 72 characters"><input id="na-pw" type="password" required minlength="8" maxlength="72" autocomplete="new-password" value=${f.Password} onInput=${set('Password')} /><//>
    <${Field} label="Role" id="na-role"><select id="na-role" value=${f.RoleId} onChange=${set('RoleId')}>${roles.map((r) => html`<option value=${r.Id}>${r.Id}</option>`)}</select><//>
    <div class="field"><label><input type="checkbox" id="na-must-change" checked=${f.mustChange} onChange=${(e) => setF({ ...f, mustChange: e.target.checked })} /> Must choose a new password at first sign-in</label></div>
    ${hostBound ? html`<${Field} label="Host" id="na-host"><select id="na-host" value=${f.SystemId} onChange=${set('SystemId')}>${systems.map((s) => html`<option value=${s.Id}>${s.Name}</option>`)}</select><//>` : null}
    <${ErrorBox} error=${err} />
    <div class="dlg-actions"><button type="button" onClick=${onClose}>Cancel</button><button class="primary" type="submit">Create</button></div>
  </form><//>`;
}

function SetPassword({ acct, self, onClose }) {
  const [pw, setPw] = useState('');
  const [pw2, setPw2] = useState('');
  const [err, setErr] = useState(null);
  const [ok, setOk] = useState(false);
  const [mustChange, setMustChange] = useState(!self);
  const submit = async (e) => {
    e.preventDefault();
    if (pw !== pw2) { setErr(new Error('The two passwords differ.')); return; }
    const body = self ? { Password: pw } : { Password: pw, PasswordChangeRequired: mustChange };
    try { await api.patch(acct['@odata.id'], body); setOk(true); } catch (x) { setErr(x); }
  };
  return html`<${Modal} title=${self ? 'Change my password' : 'Set the password of ' + acct.UserName} onClose=${onClose}>
    ${ok ? html`<p class="alert ok" role="status">Password changed.${self ? ' Your other sessions were closed.' : ''}</p><div class="dlg-actions"><button class="primary" onClick=${onClose}>Close</button></div>` : html`
    <form onSubmit=${submit}>
      <${Field} label="New password" id="sp-pw"><input id="sp-pw" type="password" required minlength="8" maxlength="72" autocomplete="new-password" value=${pw} onInput=${(e) => setPw(e.target.value)} /><//>
      <${Field} label="Repeat" id="sp-pw2"><input id="sp-pw2" type="password" required autocomplete="new-password" value=${pw2} onInput=${(e) => setPw2(e.target.value)} /><//>
      ${self ? null : html`<div class="field"><label><input type="checkbox" id="sp-must-change" checked=${mustChange} onChange=${(e) => setMustChange(e.target.checked)} /> Must choose a new password at next sign-in</label></div>`}
      <${ErrorBox} error=${err} />
      <div class="dlg-actions"><button type="button" onClick=${onClose}>Cancel</button><button class="primary" type="submit">Change</button></div>
    </form>`}<//>`;
}

function DeleteAccount({ acct, onClose }) {
  const [err, setErr] = useState(null);
  const go = async () => { try { await api.del(acct['@odata.id']); onClose(); } catch (e) { setErr(e); } };
  return html`<${Confirm} title=${'Delete ' + acct.UserName} danger confirmLabel="Delete account" onConfirm=${go} onClose=${onClose}>
    <p>The account and its sessions end at once.</p><${ErrorBox} error=${err} /><//>`;
}
