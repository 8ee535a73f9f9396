// Network & time: the management computer's interfaces, host name, NTP
// and clock (Managers/FM NetworkProtocol, EthernetInterfaces, DateTime).
// Administrators (ConfigureManager) get the forms; the box decides what
// it may change: on the cxlpool image it stores the settings (an
// interface's address applies at the next boot), elsewhere the host's
// operating system owns them and the box's refusal is shown as it is.
import { html, useState, useEffect } from '../lib.js';
import * as api from '../api.js';
import { Card, ErrorBox, Loading, Unavailable, fmtTime } from '../ui.js';

const MANAGER = '/redfish/v1/Managers/FM';

// resetRequired: did the answer say the change applies at the next boot?
const resetRequired = (body) => ((body && body['@Message.ExtendedInfo']) || []).some((m) => /\.ResetRequired$/.test(m.MessageId || ''));

export default function Network({ principal }) {
  const [d, setD] = useState(null);
  const [err, setErr] = useState(null);
  const reload = async () => {
    try {
      const mgr = await api.get(MANAGER);
      const [np, ifs] = await Promise.all([
        mgr.NetworkProtocol ? api.get(api.id(mgr.NetworkProtocol)) : null,
        mgr.EthernetInterfaces ? api.members(api.id(mgr.EthernetInterfaces)) : [],
      ]);
      setD({ mgr, np, ifs, fetched: Date.now() });
      setErr(null);
    } catch (e) { setErr(e); }
  };
  useEffect(() => { reload(); }, []);
  if (!d) return html`<h1>Network & time</h1>${err ? html`<${ErrorBox} error=${err} />` : html`<${Loading} />`}`;
  const admin = principal.can.manager;
  const { mgr, np, ifs } = d;
  return html`
    <div class="page-h"><h1>Network & time</h1></div>
    <${ErrorBox} error=${err} />
    ${np ? null : html`<${Unavailable} what="This box does not describe its network (no Managers/FM NetworkProtocol)." />`}
    <${Card} title="Interfaces" id="ifaces">
      ${ifs.length === 0 ? html`<p class="hint">No network interface is reported.</p>` : html`<div class="table-wrap"><table id="interfaces">
        <thead><tr><th>Interface</th><th>Link</th><th>MAC</th><th>IPv4</th><th>IPv6</th><th>MTU</th><th>Speed</th><th>Configured at boot</th></tr></thead>
        <tbody>${ifs.map((i) => html`<tr data-iface=${i.Id}>
          <td><b>${i.Id}</b>${i.InterfaceEnabled ? null : html` <span class="badge muted">disabled</span>`}</td>
          <td><span class=${'badge ' + (i.LinkStatus === 'LinkUp' ? 'ok' : 'muted')}>${i.LinkStatus === 'LinkUp' ? '● up' : '○ no link'}</span></td>
          <td class="mono">${i.MACAddress || '–'}</td>
          <td class="mono">${(i.IPv4Addresses || []).map((a) => html`<div>${a.Address}/${maskBits(a.SubnetMask)}${a.AddressOrigin ? html` <span class="hint">${a.AddressOrigin}</span>` : null}</div>`)}</td>
          <td class="mono">${(i.IPv6Addresses || []).map((a) => html`<div>${a.Address}/${a.PrefixLength}</div>`)}</td>
          <td>${i.MTUSize || '–'}</td>
          <td>${i.SpeedMbps ? i.SpeedMbps + ' Mbit/s' : '–'}</td>
          <td class="mono">${staticText(i)}</td>
        </tr>`)}</tbody></table></div>`}
      ${admin && ifs.length > 0 ? html`<${AddressForm} ifs=${ifs} onSaved=${reload} />` : null}
    <//>
    <div class="grid">
      ${np ? html`<${Card} title="Host name" id="host">
        <dl class="kv"><dt>Host name</dt><dd class="mono" id="hostname">${np.HostName || '–'}</dd>
          ${np.FQDN ? html`<dt>FQDN</dt><dd class="mono">${np.FQDN}</dd>` : null}
          <dt>Redfish service</dt><dd>${np.HTTPS && np.HTTPS.ProtocolEnabled ? `HTTPS, port ${np.HTTPS.Port}` : np.HTTP && np.HTTP.ProtocolEnabled ? html`<span class="badge warn">plain HTTP</span> port ${np.HTTP.Port}` : '–'}</dd></dl>
        ${admin && ifs.length > 0 ? html`<${HostNameForm} current=${np.HostName} iface=${ifs[0]} onSaved=${reload} />` : null}
      <//>` : null}
      ${np ? html`<${Card} title="Time synchronisation (NTP)" id="ntp">
        <dl class="kv"><dt>State</dt><dd id="ntp-state">${np.NTP && np.NTP.ProtocolEnabled === true ? 'on' : np.NTP && np.NTP.ProtocolEnabled === false ? 'off' : html`<span class="hint">not known to the box (its operating system's own)</span>`}</dd>
          <dt>Servers</dt><dd class="mono">${(np.NTP && np.NTP.NTPServers || []).join(', ') || '–'}</dd></dl>
        ${admin ? html`<${NTPForm} uri=${api.id(mgr.NetworkProtocol)} ntp=${np.NTP || {}} onSaved=${reload} />` : null}
      <//>` : null}
      <${Card} title="Date & time" id="clock">
        <dl class="kv"><dt>Box time</dt><dd id="box-time">${fmtTime(mgr.DateTime)} <span class="hint">(UTC${mgr.DateTimeLocalOffset || ''})</span></dd>
          <dt>Difference to this browser</dt><dd>${skewText(mgr.DateTime, d.fetched)}</dd></dl>
        ${admin ? html`<${TimeForm} onSaved=${reload} />` : null}
      <//>
    </div>`;
}

function maskBits(mask) {
  return (mask || '').split('.').reduce((n, o) => n + (Number(o) >>> 0).toString(2).replace(/0/g, '').length, 0);
}

// staticText is what the image configures on the interface at boot.
function staticText(i) {
  if (!i.IPv4StaticAddresses) return html`<span class="hint">by the host OS</span>`;
  const a = i.IPv4StaticAddresses[0];
  if (!a) return '–';
  return `${a.Address}/${maskBits(a.SubnetMask)}${a.Gateway ? ' via ' + a.Gateway : ''}`;
}

function skewText(dt, fetched) {
  if (!dt) return '–';
  const s = Math.round((new Date(dt).getTime() - fetched) / 1000);
  const a = Math.abs(s);
  if (a < 2) return 'in step';
  const way = s > 0 ? 'ahead' : 'behind';
  if (a < 120) return `${a} s ${way}`;
  if (a < 7200) return `${Math.round(a / 60)} min ${way}`;
  return `${Math.round(a / 3600)} h ${way}`;
}

// useSave runs a change and keeps its error or success note.
function useSave(onSaved) {
  const [err, setErr] = useState(null);
  const [ok, setOk] = useState('');
  const [busy, setBusy] = useState(false);
  const run = async (fn) => {
    setErr(null); setOk(''); setBusy(true);
    try { setOk(await fn()); onSaved(); } catch (x) { setErr(x); } finally { setBusy(false); }
  };
  const note = html`<${ErrorBox} error=${err} />${ok ? html`<p class="alert ok" role="status">${ok}</p>` : null}`;
  return { run, note, busy };
}

function NTPForm({ uri, ntp, onSaved }) {
  const [on, setOn] = useState(ntp.ProtocolEnabled === true);
  const [servers, setServers] = useState((ntp.NTPServers || []).join(' '));
  const { run, note, busy } = useSave(onSaved);
  const submit = (e) => {
    e.preventDefault();
    run(async () => {
      const list = servers.split(/[\s,]+/).filter(Boolean);
      await api.patch(uri, { NTP: { ProtocolEnabled: on, NTPServers: list } });
      return 'Saved. The box synchronises with the servers now.';
    });
  };
  return html`<form id="ntp-form" onSubmit=${submit}>
    <div class="field"><label for="ntp-servers">NTP servers</label>
      <input id="ntp-servers" value=${servers} placeholder="pool.ntp.org 192.168.1.1" onInput=${(e) => setServers(e.target.value)} />
      <div class="hint">Host names or addresses, separated by spaces; asked in turn (at most 4).</div></div>
    <div class="field"><label><input id="ntp-enabled" type="checkbox" checked=${on} onChange=${(e) => setOn(e.target.checked)} /> Synchronise the clock</label></div>
    ${note}
    <button class="primary" type="submit" id="ntp-save" disabled=${busy}>Save NTP</button>
  </form>`;
}

function HostNameForm({ current, iface, onSaved }) {
  const [name, setName] = useState(current || '');
  const { run, note, busy } = useSave(onSaved);
  const submit = (e) => {
    e.preventDefault();
    run(async () => {
      // The host name is the box's: any interface's HostName sets it.
      await api.patch(api.id(iface), { HostName: name });
      return 'Saved.';
    });
  };
  return html`<form id="hostname-form" onSubmit=${submit}>
    <div class="field"><label for="hostname-input">New host name</label>
      <input id="hostname-input" required pattern="[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?" value=${name} onInput=${(e) => setName(e.target.value)} />
      <div class="hint">One label: letters, digits and hyphens.</div></div>
    ${note}
    <button class="primary" type="submit" id="hostname-save" disabled=${busy}>Save host name</button>
  </form>`;
}

function AddressForm({ ifs, onSaved }) {
  const configured = ifs.find((i) => (i.IPv4StaticAddresses || []).length > 0) || ifs[0];
  const cur = (configured.IPv4StaticAddresses || [])[0] || {};
  const [f, setF] = useState({ iface: configured.Id, Address: cur.Address || '', SubnetMask: cur.SubnetMask || '255.255.255.0', Gateway: cur.Gateway || '' });
  const set = (k) => (e) => setF({ ...f, [k]: e.target.value });
  const { run, note, busy } = useSave(onSaved);
  const submit = (e) => {
    e.preventDefault();
    run(async () => {
      const i = ifs.find((x) => x.Id === f.iface);
      const r = await api.patch(api.id(i), { IPv4StaticAddresses: [{ Address: f.Address, SubnetMask: f.SubnetMask, Gateway: f.Gateway }] });
      return resetRequired(r.body) ? 'Saved. The new address applies at the next reboot of the box.' : 'Saved: no change.';
    });
  };
  return html`<form id="address-form" onSubmit=${submit}>
    <h3>Static IPv4 address</h3>
    <p class="hint">The box configures one interface at boot; saving an address here makes it this one.</p>
    <div class="row">
      <div class="field"><label for="addr-iface">Interface</label>
        <select id="addr-iface" value=${f.iface} onChange=${set('iface')}>${ifs.map((i) => html`<option value=${i.Id}>${i.Id}</option>`)}</select></div>
      <div class="field"><label for="addr-address">Address</label><input id="addr-address" required inputmode="decimal" value=${f.Address} onInput=${set('Address')} /></div>
      <div class="field"><label for="addr-mask">Subnet mask</label><input id="addr-mask" required inputmode="decimal" value=${f.SubnetMask} onInput=${set('SubnetMask')} /></div>
      <div class="field"><label for="addr-gateway">Gateway</label><input id="addr-gateway" inputmode="decimal" value=${f.Gateway} onInput=${set('Gateway')} /></div>
    </div>
    ${note}
    <button class="primary" type="submit" id="addr-save" disabled=${busy}>Save address</button>
  </form>`;
}

// localInput is a Date as a datetime-local input value (this browser's
// time zone, to the second).
function localInput(d) {
  const p = (n) => String(n).padStart(2, '0');
  return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())}T${p(d.getHours())}:${p(d.getMinutes())}:${p(d.getSeconds())}`;
}

function TimeForm({ onSaved }) {
  const [v, setV] = useState(localInput(new Date()));
  const { run, note, busy } = useSave(onSaved);
  const submit = (e) => {
    e.preventDefault();
    run(async () => {
      const t = new Date(v);
      if (Number.isNaN(t.getTime())) throw new Error('Enter a date and time.');
      await api.patch(MANAGER, { DateTime: t.toISOString().replace(/\.\d{3}Z$/, 'Z') });
      return 'Clock set.';
    });
  };
  return html`<form id="time-form" onSubmit=${submit}>
    <div class="field"><label for="time-value">Set the box's clock (this browser's time zone)</label>
      <input id="time-value" type="datetime-local" step="1" required value=${v} onInput=${(e) => setV(e.target.value)} /></div>
    ${note}
    <div class="row"><button type="button" id="time-browser" onClick=${() => setV(localInput(new Date()))}>Use this browser's time</button>
      <button class="primary" type="submit" id="time-save" disabled=${busy}>Set time</button></div>
    <p class="hint">With NTP on, the next synchronisation corrects a clock set by hand.</p>
  </form>`;
}
