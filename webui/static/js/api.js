// The console's Redfish client. Every call carries the session's
// X-Auth-Token; a failed call throws an ApiError whose message is the
// server's own (the Base registry message of @Message.ExtendedInfo), so
// pages show what the box said rather than a guess.

const TOKEN_KEY = 'cxlpool.token';
const SESSION_KEY = 'cxlpool.session';

export class ApiError extends Error {
  constructor(status, body, fallback) {
    const err = body && body.error;
    const info = (err && err['@Message.ExtendedInfo']) || [];
    const text = info.length ? info.map((m) => m.Message).filter(Boolean).join(' ') : (err && err.message) || fallback;
    super(text || fallback);
    this.name = 'ApiError';
    this.status = status;
    this.messageId = (info[0] && info[0].MessageId) || (err && err.code) || '';
    this.messageArgs = (info[0] && info[0].MessageArgs) || [];
    this.resolution = (info[0] && info[0].Resolution) || '';
  }
}

let unauthorized = () => {};

// onUnauthorized registers what happens when the session is no longer
// valid (timed out, deleted by an administrator, account disabled).
export function onUnauthorized(fn) {
  unauthorized = fn;
}

export const token = () => sessionStorage.getItem(TOKEN_KEY);
export const sessionURI = () => sessionStorage.getItem(SESSION_KEY);

const sleep = (ms, signal) =>
  new Promise((resolve) => {
    const t = setTimeout(resolve, ms);
    if (signal) signal.addEventListener('abort', () => { clearTimeout(t); resolve(); }, { once: true });
  });
export { sleep };

// Every call made for a session carries the session's signal: signing out
// (or the session ending) aborts the calls still in flight, so that none
// is answered 401 by the session just deleted; the browser logs such an
// answer as a failed load, an aborted call it does not.
let session = new AbortController();
const sessionSignal = (signal) => (signal ? AbortSignal.any([signal, session.signal]) : session.signal);

// request sends one call. opts: token (the session's unless given), accept (extra statuses that are not
// errors), ifMatch, signal, anonymous.
export async function request(method, path, body, opts = {}) {
  // X-Requested-With: a 401 then carries no Basic challenge, which would
  // make the browser pop up its own login dialog.
  const headers = { Accept: 'application/json', 'X-Requested-With': 'XMLHttpRequest' };
  const tok = opts.token || token();
  if (!tok && !opts.anonymous) {
    // Signed out: a call would only be refused (a page refreshing as the
    // console signs out).
    throw new ApiError(401, null, 'Not signed in.');
  }
  if (tok && !opts.anonymous) headers['X-Auth-Token'] = tok;
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  if (opts.ifMatch) headers['If-Match'] = opts.ifMatch;
  let res;
  try {
    res = await fetch(path, {
      method, headers, cache: 'no-store', signal: sessionSignal(opts.signal),
      body: body === undefined ? undefined : JSON.stringify(body),
    });
  } catch (e) {
    if (e.name === 'AbortError') throw e;
    throw new ApiError(0, null, 'The box did not answer (' + e.message + ').');
  }
  const text = res.status === 204 || method === 'HEAD' ? '' : await res.text();
  let json = null;
  if (text) {
    try { json = JSON.parse(text); } catch { json = null; }
  }
  // Only the session in use ends the console's: a 401 of a request that
  // was in flight when the console signed out (or signed in anew) does not.
  if (res.status === 401 && tok && !opts.anonymous && tok === token()) unauthorized();
  if (!res.ok && !opts.noThrow && !(opts.accept || []).includes(res.status)) {
    throw new ApiError(res.status, json, `${res.status} ${res.statusText}`);
  }
  return { status: res.status, headers: res.headers, body: json };
}

export const get = async (path, opts) => (await request('GET', path, undefined, opts)).body;
export const post = (path, body, opts) => request('POST', path, body, opts);
export const patch = (path, body, opts) => request('PATCH', path, body, opts);
export const del = (path, opts) => request('DELETE', path, undefined, opts);

const withQuery = (path, q) => path + (path.includes('?') ? '&' : '?') + q;

// members returns a collection's members expanded (one request).
export async function members(path, opts) {
  const c = await get(withQuery(path, '$expand=.'), opts);
  return (c && c.Members) || [];
}

