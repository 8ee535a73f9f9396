// Settings: session and lockout policy (editable where the API has a
// setter), the TLS certificate, network and time (read-only: shown as the
// API reports them, or said to be absent), and the support bundle.
import { html, useState, useEffect } from '../lib.js';
import * as api from '../api.js';
import { Card, ErrorBox, Loading, Notice, Health, fmtTime, useRoot } from '../ui.js';

export default function Settings({ principal }) {
  const root = useRoot();
  const [d, setD] = useState(null);
  const [err, setErr] = useState(null);
  const reload = async () => {
    try {
      const [mgr, sess, acct] = await Promise.all([api.get('/redfish/v1/Managers/FM'), api.get('/redfish/v1/SessionService'), api.get('/redfish/v1/AccountService')]);
      const opt = async (link) => (link ? api.get(api.id(link)).catch(() => null) : null);
      const [net, eth, certs] = await Promise.all([opt(mgr.NetworkProtocol), opt(mgr.EthernetInterfaces), opt(root.CertificateService)]);
      setD({ mgr, sess, acct, net, eth, certs, fetched: Date.now() });
      setErr(null);
    } catch (e) { setErr(e); }
  };
  useEffect(() => { reload(); }, []);
  if (!d) return html`<h1>Settings</h1>${err ? html`<${ErrorBox} error=${err} />` : html`<${Loading} />`}`;
  const { mgr, sess, acct, net, certs } = d;
  const skew = mgr.DateTime ? Math.round((new Date(mgr.DateTime).getTime() - d.fetched) / 1000) : null;
  return html`
    <div class="page-h"><h1>Settings</h1></div>
    <${ErrorBox} error=${err} />
    <div class="grid">
      <${Card} title="Fabric Manager"><dl class="kv">
        <dt>Model</dt><dd>${mgr.Model}</dd><dt>Firmware</dt><dd class="mono">${mgr.FirmwareVersion}</dd>
        <dt>Serial</dt><dd class="mono">${mgr.SerialNumber || '–'}</dd><dt>UUID</dt><dd class="mono">${mgr.UUID}</dd>
        <dt>Health</dt><dd><${Health} status=${mgr.Status} /></dd></dl><//>
      <${Card} title="Time"><dl class="kv">
        <dt>Box time</dt><dd>${fmtTime(mgr.DateTime)} <span class="hint">(UTC${mgr.DateTimeLocalOffset || ''})</span></dd>
        <dt>Difference to this browser</dt><dd>${skewText(skew)}</dd></dl>
        <p class="hint">Read-only: the API has no setter for the date, time or NTP servers.</p><//>
      <${SessionPolicy} sess=${sess} acct=${acct} principal=${principal} onSaved=${reload} />
      <${Card} title="TLS certificate">${certs ? html`<p>Certificates: <a href=${'/redfish/v1/CertificateService'}>CertificateService</a></p>` : html`
        <dl class="kv"><dt>This connection</dt><dd>${location.protocol === 'https:' ? 'HTTPS' : html`<span class="badge warn">plain HTTP</span>`}</dd></dl>
        <p class="hint">The API does not expose the certificate (no CertificateService). The box serves the certificate in its data directory (tls/cert.pem), generating a self-signed one on first start; replace that file to use your own. Your browser shows the certificate it received from the padlock in the address bar.</p>`}<//>
      <${Card} title="Network">${net ? html`<dl class="kv">${Object.entries(net).filter(([k, v]) => v && typeof v === 'object' && 'ProtocolEnabled' in v).map(([k, v]) => html`<dt>${k}</dt><dd>${v.ProtocolEnabled ? 'enabled' : 'disabled'}${v.Port ? ' · port ' + v.Port : ''}</dd>`)}</dl>` : html`
        <dl class="kv"><dt>Address in use</dt><dd class="mono">${location.host}</dd></dl>
        <p class="hint">Read-only: the API exposes no network settings (no NetworkProtocol or EthernetInterfaces); they are set in the box's image configuration.</p>`}<//>
      <${Card} title="Support bundle">
        <p>Not offered: the API has no diagnostic-data collection (LogService.CollectDiagnosticData). The event and audit logs can be downloaded as JSON from <a href="#/events">Events & audit log</a>.</p><//>
    </div>`;
}

// skewText says how far the box's clock is from the browser's.
function skewText(s) {
  if (s === null) return '–';
  const a = Math.abs(s);
  if (a < 2) return 'in step';
  const way = s > 0 ? 'ahead' : 'behind';
  if (a < 120) return `${a} s ${way}`;
  if (a < 7200) return `${Math.round(a / 60)} min ${way}`;
  if (a < 172800) return `${Math.round(a / 3600)} h ${way}`;
  return `${Math.round(a / 86400)} days ${way}`;
}

function SessionPolicy({ sess, acct, principal, onSaved }) {
  const [timeout, setTimeoutV] = useState(String(sess.SessionTimeout));
  const [threshold, setThreshold] = useState(String(acct.AccountLockoutThreshold));
  const [duration, setDuration] = useState(String(acct.AccountLockoutDuration));
  const [err, setErr] = useState(null);
  const [ok, setOk] = useState('');
  const save = async (e) => {
    e.preventDefault();
    setErr(null); setOk('');
    try {
      if (principal.can.manager && Number(timeout) !== sess.SessionTimeout) await api.patch('/redfish/v1/SessionService', { SessionTimeout: Number(timeout) });
      if (principal.can.users && (Number(threshold) !== acct.AccountLockoutThreshold || Number(duration) !== acct.AccountLockoutDuration)) {
        await api.patch('/redfish/v1/AccountService', { AccountLockoutThreshold: Number(threshold), AccountLockoutDuration: Number(duration) });
      }
      setOk('Saved.');
      onSaved();
    } catch (x) { setErr(x); }
  };
  const ro = !principal.can.manager && !principal.can.users;
  return html`<${Card} title="Sessions & lockout"><form onSubmit=${save}>
    <div class="field"><label for="set-timeout">Session timeout (seconds)</label><input id="set-timeout" type="number" min="30" max="86400" value=${timeout} disabled=${!principal.can.manager} onInput=${(e) => setTimeoutV(e.target.value)} />
      <div class="hint">The console also signs out after this long without keyboard or pointer activity.</div></div>
    <div class="field"><label for="set-threshold">Failed logins before lockout</label><input id="set-threshold" type="number" min="0" value=${threshold} disabled=${!principal.can.users} onInput=${(e) => setThreshold(e.target.value)} /></div>
    <div class="field"><label for="set-duration">Lockout duration (seconds)</label><input id="set-duration" type="number" min="0" value=${duration} disabled=${!principal.can.users} onInput=${(e) => setDuration(e.target.value)} /></div>
    <${ErrorBox} error=${err} />${ok ? html`<p class="alert ok" role="status">${ok}</p>` : null}
    ${ro ? html`<${Notice}>Read-only for your role.<//>` : html`<button class="primary" type="submit">Save</button>`}
  </form><//>`;
}
