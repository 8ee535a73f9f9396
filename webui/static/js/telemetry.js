// Decoder of the telemetry stream's binary frames (format version 1,
// documented in hmu/stream): heatmaps of the pool and top-K hot units,
// little-endian, lengths exact; anything else is rejected.

export const KIND_HEATMAP = 1;
export const KIND_TOPK = 2;
export const SCOPE_SHARED = -1;
export const SCOPE_POOL = -2;

export function decodeFrame(buf) {
  const dv = new DataView(buf);
  if (dv.byteLength < 16) throw new Error('short frame');
  const version = dv.getUint8(0);
  if (version !== 1) throw new Error('frame version ' + version);
  const kind = dv.getUint8(1);
  const seq = dv.getUint32(4, true);
  const timeMs = Number(dv.getBigInt64(8, true) / 1000000n);
  if (kind === KIND_HEATMAP) {
    if (dv.byteLength < 32) throw new Error('short heatmap');
    const n = dv.getUint32(28, true);
    if (dv.byteLength !== 32 + n) throw new Error('heatmap length');
    return {
      kind, seq, timeMs,
      base: Number(dv.getBigUint64(16, true)),
      cellShift: dv.getUint8(24),
      encoding: dv.getUint8(25),
      cells: new Uint8Array(buf, 32, n),
    };
  }
  if (kind === KIND_TOPK) {
    if (dv.byteLength < 28) throw new Error('short top-K');
    const n = dv.getUint16(24, true);
    if (dv.byteLength !== 28 + 16 * n) throw new Error('top-K length');
    const unitShift = dv.getUint8(18);
    const entries = [];
    for (let i = 0; i < n; i++) {
      const o = 28 + 16 * i;
      entries.push({ unit: Number(dv.getBigUint64(o, true)), count: dv.getUint32(o + 8, true), err: dv.getUint32(o + 12, true) });
    }
    return { kind, seq, timeMs, scope: dv.getInt16(16, true), unitShift, errorBound: dv.getUint32(20, true), entries };
  }
  throw new Error('frame kind ' + kind);
}

// heat is the lower edge of quantized value q's bucket: 2^((q−1)/8) − 1.
export const heat = (q) => (q <= 0 ? 0 : Math.pow(2, (q - 1) / 8) - 1);

// Viridis (matplotlib's perceptually uniform, colour-blind-safe map),
// interpolated from its ten standard stops into a 256-entry table.
const STOPS = ['#440154', '#482878', '#3e4989', '#31688e', '#26828e', '#1f9e89', '#35b779', '#6ece58', '#b5de2b', '#fde725'];
export function viridisTable() {
  const rgb = STOPS.map((h) => [1, 3, 5].map((i) => parseInt(h.slice(i, i + 2), 16)));
  const out = new Uint8ClampedArray(256 * 3);
  for (let i = 0; i < 256; i++) {
    const t = (i / 255) * (rgb.length - 1);
    const k = Math.min(rgb.length - 2, Math.floor(t));
    const f = t - k;
    for (let c = 0; c < 3; c++) out[i * 3 + c] = rgb[k][c] + (rgb[k + 1][c] - rgb[k][c]) * f;
  }
  return out;
}

// findStreamURI looks through a TelemetryService resource for the
// WebSocket stream's URI (an Oem property naming a stream or WebSocket).
export function findStreamURI(obj, depth = 0) {
  if (!obj || typeof obj !== 'object' || depth > 4) return '';
  for (const [k, v] of Object.entries(obj)) {
    if (typeof v === 'string' && /(stream|websocket)/i.test(k) && /^(\/|wss?:)/.test(v)) return v;
    if (v && typeof v === 'object' && v['@odata.id'] && /(stream|websocket)/i.test(k)) return v['@odata.id'];
  }
  for (const v of Object.values(obj)) {
    const r = findStreamURI(v, depth + 1);
    if (r) return r;
  }
  return '';
}
