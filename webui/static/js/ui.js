// Shared components and formatting: cards, gauges, status badges, dialogs,
// task progress and the "not available on this box" state.
import { html, useState, useEffect, useRef, useCallback, createContext, useContext } from './lib.js';
import { ApiError } from './api.js';

// Principal is the logged-in account (see api.principal), for pages that
// hide what the role may not do.
export const Principal = createContext(null);
export const usePrincipal = () => useContext(Principal);

// Root is the ServiceRoot, read once after login: its links say which
// services this box serves.
export const Root = createContext({});
export const useRoot = () => useContext(Root);

export function fmtMiB(mib) {
  if (mib === undefined || mib === null || Number.isNaN(mib)) return '–';
  const units = ['MiB', 'GiB', 'TiB', 'PiB'];
  let v = Number(mib);
  let i = 0;
  while (Math.abs(v) >= 1024 && i < units.length - 1) { v /= 1024; i++; }
  const digits = v === Math.round(v) ? 0 : v < 10 ? 2 : 1;
  return `${v.toFixed(digits)} ${units[i]}`;
}

export function fmtBytes(n) {
  if (n === undefined || n === null) return '–';
  if (n < 1024) return `${n} B`;
  if (n < 1024 * 1024) return `${(n / 1024).toFixed(1)} KiB`;
  return fmtMiB(n / (1024 * 1024));
}

export function fmtTime(s) {
  if (!s) return '–';
  const d = new Date(s);
  if (Number.isNaN(d.getTime())) return s;
  return d.toLocaleString(undefined, { dateStyle: 'short', timeStyle: 'medium' });
}

export const pct = (v, total) => (total > 0 ? Math.min(100, Math.max(0, (100 * v) / total)) : 0);

// Okabe–Ito: eight colours told apart with every common colour-vision
// deficiency, one per host head.
export const HOST_COLORS = ['#E69F00', '#56B4E9', '#009E73', '#F0E442', '#0072B2', '#D55E00', '#CC79A7', '#999999'];
export const hostColor = (n) => HOST_COLORS[((n % 8) + 8) % 8];
export const hostNum = (systemId) => Number(String(systemId || '').replace(/^.*Host/, '')) || 0;

export function Card({ title, actions, children, class: cls = '', id }) {
  return html`<section class=${'card ' + cls} aria-labelledby=${id ? id + '-t' : undefined}>
    ${title ? html`<header class="card-h"><h2 id=${id ? id + '-t' : undefined}>${title}</h2>${actions ? html`<div class="card-actions">${actions}</div>` : null}</header>` : null}
    <div class="card-b">${children}</div>
  </section>`;
}

const STATE_CLASS = {
  OK: 'ok', Enabled: 'ok', Completed: 'ok', Warning: 'warn', Critical: 'bad', Exception: 'bad',
  UnavailableOffline: 'bad', Absent: 'muted', Disabled: 'muted', StandbyOffline: 'muted',
  Starting: 'info', Running: 'info', New: 'info', Transitioning: 'info',
};

// Badge shows a state in words and colour (never colour alone).
export function Badge({ value, label }) {
  const v = value || 'Unknown';
  return html`<span class=${'badge ' + (STATE_CLASS[v] || 'muted')}>${label || v}</span>`;
}

export function LinkBadge({ up }) {
  return html`<span class=${'badge ' + (up ? 'ok' : 'bad')}>${up ? '● link up' : '○ link down'}</span>`;
}

export function Health({ status }) {
  if (!status) return html`<span class="badge muted">Unknown</span>`;
  return html`<${Badge} value=${status.Health || status.State} label=${status.Health ? `${status.Health} (${status.State || '–'})` : status.State} />`;
}

// Gauge: a ring showing value of total, with the numbers in text.
export function Gauge({ label, value, total, cls = '' }) {
  const p = pct(value, total);
  const r = 40;
  const c = 2 * Math.PI * r;
  return html`<figure class=${'gauge ' + cls}>
    <svg viewBox="0 0 100 100" role="img" aria-label=${`${label}: ${fmtMiB(value)} of ${fmtMiB(total)} (${p.toFixed(1)}%)`}>
      <circle class="gauge-track" cx="50" cy="50" r=${r} />
      <circle class="gauge-fill" cx="50" cy="50" r=${r} stroke-dasharray=${`${(c * p) / 100} ${c}`} transform="rotate(-90 50 50)" />
      <text x="50" y="47" class="gauge-pct">${p.toFixed(p < 10 && p > 0 ? 1 : 0)}%</text>
      <text x="50" y="63" class="gauge-val">${fmtMiB(value)}</text>
    </svg>
    <figcaption>${label}</figcaption>
  </figure>`;
}

// StackBar: disjoint parts of a whole, with a legend.
export function StackBar({ parts, total, label }) {
  return html`<div class="stack">
    <div class="stack-bar" role="img" aria-label=${label + ': ' + parts.map((p) => `${p.label} ${fmtMiB(p.value)}`).join(', ')}>
      ${parts.filter((p) => p.value > 0).map((p) => html`<span class=${'seg ' + p.cls} style=${{ width: pct(p.value, total) + '%' }} title=${`${p.label}: ${fmtMiB(p.value)}`}></span>`)}
    </div>
    <ul class="legend">
      ${parts.map((p) => html`<li><span class=${'sw ' + p.cls}></span>${p.label} <b>${fmtMiB(p.value)}</b></li>`)}
    </ul>
  </div>`;
}

export function Meter({ value, max, label }) {
  return html`<div class="meter" role="meter" aria-valuemin="0" aria-valuemax=${max} aria-valuenow=${value} aria-label=${label}>
    <span style=${{ width: pct(value, max) + '%' }}></span>
  </div>`;
}

