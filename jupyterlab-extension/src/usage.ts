/**
 * What the usage panel shows, from the server extension's `gpuworkspace/api/history` answer: the
 * last hour's plots as SVG text, the current values, the basis and the home disk (pure: no DOM, no
 * JupyterLab; every text from the answer is escaped).
 */

import { BASIS, Disk, Unavailable } from './status';

export type Point = [number, number]; // [epoch seconds, value]

export interface Limits {
  cpu_cores: number | null;
  memory_bytes: number | null;
}

export interface Usage {
  available: true;
  at: number | null;
  window_s: number | null;
  basis: string;
  gpu_mode: string;
  caveat: string;
  limits: Limits;
  series: Record<string, Point[]>;
}

export interface History {
  user: string;
  server: string;
  usage: Usage | Unavailable;
  disk: Disk | Unavailable;
  dashboard_url: string;
}

/** The plots, in order: the series' name in the answer, its title and how its values read. */
export interface PlotSpec {
  name: string;
  title: string;
  format: (value: number) => string;
  /** the top of the y axis: fixed (100 %), the workspace's limit, or from the data */
  yMax: (usage: Usage, values: number[]) => number;
}

const MIB = 1024 ** 2;
const GIB = 1024 ** 3;
export const WINDOW_S = 3600;

/** 1, 2 or 5 times a power of ten, at least `value` (a readable top for an axis). */
export function niceCeil(value: number): number {
  if (!(value > 0) || !Number.isFinite(value)) {
    return 1;
  }
  const power = 10 ** Math.floor(Math.log10(value));
  for (const step of [1, 2, 5, 10]) {
    if (step * power >= value * (1 - 1e-9)) {
      return step * power;
    }
  }
  return 10 * power;
}

function fromData(values: number[], unit = 1): number {
  return niceCeil((Math.max(0, ...values) * 1.1) / unit) * unit;
}

/** The top of a MiB or byte axis: a round number of GiB from 1 GiB up, else a round number of `unit`s. */
function fromDataBinary(values: number[], gib: number): number {
  return Math.max(0, ...values) * 1.1 > gib ? fromData(values, gib) : fromData(values);
}

export function formatBytes(bytes: number): string {
  return bytes >= GIB ? `${(bytes / GIB).toFixed(1)} GiB` : `${Math.round(bytes / MIB)} MiB`;
}

export const PLOTS: PlotSpec[] = [
  {
    name: 'gpu_util_percent',
    title: 'GPU utilisation',
    format: v => `${Math.round(v)}%`,
    yMax: () => 100
  },
  {
    name: 'gpu_mem_used_mib',
    title: 'GPU memory',
    format: v => formatBytes(v * MIB),
    yMax: (_, values) => fromDataBinary(values, 1024)
  },
  {
    name: 'cpu_cores',
    title: 'CPU',
    format: v => `${v.toFixed(2)} cores`,
    yMax: (usage, values) => Math.max(usage.limits.cpu_cores ?? 0, fromData(values))
  },
  {
    name: 'memory_bytes',
    title: 'Memory',
    format: v => formatBytes(v),
    yMax: (usage, values) => Math.max(usage.limits.memory_bytes ?? 0, fromDataBinary(values, GIB))
  }
];

export interface Frame {
  width: number;
  height: number;
  left: number; // room for the y labels
  bottom: number; // room for the x labels
  top: number;
  right: number;
}

export const FRAME: Frame = { width: 360, height: 120, left: 66, bottom: 18, top: 8, right: 10 };

/** Where a point lies in the plot (values clamped to 0..`yMax`). */
export function toXY(point: Point, start: number, end: number, yMax: number, frame: Frame = FRAME): Point {
  const w = frame.width - frame.left - frame.right;
  const h = frame.height - frame.top - frame.bottom;
  const top = yMax > 0 ? yMax : 1;
  const x = frame.left + ((point[0] - start) / Math.max(1e-9, end - start)) * w;
  return [x, frame.top + h - (Math.min(Math.max(point[1], 0), top) / top) * h];
}

/**
 * The SVG path of `points` between `start` and `end` (seconds) and 0..`yMax`: one "M" per stretch
 * of points; a gap of more than `gapS` (the service missed cycles, the workspace was stopped) is not
 * bridged by a line.
 */
export function linePath(
  points: Point[],
  start: number,
  end: number,
  yMax: number,
  frame: Frame = FRAME,
  gapS = 180
): string {
  const parts: string[] = [];
  let previous: number | null = null;
  for (const [t, v] of points) {
    if (t < start || t > end) {
      continue;
    }
    const [x, y] = toXY([t, v], start, end, yMax, frame);
    const move = previous === null || t - previous > gapS;
    parts.push(`${move ? 'M' : 'L'}${x.toFixed(1)},${y.toFixed(1)}`);
    previous = t;
  }
  return parts.join(' ');
}

