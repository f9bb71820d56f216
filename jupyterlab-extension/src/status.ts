/**
 * What the status bar and the notifications say, from the server extension's
 * `gpuworkspace/api/status` answer (pure: no DOM, no JupyterLab).
 */

export interface Unavailable {
  available: false;
  reason: string;
}

export interface Usage {
  used: number | null;
  request: number | null;
  limit: number | null;
}

export interface Gpu {
  mode: string;
  allocated: number | null;
  util_percent: number | null;
  mem_used_mib: number | null;
  basis: string;
  caveat: string;
  idle: boolean;
}

export interface Resources {
  available: true;
  node: string;
  profile: string;
  gpu: Gpu;
  cpu: Usage;
  memory: Usage;
}

export interface Warning {
  reason: string;
  stage: number | null;
  stages: number | null;
  stop_at: string | null;
  seconds_left: number | null;
  evidence: string;
  last_activity: string | null;
  activity_source: string | null;
  dry_run: boolean;
  handoff?: boolean; // the warning offers the hand-off to a job, and this user may submit one (handoff.ts)
  kept: string;
  lost: string;
}

export interface Disk {
  available: true;
  used_bytes: number;
  total_bytes: number;
  used_fraction: number;
}

export interface Status {
  user: string;
  server: string;
  at: string;
  resources: Resources | Unavailable;
  culler: { available: true; warnings: Warning[] } | Unavailable;
  disk: Disk | Unavailable;
}

/** How a GPU figure was obtained, in words (docs/reference/attribution-api.md). */
export const BASIS: Record<string, string> = {
  measured: 'measured on the device',
  'per-process': 'measured per process',
  shared: 'per card (shared: the split is unknown)',
  allocation: 'allocation only (no utilisation visible)',
  none: 'no GPU'
};

const GIB = 1024 ** 3;

function gib(bytes: number | null): string {
  return bytes === null ? '?' : `${(bytes / GIB).toFixed(1)}`;
}

function percent(value: number | null): string {
  return value === null ? '?' : `${Math.round(value)}%`;
}

/** The GPU part: "GPU 55% 4.0 GiB" or "GPU: none", with the basis for the tooltip. */
export function gpuText(gpu: Gpu): string {
  if (gpu.mode === 'none' || gpu.basis === 'none') {
    return 'GPU: none';
  }
  if (gpu.basis === 'allocation') {
    return `GPU (${gpu.mode}): allocated`;
  }
  const memory =
    gpu.mem_used_mib === null ? '' : ` ${(gpu.mem_used_mib / 1024).toFixed(1)} GiB`;
  return `GPU (${gpu.mode}) ${percent(gpu.util_percent)}${memory}`;
}

/** One line for the status bar. */
export function statusText(status: Status | null): string {
  if (status === null) {
    return 'Workspace: unavailable';
  }
  const parts: string[] = [];
  const res = status.resources;
  if (res.available) {
    parts.push(gpuText(res.gpu));
    parts.push(`CPU ${res.cpu.used === null ? '?' : res.cpu.used.toFixed(1)}/${res.cpu.limit ?? '?'}`);
    parts.push(`Mem ${gib(res.memory.used)}/${gib(res.memory.limit)} GiB`);
  } else {
    parts.push('GPU/CPU: unavailable');
  }
  const disk = status.disk;
  parts.push(disk.available ? `Home ${Math.round(disk.used_fraction * 100)}%` : 'Home: unavailable');
  return parts.join(' · ');
}

/** The tooltip: the basis of the GPU figures, and why a part is unavailable. */
export function statusTitle(status: Status | null): string {
  if (status === null) {
    return 'The workspace status could not be read from this server.';
  }
  const lines: string[] = [];
  const res = status.resources;
  if (res.available) {
    const basis = BASIS[res.gpu.basis] ?? res.gpu.basis;
    lines.push(`GPU figures: ${basis}${res.gpu.caveat ? ` (${res.gpu.caveat})` : ''}`);
  } else {
    lines.push(`GPU, CPU and memory unavailable: ${res.reason}`);
  }
  if (!status.disk.available) {
    lines.push(`Home disk unavailable: ${status.disk.reason}`);
  }
  if (!status.culler.available) {
    lines.push(`Idle-stop warnings unavailable: ${status.culler.reason}`);
  } else {
    lines.push(...status.culler.warnings.map(warningDetail));
  }
  return lines.join('\n');
}

/** "4 min 5 s", "45 s". */
export function countdown(seconds: number): string {
  const s = Math.max(0, Math.round(seconds));
  const minutes = Math.floor(s / 60);
  return minutes > 0 ? `${minutes} min ${s % 60} s` : `${s} s`;
}

/** The seconds left until `stopAt`, at `now` (the culler's stop time is the truth, not our poll). */
export function secondsLeft(warning: Warning, now: Date): number | null {
  if (!warning.stop_at) {
    return warning.seconds_left;
  }
  return Math.max(0, (Date.parse(warning.stop_at) - now.getTime()) / 1000);
}

/**
 * The notification's message for one staged warning: at most MAX_MESSAGE characters, as JupyterLab's
 * toasts cut longer ones; the evidence is in the status bar's tooltip (warningDetail).
 */
export const MAX_MESSAGE = 140;

export function warningMessage(warning: Warning, now: Date): string {
  const left = secondsLeft(warning, now);
  const when = left === null ? 'soon' : `in ${countdown(left)}`;
  const cause = warning.reason === 'max_duration' ? 'max. duration' : 'idle';
  const stage = warning.stage !== null && warning.stages !== null ? `, warning ${warning.stage}/${warning.stages}` : '';
  const dry = warning.dry_run ? ' (dry run)' : '';
  return `Workspace stops ${when} (${cause}${stage})${dry}. Kept: home disk. Lost: GPU, kernels, scratch.`;
}

/** The full story of a warning, for the tooltip: what the culler sees, what is kept and lost. */
export function warningDetail(warning: Warning): string {
  const evidence = warning.evidence ? `The culler sees: ${warning.evidence}. ` : '';
  return `${evidence}Kept: ${warning.kept}. Lost: ${warning.lost}.`;
}

/** A key that changes when the culler gives a new stage or moves the stop. */
export function warningKey(warning: Warning): string {
  return `${warning.reason}|${warning.stage}|${warning.stop_at}`;
}