export function ErrorBox({ error, onDismiss }) {
  if (!error) return null;
  const e = error instanceof ApiError ? error : { message: String((error && error.message) || error) };
  const role = (useContext(Principal) || {}).role;
  return html`<div class="alert bad" role="alert">
    <strong>${e.status ? `The box refused (${e.status})` : 'Error'}:</strong> <span class="alert-msg">${e.message}</span>
    ${e.status === 403 && /InsufficientPrivilege$/.test(e.messageId || '') ? html`<div class="forbidden-role">This is not permitted for your role${role ? ' (' + role + ')' : ''}.</div>` : null}
    ${e.resolution ? html`<div class="hint">${e.resolution}</div>` : null}
    ${onDismiss ? html`<button class="link" onClick=${onDismiss}>Dismiss</button>` : null}
  </div>`;
}

export function Notice({ kind = 'info', children }) {
  return html`<div class=${'alert ' + kind} role="status">${children}</div>`;
}

// Unavailable: a page or panel whose backing resource this box does not
// serve (yet): said plainly, with what was looked for.
export function Unavailable({ what, detail }) {
  return html`<div class="unavailable" role="status">
    <h2>Not available on this box</h2>
    <p>${what}</p>
    ${detail ? html`<p class="hint">${detail}</p>` : null}
  </div>`;
}

// NotPermitted: a page or panel the account's role may not see (a host
// account opening an appliance-wide page): said plainly, with the role.
export function NotPermitted({ what, principal }) {
  const p = principal || {};
  return html`<div class="unavailable not-permitted" role="status" id="not-permitted">
    <h2>Not permitted for your role</h2>
    <p>${what} is not permitted for the role ${p.role || 'of this account'}${p.host ? ` (an account bound to ${p.host})` : ''}.</p>
    <p class="hint">An administrator can give the account another role on the Users & roles page. <a href="#/dashboard">Back to the dashboard</a></p>
  </div>`;
}

export function Loading({ what = 'Loading' }) {
  return html`<p class="loading" role="status" aria-live="polite">${what}…</p>`;
}

// useAsync runs fn now and on reload(); keeps the last good data while
// reloading so live pages do not flicker.
export function useAsync(fn, deps = []) {
  const [st, set] = useState({ data: undefined, error: null, loading: true });
  const seq = useRef(0);
  const run = useCallback(async () => {
    const n = ++seq.current;
    try {
      const data = await fn();
      if (n === seq.current) set({ data, error: null, loading: false });
    } catch (error) {
      if (n === seq.current) set((s) => ({ data: s.data, error, loading: false }));
    }
  }, deps);
  useEffect(() => { run(); }, [run]);
  return { ...st, reload: run };
}

// Modal is a native <dialog>: focus moves in and is trapped, Escape closes.
export function Modal({ title, onClose, children, wide }) {
  const ref = useRef(null);
  useEffect(() => {
    const d = ref.current;
    if (d && !d.open) d.showModal();
    const cancel = (e) => { e.preventDefault(); onClose(); };
    d.addEventListener('cancel', cancel);
    return () => { d.removeEventListener('cancel', cancel); if (d.open) d.close(); };
  }, []);
  return html`<dialog ref=${ref} class=${wide ? 'wide' : ''} aria-labelledby="dlg-title">
    <header class="dlg-h"><h2 id="dlg-title">${title}</h2>
      <button class="icon" aria-label="Close dialog" onClick=${onClose}>✕</button></header>
    <div class="dlg-b">${children}</div>
  </dialog>`;
}

// Confirm asks before a change, naming exactly what will happen.
export function Confirm({ title, children, confirmLabel = 'Confirm', danger, onConfirm, onClose, busy }) {
  return html`<${Modal} title=${title} onClose=${onClose}>
    ${children}
    <div class="dlg-actions">
      <button onClick=${onClose}>Cancel</button>
      <button class=${danger ? 'danger' : 'primary'} onClick=${onConfirm} disabled=${busy} id="confirm-ok">${confirmLabel}</button>
    </div>
  <//>`;
}

// TaskView shows a long operation: its state, progress and messages.
export function TaskView({ task }) {
  if (!task) return null;
  const state = task.TaskState || 'Running';
  const p = task.PercentComplete || 0;
  return html`<div class="task" aria-live="polite">
    <div class="task-h"><span>${task.Name || 'Task'}</span> <${Badge} value=${state} /></div>
    <progress max="100" value=${state === 'Running' && !p ? undefined : p} aria-label="Task progress"></progress>
    ${(task.Messages || []).length ? html`<ul class="task-msgs">${task.Messages.map((m) => html`<li>${m.Message}</li>`)}</ul>` : null}
  </div>`;
}

// Field: a labelled form control.
export function Field({ label, hint, children, id }) {
  return html`<div class="field"><label for=${id}>${label}</label>${children}${hint ? html`<div class="hint" id=${id + '-hint'}>${hint}</div>` : null}</div>`;
}

// ActionButton runs an async action, disables itself meanwhile and
// reports a failure through onError.
export function ActionButton({ onClick, children, cls = '', label, onError }) {
  const [busy, setBusy] = useState(false);
  const click = async () => {
    setBusy(true);
    try { await onClick(); } catch (e) { if (onError) onError(e); } finally { setBusy(false); }
  };
  return html`<button class=${cls} onClick=${click} disabled=${busy} aria-label=${label}>${children}</button>`;
}

// origin names the resource an event is about, shortly ("Connections/3").
export function origin(e) {
  const link = (e && (e.OriginOfCondition || (e.Links && e.Links.OriginOfCondition))) || null;
  const uri = (link && link['@odata.id']) || '';
  return uri.split('/').slice(-2).join('/');
}

export const statusText = (s) => (s ? [s.State, s.Health].filter(Boolean).join(' / ') : '–');
