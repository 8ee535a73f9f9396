// The box's history (TelemetryService MetricReports PoolHistory,
// HostHistory, SensorHistory, ExportHistory, CHMUHistory): series sampled
// every 10 s on the box, so that charts open with the last hour filled.
import * as api from './api.js';

const REPORTS = '/redfish/v1/TelemetryService/MetricReports/';

// load reads a history report over the last `seconds` (an hour) and
// returns { times, series } for TimeChart: times in seconds, and one
// series per MetricId and MetricProperty, aligned on times (null where a
// series has no bucket). metric narrows it to one MetricId. A box without
// history answers null.
export async function load(report, { metric, seconds = 3600, points = 360 } = {}) {
  const start = new Date(Date.now() - seconds * 1000).toISOString().replace(/\.\d+Z$/, 'Z');
  let q = `?start=${encodeURIComponent(start)}&points=${points}`;
  if (metric) q += `&metric=${encodeURIComponent(metric)}`;
  let rep;
  try {
    rep = await api.get(REPORTS + report + q);
  } catch (e) {
    if (e.status === 404 || e.status === 503) return null;
    throw e;
  }
  return align(rep.MetricValues || []);
}

// align turns MetricValues into aligned arrays.
export function align(values) {
  const ts = [...new Set(values.map((v) => Date.parse(v.Timestamp) / 1000))].sort((a, b) => a - b);
  const at = new Map(ts.map((t, i) => [t, i]));
  const series = new Map();
  for (const v of values) {
    const key = v.MetricId + ' ' + v.MetricProperty;
    let s = series.get(key);
    if (!s) {
      s = { metric: v.MetricId, prop: v.MetricProperty, subject: api.last(v.MetricProperty), values: new Array(ts.length).fill(null) };
      series.set(key, s);
    }
    s.values[at.get(Date.parse(v.Timestamp) / 1000)] = Number(v.MetricValue);
  }
  return { times: ts, series: [...series.values()] };
}

// pick returns the series of one metric.
export const pick = (h, metric) => (h ? h.series.filter((s) => s.metric === metric) : []);
