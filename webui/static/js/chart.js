// Time-series charts: TimeChart with uPlot, loaded only by the pages that
// draw one, and Sparkline, a small SVG line with no library. Time axes
// are wall-clock times in the browser's zone (HH:MM, with seconds only
// for spans under ten minutes), never milliseconds.
import { html, useEffect, useRef } from './lib.js';
import { hostColor } from './ui.js';

let uplot = null;
let cssLoaded = false;

async function load() {
  if (!cssLoaded) {
    const l = document.createElement('link');
    l.rel = 'stylesheet';
    l.href = '/ui/vendor/uPlot.min.css';
    document.head.appendChild(l);
    cssLoaded = true;
  }
  if (!uplot) uplot = (await import('../vendor/uPlot.esm.js')).default;
  return uplot;
}

const two = (n) => String(n).padStart(2, '0');

// clock formats a time (seconds) as HH:MM or HH:MM:SS.
export function clock(t, withSeconds) {
  const d = new Date(t * 1000);
  return `${two(d.getHours())}:${two(d.getMinutes())}` + (withSeconds ? `:${two(d.getSeconds())}` : '');
}

// timeTicks labels the x axis: whole seconds at least, dates when the
// span crosses days.
function timeTicks(u, vals) {
  const min = u.scales.x.min;
  const max = u.scales.x.max;
  const span = max - min;
  return vals.map((v) => {
    if (span > 2 * 86400) {
      const d = new Date(v * 1000);
      return `${d.getMonth() + 1}/${d.getDate()} ${clock(v)}`;
    }
    return clock(v, span < 600);
  });
}

// niceNum keeps tick labels short.
const niceNum = (v) => (Math.abs(v) >= 100 ? String(Math.round(v)) : String(Math.round(v * 10) / 10));

// TimeChart draws series [{label, values, color}] against times (seconds).
export function TimeChart({ times, series, unit, label, height = 220, id }) {
  const el = useRef(null);
  const plot = useRef(null);
  const key = series.map((s) => s.label).join('|');
  useEffect(() => {
    let dead = false;
    load().then((U) => {
      if (dead || !el.current) return;
      const fg = getComputedStyle(document.documentElement).getPropertyValue('--fg').trim() || '#000';
      const grid = getComputedStyle(document.documentElement).getPropertyValue('--border').trim() || '#ccc';
      const axis = { stroke: fg, grid: { stroke: grid, width: 1 }, ticks: { stroke: grid } };
      plot.current = new U({
        width: el.current.clientWidth || 600, height,
        series: [{ value: (u, v) => (v == null ? '–' : clock(v, true)) },
          ...series.map((s, i) => ({ label: s.label, stroke: s.color || hostColor(i), width: 2, spanGaps: true,
            value: (u, v) => (v == null ? '–' : `${niceNum(v)} ${unit}`) }))],
        axes: [{ ...axis, values: timeTicks, space: 70 }, { ...axis, values: (u, vals) => vals.map((v) => `${niceNum(v)} ${unit}`), size: 70 }],
        scales: { x: { time: true } },
      }, [times, ...series.map((s) => s.values)], el.current);
    });
    return () => { dead = true; if (plot.current) plot.current.destroy(); plot.current = null; };
  }, [key]);
  useEffect(() => {
    if (plot.current) plot.current.setData([times, ...series.map((s) => s.values)]);
  });
  return html`<div class="chart" ref=${el} id=${id} role="img" aria-label=${label} data-points=${times.length}></div>`;
}

// Sparkline is a small line of values (nulls skipped) with its last value
// marked; title says what it shows for screen readers and on hover.
export function Sparkline({ values, title, width = 120, height = 28, cls = '' }) {
  const pts = values.map((v, i) => [i, v]).filter(([, v]) => v !== null && v !== undefined && !Number.isNaN(v));
  if (pts.length < 2) return html`<span class="spark-empty hint" title=${title}>–</span>`;
  const lo = Math.min(...pts.map(([, v]) => v));
  const hi = Math.max(...pts.map(([, v]) => v));
  const n = values.length - 1 || 1;
  const x = (i) => (i / n) * (width - 4) + 2;
  const y = (v) => (hi === lo ? height / 2 : height - 3 - ((v - lo) / (hi - lo)) * (height - 6));
  const d = pts.map(([i, v], k) => `${k ? 'L' : 'M'}${x(i).toFixed(1)},${y(v).toFixed(1)}`).join('');
  const [li, lv] = pts[pts.length - 1];
  return html`<svg class=${'spark ' + cls} width=${width} height=${height} viewBox=${`0 0 ${width} ${height}`} role="img" aria-label=${title}>
    <title>${title}</title><path d=${d} fill="none" stroke-width="1.5" /><circle cx=${x(li)} cy=${y(lv)} r="2" /></svg>`;
}
