// The console's shell: login, the session's life (idle timeout, expired
// sessions, required password changes), the theme, navigation and the
// pages, each loaded on first use so the login page stays small.
import { html, render, useState, useEffect, useCallback } from './lib.js';
import * as api from './api.js';
import * as live from './live.js';
import { Principal, Root, ErrorBox, Notice, Loading, Field, NotPermitted } from './ui.js';
import { Notifications } from './notify.js';

const PAGES = [
  { path: 'dashboard', title: 'Dashboard', load: () => import('./pages/dashboard.js') },
  { path: 'hosts', title: 'Hosts & capacity', load: () => import('./pages/hosts.js') },
  { path: 'topology', title: 'Topology', load: () => import('./pages/topology.js') },
  { path: 'hotpages', title: 'Hot pages', load: () => import('./pages/hotpages.js') },
  { path: 'events', title: 'Events & audit log', load: () => import('./pages/events.js') },
  { path: 'board', title: 'Sensors, fans & power', load: () => import('./pages/board.js') },
  { path: 'alerts', title: 'Alerts & thresholds', load: () => import('./pages/alerts.js'), appliance: true },
  { path: 'exports', title: 'Exports', load: () => import('./pages/exports.js'), appliance: true },
  { path: 'kv', title: 'KV-cache namespaces', load: () => import('./pages/kv.js'), appliance: true },
  { path: 'fleet', title: 'Fleet', load: () => import('./pages/fleet.js'), appliance: true },
  { path: 'firmware', title: 'Firmware', load: () => import('./pages/firmware.js') },
  { path: 'users', title: 'Users & roles', load: () => import('./pages/users.js') },
  { path: 'network', title: 'Network & time', load: () => import('./pages/network.js'), appliance: true },
  { path: 'settings', title: 'Settings', load: () => import('./pages/settings.js') },
];

// --- theme: follows the system unless the user picked one ---
const THEME_KEY = 'cxlpool.theme';
function applyTheme(t) {
  if (t === 'light' || t === 'dark') document.documentElement.dataset.theme = t;
  else delete document.documentElement.dataset.theme;
}
applyTheme(localStorage.getItem(THEME_KEY));

function ThemeToggle() {
  const [t, setT] = useState(localStorage.getItem(THEME_KEY) || 'auto');
  const next = { auto: 'light', light: 'dark', dark: 'auto' }[t];
  const click = () => {
    if (next === 'auto') localStorage.removeItem(THEME_KEY); else localStorage.setItem(THEME_KEY, next);
    applyTheme(next);
    setT(next);
  };
  return html`<button class="ghost" onClick=${click} aria-label=${`Theme: ${t}. Switch to ${next}`} title="Colour theme">
    ${t === 'dark' ? '☾ Dark' : t === 'light' ? '☀ Light' : '◐ Auto'}</button>`;
}

