// Time-series charts with uPlot, loaded only by the pages that draw one.
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

// TimeChart draws series [{label, values}] against times (seconds).
export function TimeChart({ times, series, unit, label, height = 220 }) {
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
        series: [{}, ...series.map((s, i) => ({ label: s.label, stroke: s.color || hostColor(i), width: 2, value: (u, v) => (v == null ? '–' : `${v.toFixed(1)} ${unit}`) }))],
        axes: [axis, { ...axis, values: (u, vals) => vals.map((v) => `${v} ${unit}`), size: 70 }],
        scales: { x: { time: true } },
      }, [times, ...series.map((s) => s.values)], el.current);
    });
    return () => { dead = true; if (plot.current) plot.current.destroy(); plot.current = null; };
  }, [key]);
  useEffect(() => {
    if (plot.current) plot.current.setData([times, ...series.map((s) => s.values)]);
  });
  return html`<div class="chart" ref=${el} role="img" aria-label=${label}></div>`;
}