export function escapeXml(text: string): string {
  return text.replace(/[&<>"']/g, c => `&#${c.charCodeAt(0)};`);
}

/** The newest value of a series, or null. */
export function current(points: Point[]): number | null {
  return points.length > 0 ? points[points.length - 1][1] : null;
}

/** The plot's heading: "GPU utilisation: 55%" or "GPU utilisation: no data". */
export function plotHeading(spec: PlotSpec, points: Point[]): string {
  const value = current(points);
  return `${spec.title}: ${value === null ? 'no data' : spec.format(value)}`;
}

/** One plot as SVG text: axes, their labels (minutes ago; 0 and the top value), the line. */
export function plotSvg(spec: PlotSpec, usage: Usage, now: number, frame: Frame = FRAME): string {
  const points = usage.series[spec.name] ?? [];
  const window = usage.window_s ?? WINDOW_S;
  const start = now - window;
  // the service rounds times to ms: its newest point may lie a hair after its `at`
  now = Math.max(now, current(points) === null ? now : points[points.length - 1][0]);
  const yMax = spec.yMax(
    usage,
    points.filter(([t]) => t >= start).map(([, v]) => v)
  );
  const { width, height, left, bottom, top, right } = frame;
  const x0 = left;
  const x1 = width - right;
  const y0 = height - bottom;
  const minutes = Math.round(window / 60);
  const label = (x: number, y: number, text: string, anchor: string): string =>
    `<text x="${x}" y="${y}" text-anchor="${anchor}" font-size="10" fill="currentColor">${escapeXml(text)}</text>`;
  const path = linePath(points, start, now, yMax, frame);
  const last = points.length > 0 ? points[points.length - 1] : null;
  const dot = last !== null && last[0] >= start && last[0] <= now ? toXY(last, start, now, yMax, frame) : null;
  return [
    `<svg xmlns="http://www.w3.org/2000/svg" class="jp-gpuworkspace-plot" data-series="${escapeXml(spec.name)}"`,
    ` width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" role="img"`,
    ` aria-label="${escapeXml(`${plotHeading(spec, points)}, last ${minutes} minutes`)}">`,
    `<path d="M${x0},${top} L${x0},${y0} L${x1},${y0}" fill="none" stroke="currentColor" stroke-opacity="0.5"/>`,
    label(x0 - 4, top + 8, spec.format(yMax), 'end'),
    label(x0 - 4, y0, spec.format(0), 'end'),
    label(x0, height - 4, `-${minutes} min`, 'start'),
    label((x0 + x1) / 2, height - 4, `-${Math.round(minutes / 2)} min`, 'middle'),
    label(x1, height - 4, 'now', 'end'),
    path ? `<path class="jp-gpuworkspace-line" d="${path}" fill="none" stroke="#1a73e8" stroke-width="1.5"/>` : '',
    dot ? `<circle class="jp-gpuworkspace-now" cx="${dot[0].toFixed(1)}" cy="${dot[1].toFixed(1)}" r="2.5" fill="#1a73e8"/>` : '',
    path ? '' : label((x0 + x1) / 2, (top + y0) / 2, 'no data in this window', 'middle'),
    '</svg>'
  ].join('');
}

/** "GPU figures: measured per process (...)" for the panel's heading. */
export function basisText(usage: Usage): string {
  if (usage.gpu_mode === 'none' || usage.basis === 'none') {
    return 'No GPU in this workspace.';
  }
  const basis = BASIS[usage.basis] ?? usage.basis;
  const caveat = usage.caveat ? ` (${usage.caveat})` : '';
  return `GPU (${usage.gpu_mode}) figures: ${basis}${caveat}.`;
}

/** "Home disk: 3.2 GiB of 10.0 GiB used (32%)". */
export function diskText(disk: Disk | Unavailable): string {
  if (!disk.available) {
    return `Home disk: unavailable (${disk.reason})`;
  }
  const percent = Math.round(disk.used_fraction * 100);
  return `Home disk: ${formatBytes(disk.used_bytes)} of ${formatBytes(disk.total_bytes)} used (${percent}%)`;
}

/** The panel's whole body as HTML text (the widget sets it; every text from the answer escaped). */
export function panelHtml(history: History | null, nowS: number): string {
  if (history === null) {
    return '<p class="jp-gpuworkspace-unavailable">Usage unavailable: this server did not answer.</p>';
  }
  const parts: string[] = [];
  const usage = history.usage;
  if (usage.available) {
    const now = usage.at ?? nowS;
    parts.push(`<p class="jp-gpuworkspace-basis">${escapeXml(basisText(usage))}</p>`);
    for (const spec of PLOTS) {
      const points = usage.series[spec.name] ?? [];
      parts.push(
        `<figure class="jp-gpuworkspace-figure" style="margin:0 0 8px 0">`,
        `<figcaption>${escapeXml(plotHeading(spec, points))}</figcaption>`,
        plotSvg(spec, usage, now),
        '</figure>'
      );
    }
  } else {
    parts.push(`<p class="jp-gpuworkspace-unavailable">Usage unavailable: ${escapeXml(usage.reason)}</p>`);
  }
  parts.push(`<p class="jp-gpuworkspace-disk">${escapeXml(diskText(history.disk))}</p>`);
  if (/^\/(?!\/)/.test(history.dashboard_url)) {
    // a path on this hub only (never another site's address)
    parts.push(
      `<p><a class="jp-gpuworkspace-dashboard" href="${escapeXml(history.dashboard_url)}" target="_blank"`,
      ` rel="noopener noreferrer" style="color:var(--jp-content-link-color);text-decoration:underline">`,
      'Open the full GPU dashboard</a></p>'
    );
  }
  return parts.join('');
}
