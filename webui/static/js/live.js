// Live events: the Redfish SSE stream (EventService.ServerSentEventUri),
// read with fetch because EventSource cannot send the X-Auth-Token header.
// One stream per console; pages subscribe to the records it carries.
import { token } from './api.js';
import { useEffect, useRef } from './lib.js';

const listeners = new Set();
const stateListeners = new Set();
let stopFn = null;
let state = 'closed';
// lastId is the id of the last message read: a reconnect sends it as
// Last-Event-ID and the box replays what was missed in between.
let lastId = null;

function setState(s) {
  state = s;
  stateListeners.forEach((fn) => fn(s));
}

export const streamState = () => state;

export function onStreamState(fn) {
  stateListeners.add(fn);
  return () => stateListeners.delete(fn);
}

// subscribe calls fn with every EventRecord (one per Events[] entry).
export function subscribe(fn) {
  listeners.add(fn);
  return () => listeners.delete(fn);
}

function dispatch(block) {
  const idLine = block.split('\n').find((l) => l.startsWith('id:'));
  if (idLine) lastId = idLine.slice(3).trim();
  const data = block
    .split('\n')
    .filter((l) => l.startsWith('data:'))
    .map((l) => l.slice(5).replace(/^ /, ''))
    .join('\n');
  if (!data) return;
  let ev;
  try { ev = JSON.parse(data); } catch { return; }
  for (const rec of ev.Events || []) listeners.forEach((fn) => fn(rec));
}

// start opens the stream (reconnecting with backoff) until stop.
export function start(uri, onUnauthorized) {
  stop();
  lastId = null;
  let stopped = false;
  let ctrl = null;
  (async () => {
    let delay = 1000;
    while (!stopped) {
      ctrl = new AbortController();
      try {
        setState('connecting');
        const headers = { 'X-Auth-Token': token() || '', Accept: 'text/event-stream', 'X-Requested-With': 'XMLHttpRequest' };
        if (lastId) headers['Last-Event-ID'] = lastId;
        const res = await fetch(uri, {
          headers,
          cache: 'no-store', signal: ctrl.signal,
        });
        if (res.status === 401) { setState('closed'); onUnauthorized(); return; }
        if (!res.ok || !res.body) throw new Error(String(res.status));
        setState('open');
        delay = 1000;
        const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
        let buf = '';
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          buf += value.replace(/\r\n/g, '\n');
          let i;
          while ((i = buf.indexOf('\n\n')) >= 0) {
            dispatch(buf.slice(0, i));
            buf = buf.slice(i + 2);
          }
        }
      } catch {
        // aborted, or the box went away: retry below unless stopped
      }
      if (stopped) break;
      setState('reconnecting');
      await new Promise((r) => setTimeout(r, delay));
      delay = Math.min(delay * 2, 15000);
    }
    setState('closed');
  })();
  stopFn = () => { stopped = true; if (ctrl) ctrl.abort(); };
}

export function stop() {
  if (stopFn) stopFn();
  stopFn = null;
}

// useLive calls fn (debounced) whenever an event arrives that match
// accepts (all events if omitted), and every `every` ms as a fallback for
// changes that raise no event.
export function useLive(fn, { match, every = 15000, delay = 250 } = {}) {
  const ref = useRef(fn);
  ref.current = fn;
  useEffect(() => {
    let t = null;
    const kick = () => {
      clearTimeout(t);
      t = setTimeout(() => ref.current(), delay);
    };
    const off = subscribe((rec) => {
      if (!match || match(rec)) kick();
    });
    const iv = every ? setInterval(() => ref.current(), every) : null;
    return () => { off(); clearTimeout(t); if (iv) clearInterval(iv); };
  }, []);
}
