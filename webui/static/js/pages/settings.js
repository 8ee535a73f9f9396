// Settings: session and lockout policy (editable where the API has a
// setter), the HTTPS certificate (CertificateService: details, a CSR whose
// key stays on the box, replacement from PEM), a summary of network and
// time (set on the Network & time page), and the support bundle
// (the Diagnostic LogService's CollectDiagnosticData). Changes are for
// ConfigureManager accounts; others see the state.
import { html, useState, useEffect } from '../lib.js';
import * as api from '../api.js';
import { Card, ErrorBox, Loading, Notice, Health, Modal, Field, TaskView, fmtTime, fmtBytes, useRoot } from '../ui.js';

const DIAGNOSTIC = '/redfish/v1/Managers/FM/LogServices/Diagnostic';

export default function Settings({ principal }) {
  const root = useRoot();
  const [d, setD] = useState(null);
  const [err, setErr] = useState(null);
  const reload = async () => {
    try {
      const [mgr, sess, acct] = await Promise.all([api.get('/redfish/v1/Managers/FM'), api.get('/redfish/v1/SessionService'), api.get('/redfish/v1/AccountService')]);
      const opt = async (link) => (link ? api.get(api.id(link)).catch(() => null) : null);
      const [net, eth] = await Promise.all([opt(mgr.NetworkProtocol), opt(mgr.EthernetInterfaces)]);
      setD({ mgr, sess, acct, net, eth, fetched: Date.now() });
      setErr(null);
    } catch (e) { setErr(e); }
  };
  useEffect(() => { reload(); }, []);
  if (!d) return html`<h1>Settings</h1>${err ? html`<${ErrorBox} error=${err} />` : html`<${Loading} />`}`;
  const { mgr, sess, acct, net } = d;
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
        <p class="hint">The date, time and NTP servers are set on the <a href="#/network">Network & time</a> page.</p><//>
      <${SessionPolicy} sess=${sess} acct=${acct} principal=${principal} onSaved=${reload} />
      <${Certificate} service=${root.CertificateService} principal=${principal} />
      <${Card} title="Network">${net ? html`<dl class="kv">${Object.entries(net).filter(([k, v]) => v && typeof v === 'object' && 'ProtocolEnabled' in v).map(([k, v]) => html`<dt>${k}</dt><dd>${v.ProtocolEnabled ? 'enabled' : 'disabled'}${v.Port ? ' · port ' + v.Port : ''}</dd>`)}</dl>` : html`
        <dl class="kv"><dt>Address in use</dt><dd class="mono">${location.host}</dd></dl>
        <p class="hint">This account cannot read the box's network settings.</p>`}
        <p class="hint">Addresses, host name and NTP: the <a href="#/network">Network & time</a> page.</p><//>
      <${SupportBundle} principal=${principal} />
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

// saveBlob hands a blob to the browser as a download named name.
function saveBlob(blob, name) {
  const a = document.createElement('a');
  a.href = URL.createObjectURL(blob);
  a.download = name;
  document.body.appendChild(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(a.href), 10000);
}

// Certificate: the HTTPS certificate the box presents, and for
// administrators a certificate signing request (the key is made and kept
// on the box) and replacement from PEM, which new connections get at once.
function Certificate({ service, principal }) {
  const [svc, setSvc] = useState(undefined);
  const [cert, setCert] = useState(null);
  const [err, setErr] = useState(null);
  const [dlg, setDlg] = useState(null);
  const [ok, setOk] = useState('');
  const reload = async () => {
    if (!service || !principal.can.appliance) { setSvc(null); return; }
    try {
      const s = await api.get(api.id(service));
      const loc = s.CertificateLocations ? await api.get(api.id(s.CertificateLocations)) : null;
      const all = (loc && loc.Links && loc.Links.Certificates) || [];
      const https = all.find((c) => api.id(c).includes('/HTTPS/Certificates/')) || all[0];
      setCert(https ? await api.get(api.id(https)) : null);
      setSvc(s);
      setErr(null);
    } catch (e) { setErr(e); setSvc((x) => (x === undefined ? null : x)); }
  };
  useEffect(() => { reload(); }, []);
  if (svc === undefined) return html`<${Card} title="HTTPS certificate"><${Loading} /><//>`;
  if (!svc) {
    return html`<${Card} title="HTTPS certificate"><${ErrorBox} error=${err} />
      <dl class="kv"><dt>This connection</dt><dd>${location.protocol === 'https:' ? 'HTTPS' : html`<span class="badge warn">plain HTTP</span>`}</dd></dl>
      <p class="hint">${principal.can.appliance ? 'This box does not expose its certificate (no CertificateService).' : 'The certificate is shown to appliance accounts.'} The box serves the certificate in its data directory (tls/cert.pem), generating a self-signed one on first start. Your browser shows the certificate it received from the padlock in the address bar.</p><//>`;
  }
  const actions = svc.Actions || {};
  const canCSR = principal.can.manager && actions['#CertificateService.GenerateCSR'];
  const canReplace = principal.can.manager && actions['#CertificateService.ReplaceCertificate'] && cert;
  const subj = (cert && cert.Subject) || {};
  const name = (id) => [id.CommonName, id.Organization, id.OrganizationalUnit].filter(Boolean).join(', ') || id.DisplayString || '–';
  return html`<${Card} title="HTTPS certificate" id="cert-card"><div id="cert-body">
    <${ErrorBox} error=${err} onDismiss=${() => setErr(null)} />
    ${!cert ? html`<p class="hint">No certificate is installed.</p>` : html`<dl class="kv">
      <dt>Subject</dt><dd id="cert-subject">${name(subj)}</dd>
      ${subj.AlternativeNames ? html`<dt>Names</dt><dd class="mono">${subj.AlternativeNames.join(', ')}</dd>` : null}
      <dt>Issuer</dt><dd id="cert-issuer">${name(cert.Issuer || {})}</dd>
      <dt>Valid</dt><dd>${fmtTime(cert.ValidNotBefore)} – ${fmtTime(cert.ValidNotAfter)} <${Health} status=${cert.Status} /></dd>
      <dt>SHA-256 fingerprint</dt><dd class="mono" id="cert-fingerprint">${cert.Fingerprint}</dd>
      <dt>Serial</dt><dd class="mono">${cert.SerialNumber}</dd>
      <dt>Key usage</dt><dd>${(cert.KeyUsage || []).join(', ') || '–'}</dd>
      <dt>This connection</dt><dd>${location.protocol === 'https:' ? 'HTTPS' : html`<span class="badge warn">plain HTTP</span>`}</dd></dl>`}
    ${ok ? html`<p class="alert ok" role="status" id="cert-ok">${ok}</p>` : null}
    ${canCSR || canReplace ? html`<div class="row">
      ${canCSR ? html`<button id="cert-csr" onClick=${() => { setOk(''); setDlg('csr'); }}>Generate CSR…</button>` : null}
      ${canReplace ? html`<button class="primary" id="cert-replace" onClick=${() => { setOk(''); setDlg('replace'); }}>Replace certificate…</button>` : null}</div>` : null}
    ${dlg === 'csr' ? html`<${CSRDialog} target=${actions['#CertificateService.GenerateCSR'].target} collection=${cert ? api.id(cert).replace(/\/[^/]+$/, '') : ''} onClose=${() => setDlg(null)} />` : null}
    ${dlg === 'replace' ? html`<${ReplaceDialog} target=${actions['#CertificateService.ReplaceCertificate'].target} certURI=${api.id(cert)}
      onClose=${() => setDlg(null)} onDone=${(c) => { setDlg(null); setCert(c); setOk('Certificate replaced: new connections get it now. Reload the page to see it in your browser.'); }} />` : null}
  </div><//>`;
}

const KEY_TYPES = {
  'EC-P256': { KeyPairAlgorithm: 'TPM_ALG_ECDSA', KeyCurveId: 'TPM_ECC_NIST_P256', label: 'ECDSA P-256' },
  'EC-P384': { KeyPairAlgorithm: 'TPM_ALG_ECDSA', KeyCurveId: 'TPM_ECC_NIST_P384', label: 'ECDSA P-384' },
  'RSA-2048': { KeyPairAlgorithm: 'TPM_ALG_RSA', KeyBitLength: 2048, label: 'RSA 2048' },
  'RSA-3072': { KeyPairAlgorithm: 'TPM_ALG_RSA', KeyBitLength: 3072, label: 'RSA 3072' },
  'RSA-4096': { KeyPairAlgorithm: 'TPM_ALG_RSA', KeyBitLength: 4096, label: 'RSA 4096' },
};

function CSRDialog({ target, collection, onClose }) {
  const [f, setF] = useState({ CommonName: location.hostname, AlternativeNames: '', Organization: '', OrganizationalUnit: '', City: '', State: '', Country: '', key: 'EC-P256' });
  const [csr, setCsr] = useState(null);
  const [busy, setBusy] = useState(false);
  const [err, setErr] = useState(null);
  const set = (k) => (e) => setF({ ...f, [k]: e.target.value });
  const submit = async (e) => {
    e.preventDefault();
    setErr(null); setBusy(true);
    try {
      const { label, ...key } = KEY_TYPES[f.key];
      const body = { CommonName: f.CommonName.trim(), CertificateCollection: { '@odata.id': collection }, ...key };
      const alt = f.AlternativeNames.split(/[\s,]+/).filter(Boolean);
      if (alt.length) body.AlternativeNames = alt;
      for (const k of ['Organization', 'OrganizationalUnit', 'City', 'State', 'Country']) if (f[k].trim()) body[k] = f[k].trim();
      const r = await api.post(target, body);
      setCsr(r.body.CSRString);
    } catch (x) { setErr(x); } finally { setBusy(false); }
  };
  const fileName = (f.CommonName.trim() || 'box').replace(/[^A-Za-z0-9.-]/g, '_') + '.csr';
  return html`<${Modal} title="Certificate signing request" onClose=${onClose} wide>
    ${csr ? html`
      <${Field} label="Request (PEM): have it signed by your certificate authority, then install the certificate with Replace" id="csr-pem">
        <textarea id="csr-pem" class="mono" rows="14" readonly value=${csr}></textarea><//>
      <p class="hint">The private key was made on the box and stays there; it is used once the certificate for it is installed. A new request replaces this one's key.</p>
      <div class="dlg-actions"><button onClick=${onClose}>Close</button>
        <button class="primary" id="csr-download" onClick=${() => saveBlob(new Blob([csr], { type: 'application/pkcs10' }), fileName)}>Download ${fileName}</button></div>` : html`
    <form onSubmit=${submit}>
      <${Field} label="Common name (the box's host name)" id="csr-cn"><input id="csr-cn" required maxlength="64" value=${f.CommonName} onInput=${set('CommonName')} /><//>
      <${Field} label="Other names (host names or IP addresses, comma-separated)" id="csr-alt"><input id="csr-alt" value=${f.AlternativeNames} onInput=${set('AlternativeNames')} /><//>
      <${Field} label="Organization" id="csr-o"><input id="csr-o" maxlength="64" value=${f.Organization} onInput=${set('Organization')} /><//>
      <${Field} label="Organizational unit" id="csr-ou"><input id="csr-ou" maxlength="64" value=${f.OrganizationalUnit} onInput=${set('OrganizationalUnit')} /><//>
      <${Field} label="City" id="csr-l"><input id="csr-l" maxlength="128" value=${f.City} onInput=${set('City')} /><//>
      <${Field} label="State or province" id="csr-st"><input id="csr-st" maxlength="128" value=${f.State} onInput=${set('State')} /><//>
      <${Field} label="Country (two letters)" id="csr-c"><input id="csr-c" maxlength="2" pattern="[A-Z]{2}" value=${f.Country} onInput=${set('Country')} /><//>
      <${Field} label="Key" id="csr-key"><select id="csr-key" value=${f.key} onChange=${set('key')}>${Object.entries(KEY_TYPES).map(([k, v]) => html`<option value=${k}>${v.label}</option>`)}</select><//>
      <${ErrorBox} error=${err} />
      <div class="dlg-actions"><button type="button" onClick=${onClose}>Cancel</button><button class="primary" type="submit" id="csr-generate" disabled=${busy}>Generate</button></div>
    </form>`}
  <//>`;
}

function ReplaceDialog({ target, certURI, onClose, onDone }) {
  const [text, setText] = useState('');
  const [busy, setBusy] = useState(false);
  const [err, setErr] = useState(null);
  const load = async (e) => {
    const file = e.target.files[0];
    if (file) setText(await file.text());
  };
  const submit = async (e) => {
    e.preventDefault();
    setErr(null); setBusy(true);
    try {
      const n = (text.match(/-----BEGIN CERTIFICATE-----/g) || []).length;
      const r = await api.post(target, { CertificateString: text, CertificateType: n > 1 ? 'PEMchain' : 'PEM', CertificateUri: { '@odata.id': certURI } });
      onDone(r.body);
    } catch (x) { setErr(x); } finally { setBusy(false); }
  };
  return html`<${Modal} title="Replace the HTTPS certificate" onClose=${onClose} wide><form onSubmit=${submit}>
    <p class="hint">The certificate must be for the key of the last signing request made here, for the key in use, or come with its own private key in the same PEM. An expired certificate or one for another key is refused, and the current one stays.</p>
    <${Field} label="Certificate (PEM; the issuing chain may follow)" id="cert-pem"><textarea id="cert-pem" class="mono" rows="12" required value=${text} onInput=${(e) => setText(e.target.value)} placeholder="-----BEGIN CERTIFICATE-----"></textarea><//>
    <${Field} label="…or read it from a file" id="cert-file"><input id="cert-file" type="file" accept=".pem,.crt,.cer,.txt" onChange=${load} /><//>
    <${ErrorBox} error=${err} />
    <div class="dlg-actions"><button type="button" onClick=${onClose}>Cancel</button><button class="primary" type="submit" id="cert-install" disabled=${busy || !text.trim()}>Replace</button></div>
  </form><//>`;
}

// SupportBundle: collect the Diagnostic LogService's bundle through a task
// and download it (administrators); others see what has been collected.
function SupportBundle({ principal }) {
  const [svc, setSvc] = useState(undefined);
  const [entries, setEntries] = useState([]);
  const [task, setTask] = useState(null);
  const [busy, setBusy] = useState(false);
  const [fresh, setFresh] = useState('');
  const [err, setErr] = useState(null);
  const reload = async () => {
    if (!principal.can.appliance) { setSvc(null); return; }
    try {
      const logs = await api.get('/redfish/v1/Managers/FM/LogServices');
      if (!(logs.Members || []).some((m) => api.id(m) === DIAGNOSTIC)) { setSvc(null); return; }
      const s = await api.get(DIAGNOSTIC);
      setEntries((await api.members(api.id(s.Entries))).slice().reverse());
      setSvc(s);
      setErr(null);
    } catch (e) { setErr(e); setSvc((x) => (x === undefined ? null : x)); }
  };
  useEffect(() => { reload(); }, []);
  const collectTarget = svc && svc.Actions && svc.Actions['#LogService.CollectDiagnosticData'];
  const collect = async () => {
    setBusy(true); setErr(null); setFresh(''); setTask(null);
    try {
      const r = await api.startTask('POST', collectTarget.target, { DiagnosticDataType: 'Manager' }, setTask);
      setFresh(r.headers.get('Location') || api.id(r.body));
      await reload();
    } catch (e) { setErr(e); } finally { setBusy(false); }
  };
  const download = async (entry) => {
    setErr(null);
    try {
      const res = await fetch(entry.AdditionalDataURI, { headers: { 'X-Auth-Token': api.token() || '', 'X-Requested-With': 'XMLHttpRequest' }, cache: 'no-store' });
      if (!res.ok) {
        let body = null;
        try { body = await res.json(); } catch { body = null; }
        throw new api.ApiError(res.status, body, `${res.status} ${res.statusText}`);
      }
      const m = /filename="([^"]+)"/.exec(res.headers.get('Content-Disposition') || '');
      saveBlob(await res.blob(), m ? m[1] : `cxlpool-support-${entry.Id}.tar.gz`);
    } catch (e) { setErr(e); }
  };
  if (svc === undefined) return html`<${Card} title="Support bundle"><${Loading} /><//>`;
  const logsHint = html`The event and audit logs alone can be downloaded as JSON from <a href="#/events">Events & audit log</a>.`;
  if (!svc) {
    return html`<${Card} title="Support bundle"><${ErrorBox} error=${err} />
      <p>${principal.can.appliance ? 'Not offered: this box has no diagnostic-data collection (LogService.CollectDiagnosticData).' : 'Support bundles are for appliance accounts.'} ${principal.can.appliance ? logsHint : null}</p><//>`;
  }
  const admin = principal.can.manager;
  const ready = fresh && entries.find((e) => api.id(e) === fresh);
  return html`<${Card} title="Support bundle" id="bundle-card"><div id="bundle-body">
    <p class="hint">One tar.gz for support: version, configuration, box identity and heads, the capacity ledger, event and audit logs, metrics and a goroutine dump. It never holds passwords, session tokens or private keys. The newest ${svc.MaxNumberOfRecords || 'few'} are kept. ${logsHint}</p>
    <${ErrorBox} error=${err} onDismiss=${() => setErr(null)} />
    ${admin && collectTarget ? html`<div class="row"><button class="primary" id="bundle-collect" onClick=${collect} disabled=${busy}>${busy ? 'Collecting…' : 'Collect support bundle'}</button></div>` : null}
    <${TaskView} task=${task} />
    ${ready ? html`<p class="alert ok" role="status" id="bundle-ready">Support bundle ${ready.Id} is ready (${fmtBytes(ready.AdditionalDataSizeBytes)}).
      ${admin ? html` <button class="small" id="bundle-download" onClick=${() => download(ready)}>Download</button>` : null}</p>` : null}
    ${entries.length ? html`<div class="table-wrap"><table id="bundles">
      <thead><tr><th>Collected</th><th>Size</th>${admin ? html`<th>Download</th>` : null}</tr></thead>
      <tbody>${entries.map((e) => html`<tr data-bundle=${e.Id}><td>${fmtTime(e.Created)}</td><td>${fmtBytes(e.AdditionalDataSizeBytes)}</td>
        ${admin ? html`<td><button class="small" aria-label=${'Download support bundle ' + e.Id} onClick=${() => download(e)}>Download</button></td>` : null}</tr>`)}</tbody>
    </table></div>` : html`<p class="hint" id="bundle-none">No bundle has been collected.</p>`}
  </div><//>`;
}