// --- routing: #/page?query ---
function parseHash() {
  const h = location.hash.replace(/^#\/?/, '');
  const [path, q] = h.split('?');
  return { path: path || 'dashboard', query: new URLSearchParams(q || '') };
}

function useRoute() {
  const [r, setR] = useState(parseHash());
  useEffect(() => {
    const on = () => setR(parseHash());
    addEventListener('hashchange', on);
    on(); // a change between the first render and this effect
    return () => removeEventListener('hashchange', on);
  }, []);
  return r;
}

// --- login ---
function Login({ onLogin, reason }) {
  const [user, setUser] = useState('');
  const [pw, setPw] = useState('');
  const [err, setErr] = useState(null);
  const [busy, setBusy] = useState(false);
  const submit = async (e) => {
    e.preventDefault();
    setBusy(true);
    setErr(null);
    try {
      await api.login(user, pw);
      setPw('');
      onLogin();
    } catch (x) {
      setErr(x);
    } finally {
      setBusy(false);
    }
  };
  return html`<main class="login" id="main">
    <form class="card login-card" onSubmit=${submit} aria-labelledby="login-title">
      <h1 id="login-title"><span class="logo" aria-hidden="true">▦</span> cxlpool</h1>
      <p class="hint">CXL memory pool · Fabric Manager console</p>
      ${reason ? html`<${Notice} kind="warn">${reason}<//>` : null}
      <${Field} label="User name" id="login-user">
        <input id="login-user" name="username" autocomplete="username" required value=${user} onInput=${(e) => setUser(e.target.value)} autofocus />
      <//>
      <${Field} label="Password" id="login-password">
        <input id="login-password" name="password" type="password" autocomplete="current-password" required value=${pw} onInput=${(e) => setPw(e.target.value)} />
      <//>
      <${ErrorBox} error=${err} />
      <button class="primary wide" type="submit" disabled=${busy} id="login-submit">${busy ? 'Signing in…' : 'Sign in'}</button>
      <div class="login-foot"><${ThemeToggle} /></div>
    </form>
  </main>`;
}

// PasswordChange: the account must choose a new password before it may
// use the console (ManagerAccount.PasswordChangeRequired).
function PasswordChange({ principal, onDone, onLogout }) {
  const [pw, setPw] = useState('');
  const [pw2, setPw2] = useState('');
  const [err, setErr] = useState(null);
  const submit = async (e) => {
    e.preventDefault();
    if (pw !== pw2) { setErr(new Error('The two passwords differ.')); return; }
    try {
      await api.patch(principal.account, { Password: pw });
      onDone();
    } catch (x) { setErr(x); }
  };
  return html`<main class="login" id="main">
    <form class="card login-card" onSubmit=${submit} aria-labelledby="pw-title">
      <h1 id="pw-title">Choose a new password</h1>
      <p>The account <b>${principal.user}</b> must change its password before continuing.</p>
      <${Field} label="New password" id="pw-new"><input id="pw-new" type="password" autocomplete="new-password" required minlength="8" value=${pw} onInput=${(e) => setPw(e.target.value)} /><//>
      <${Field} label="Repeat the new password" id="pw-new2"><input id="pw-new2" type="password" autocomplete="new-password" required value=${pw2} onInput=${(e) => setPw2(e.target.value)} /><//>
      <${ErrorBox} error=${err} />
      <button class="primary wide" type="submit">Change password</button>
      <button class="ghost wide" type="button" onClick=${onLogout}>Sign out</button>
    </form>
  </main>`;
}

// --- the shell ---
function StreamIndicator() {
  const [s, setS] = useState(live.streamState());
  useEffect(() => {
    const off = live.onStreamState(setS);
    setS(live.streamState()); // it may have changed before this subscribed
    return off;
  }, []);
  const label = { open: 'Live', connecting: 'Connecting', reconnecting: 'Reconnecting', closed: 'Offline' }[s] || s;
  return html`<span class=${'live-dot ' + s} role="status" aria-live="polite" title="Event stream">${label}</span>`;
}

function PageHost({ route, principal }) {
  const page = PAGES.find((p) => p.path === route.path);
  const [mod, setMod] = useState(null);
  const [err, setErr] = useState(null);
  useEffect(() => {
    let cancelled = false;
    setMod(null);
    setErr(null);
    if (!page) return;
    page.load().then((m) => { if (!cancelled) setMod(m); }, (e) => { if (!cancelled) setErr(e); });
    document.title = `${page.title} · cxlpool`;
    return () => { cancelled = true; };
  }, [route.path]);
  if (!page) return html`<h1>Not found</h1><p>No page “${route.path}”. <a href="#/dashboard">Dashboard</a></p>`;
  if (page.appliance && !principal.can.appliance) return html`<h1>${page.title}</h1><${NotPermitted} what=${'The ' + page.title + ' page'} principal=${principal} />`;
  if (err) return html`<${ErrorBox} error=${err} />`;
  if (!mod) return html`<${Loading} what=${'Loading ' + page.title} />`;
  const Page = mod.default;
  return html`<${Page} query=${route.query} principal=${principal} />`;
}

function Shell({ principal, onLogout }) {
  const route = useRoute();
  const visible = PAGES.filter((p) => !p.appliance || principal.can.appliance);
  useEffect(() => {
    const m = document.getElementById('main');
    if (m) m.focus({ preventScroll: true });
    // On a narrow screen the page list is one scrolling row: keep the
    // current page's link in view.
    const cur = document.querySelector('.sidenav a[aria-current="page"]');
    if (cur) cur.scrollIntoView({ block: 'nearest', inline: 'nearest' });
  }, [route.path]);
  return html`<div class="shell">
    <a class="skip" href="#main" onClick=${(e) => { e.preventDefault(); document.getElementById('main').focus(); }}>Skip to content</a>
    <header class="topbar">
      <div class="brand"><span class="logo" aria-hidden="true">▦</span> cxlpool <span class="hint">Fabric Manager</span></div>
      <div class="topbar-r">
        <${StreamIndicator} />
        <${Notifications} principal=${principal} />
        <span class="who" id="whoami">${principal.user} <span class="badge muted">${principal.role}${principal.host ? ' · ' + principal.host : ''}</span></span>
        <${ThemeToggle} />
        <button class="ghost" onClick=${onLogout} id="logout">Sign out</button>
      </div>
    </header>
    <nav class="sidenav" aria-label="Pages">
      <ul>${visible.map((p) => html`<li><a href=${'#/' + p.path} aria-current=${route.path === p.path ? 'page' : undefined}>${p.title}</a></li>`)}</ul>
    </nav>
    <main id="main" tabindex="-1" class="content">
      <${PageHost} route=${route} principal=${principal} key=${route.path} />
    </main>
  </div>`;
}

// idleText says how long a timeout of s seconds is.
function idleText(s) {
  if (s < 120) return `${s} seconds`;
  if (s < 7200) return `${Math.round(s / 60)} minutes`;
  return `${Math.round(s / 3600)} hours`;
}

// --- the app: session state machine ---
function App() {
  const [st, setSt] = useState({ phase: api.token() ? 'loading' : 'login', reason: '' });
  const [principal, setPrincipal] = useState(null);
  const [root, setRoot] = useState({});

  const endSession = useCallback((reason) => {
    live.stop();
    api.forget();
    setPrincipal(null);
    setSt({ phase: 'login', reason });
  }, []);

  const logout = useCallback(async () => {
    live.stop();
    await api.logout();
    setPrincipal(null);
    setSt({ phase: 'login', reason: '' });
  }, []);

  const begin = useCallback(async () => {
    setSt({ phase: 'loading', reason: '' });
    try {
      const [p, r] = await Promise.all([api.principal(), api.get('/redfish/v1')]);
      setRoot(r);
      setPrincipal(p);
      if (p.passwordChangeRequired) { setSt({ phase: 'password', reason: '' }); return; }
      const es = r.EventService ? await api.get(api.id(r.EventService)) : null;
      if (es && es.ServerSentEventUri) live.start(es.ServerSentEventUri, () => endSession('Your session has ended. Please sign in again.'));
      setSt({ phase: 'ready', reason: '' });
    } catch (e) {
      // DSP0266: until the account has a new password, the box answers
      // 403 PasswordChangeRequired naming the account, which the session
      // may still read and PATCH.
      if (e.status === 403 && /\.PasswordChangeRequired$/.test(e.messageId) && e.messageArgs[0]) {
        try {
          const acct = await api.get(e.messageArgs[0]);
          setPrincipal({ user: acct.UserName, account: e.messageArgs[0], passwordChangeRequired: true });
          setSt({ phase: 'password', reason: '' });
          return;
        } catch (x) { e = x; }
      }
      if (e.status === 401 || !api.token()) endSession('Your session has ended. Please sign in again.');
      else setSt({ phase: 'error', reason: e.message });
    }
  }, []);

  useEffect(() => {
    api.onUnauthorized(() => endSession('Your session has ended (timed out or closed by an administrator). Please sign in again.'));
    if (api.token()) begin();
  }, []);

  // Idle timeout: the service's SessionTimeout applies to the person,
  // not to the console's own polling, which would keep a session alive.
  // The check reads Date.now each second (cheap), so a suspended laptop
  // signs out on waking; the timeout in force is on <html
  // data-idle-timeout> for the browser tests, which move Date.now on.
  useEffect(() => {
    if (st.phase !== 'ready') return;
    let timeout = 30 * 60;
    const rootEl = document.documentElement;
    api.get('/redfish/v1/SessionService').then((s) => {
      timeout = s.SessionTimeout || timeout;
      rootEl.dataset.idleTimeout = String(timeout);
    }, () => {});
    let lastActive = Date.now();
    let ending = false;
    const touch = () => { lastActive = Date.now(); };
    const evs = ['keydown', 'pointerdown', 'wheel', 'touchstart'];
    evs.forEach((e) => addEventListener(e, touch, { passive: true }));
    const iv = setInterval(async () => {
      if (ending || Date.now() - lastActive <= timeout * 1000) return;
      ending = true;
      live.stop();
      await api.logout();
      setPrincipal(null);
      setSt({ phase: 'login', reason: `Signed out after ${idleText(timeout)} without activity.` });
    }, 1000);
    return () => { evs.forEach((e) => removeEventListener(e, touch)); clearInterval(iv); delete rootEl.dataset.idleTimeout; };
  }, [st.phase]);

  switch (st.phase) {
    case 'login':
      return html`<${Login} onLogin=${begin} reason=${st.reason} />`;
    case 'loading':
      return html`<main class="login" id="main"><${Loading} what="Opening the console" /></main>`;
    case 'error':
      return html`<main class="login" id="main"><div class="card login-card"><${ErrorBox} error=${st.reason} /><button onClick=${begin}>Retry</button> <button onClick=${logout}>Sign out</button></div></main>`;
    case 'password':
      return html`<${PasswordChange} principal=${principal} onDone=${begin} onLogout=${logout} />`;
  }
  return html`<${Root.Provider} value=${root}><${Principal.Provider} value=${principal}>
    <${Shell} principal=${principal} onLogout=${logout} />
  <//><//>`;
}

render(html`<${App} />`, document.getElementById('app'));