// lastEntries returns the newest n members of a collection that lists
// oldest first (the log services), newest first.
export async function lastEntries(path, n) {
  const head = await get(withQuery(path, '$top=0'));
  const count = head['Members@odata.count'] || 0;
  if (count === 0) return [];
  const skip = Math.max(0, count - n);
  const page = await get(withQuery(path, `$expand=.&$skip=${skip}&$top=${n}`));
  return (page.Members || []).slice().reverse();
}

export const id = (ref) => (ref && ref['@odata.id']) || '';
export const last = (uri) => (uri || '').split('/').filter(Boolean).pop() || '';

export async function login(user, password) {
  const r = await request('POST', '/redfish/v1/SessionService/Sessions', { UserName: user, Password: password }, { anonymous: true });
  sessionStorage.setItem(TOKEN_KEY, r.headers.get('X-Auth-Token') || '');
  sessionStorage.setItem(SESSION_KEY, r.headers.get('Location') || '');
  return r.body;
}

export async function logout() {
  const s = sessionURI();
  const tok = token();
  forget(); // first: the answers of requests still in flight are no longer this console's
  if (s && tok) {
    try { await request('DELETE', s, undefined, { token: tok }); } catch { /* the session may be gone already */ }
  }
}

export function forget() {
  session.abort();
  session = new AbortController();
  sessionStorage.removeItem(TOKEN_KEY);
  sessionStorage.removeItem(SESSION_KEY);
}

// waitTask follows a task monitor until the operation ends: onProgress
// gets the Task resource while it runs; the result is the final response
// (the operation's own status, Location and body). A failed operation
// throws the server's error.
export async function waitTask(monitor, onProgress, signal) {
  for (;;) {
    const r = await request('GET', monitor, undefined, { noThrow: true, signal });
    if (r.status !== 202) {
      // The finished monitor links the Task (rel=describedby): show its
      // final state and messages, then answer as the operation would have.
      const m = /<([^>]+)>;\s*rel="?describedby"?/.exec(r.headers.get('Link') || '');
      if (m && onProgress) {
        try { onProgress(await get(m[1])); } catch { /* the task may be gone */ }
      }
      if (r.status >= 400) throw new ApiError(r.status, r.body, `${r.status}`);
      return r;
    }
    if (onProgress && r.body) onProgress(r.body);
    await sleep(400, signal);
    if (signal && signal.aborted) throw new DOMException('aborted', 'AbortError');
  }
}

// startTask sends a request that may answer 202 with a task monitor and
// follows it; a quick answer is returned as is.
export async function startTask(method, path, body, onProgress, signal) {
  const r = await request(method, path, body, { signal });
  if (r.status !== 202) return r;
  if (onProgress && r.body) onProgress(r.body);
  const monitor = r.headers.get('Location') || (r.body && r.body.TaskMonitor);
  return waitTask(monitor, onProgress, signal);
}

// principal reads who is logged in: the account, its role's privileges
// and, for host accounts, the one system it may see.
export async function principal() {
  const sess = await get(sessionURI());
  const accts = await members('/redfish/v1/AccountService/Accounts');
  const me = accts.find((a) => a.UserName === sess.UserName) || {};
  let role = {};
  if (me.Links && me.Links.Role) role = await get(id(me.Links.Role));
  const privs = new Set([...(role.AssignedPrivileges || []), ...(role.OemPrivileges || [])]);
  const host = (me.Oem && me.Oem.CxlPool && me.Oem.CxlPool.SystemId) || null;
  return {
    user: sess.UserName,
    account: id(me),
    role: me.RoleId || '',
    host,
    passwordChangeRequired: !!me.PasswordChangeRequired,
    privs,
    can: {
      components: privs.has('ConfigureComponents'),
      hostCapacity: privs.has('CxlPoolHostCapacity'),
      users: privs.has('ConfigureUsers'),
      manager: privs.has('ConfigureManager'),
      self: privs.has('ConfigureSelf'),
      // Appliance-wide views (logs, every host) are for accounts not bound
      // to a host.
      appliance: !host,
    },
  };
}

// canChangeHost: may the principal grant or release capacity of system?
export const canChangeHost = (p, system) => p.can.components || (p.can.hostCapacity && p.host === system);
