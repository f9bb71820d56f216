import {
  countdown,
  gpuText,
  MAX_MESSAGE,
  statusText,
  statusTitle,
  Status,
  warningKey,
  warningMessage,
  Warning
} from '../src/status';

const GPU = {
  mode: 'exclusive',
  allocated: 1,
  util_percent: 55,
  mem_used_mib: 4096,
  basis: 'measured',
  caveat: '',
  idle: false
};

const STATUS: Status = {
  user: 'alice',
  server: 'train',
  at: '2026-12-02T12:00:00Z',
  resources: {
    available: true,
    node: 'gpu-node-a',
    profile: 'e2e',
    gpu: GPU,
    cpu: { used: 0.5, request: 1, limit: 2 },
    memory: { used: 1024 ** 3, request: null, limit: 4 * 1024 ** 3 }
  },
  culler: { available: true, warnings: [] },
  disk: { available: true, used_bytes: 25, total_bytes: 100, used_fraction: 0.25 }
};

const WARNING: Warning = {
  reason: 'idle',
  stage: 1,
  stages: 2,
  stop_at: '2026-12-02T12:25:00Z',
  seconds_left: 1500,
  evidence: 'idle since 11:30 (latest: kernel k1)',
  last_activity: '2026-12-02T11:30:00Z',
  activity_source: 'kernel k1',
  dry_run: false,
  kept: 'your home disk and the files on it',
  lost: 'the GPU, the running kernels and their memory'
};

describe('status bar text', () => {
  it('shows GPU utilisation and memory, CPU, memory and home disk', () => {
    expect(statusText(STATUS)).toBe('GPU (exclusive) 55% 4.0 GiB · CPU 0.5/2 · Mem 1.0/4.0 GiB · Home 25%');
  });

  it('says how the GPU figures were obtained in the tooltip', () => {
    expect(statusTitle(STATUS)).toBe('GPU figures: measured on the device');
    const shared = { ...GPU, mode: 'time-sliced', basis: 'shared', caveat: 'shared by 2 workspaces' };
    expect(statusTitle({ ...STATUS, resources: { ...STATUS.resources, gpu: shared } as Status['resources'] })).toBe(
      'GPU figures: per card (shared: the split is unknown) (shared by 2 workspaces)'
    );
  });

  it('a workspace without a GPU, and a GPU known by allocation only', () => {
    expect(gpuText({ ...GPU, mode: 'none', basis: 'none' })).toBe('GPU: none');
    expect(gpuText({ ...GPU, mode: 'passthrough', basis: 'allocation', util_percent: null })).toBe(
      'GPU (passthrough): allocated'
    );
  });

  it('says "unavailable" when a service is down, and why in the tooltip', () => {
    const down: Status = {
      ...STATUS,
      resources: { available: false, reason: 'the GPU attribution service is unreachable' },
      culler: { available: false, reason: 'the idle culler is unreachable' }
    };
    expect(statusText(down)).toBe('GPU/CPU: unavailable · Home 25%');
    expect(statusTitle(down)).toContain('GPU, CPU and memory unavailable: the GPU attribution service is unreachable');
    expect(statusTitle(down)).toContain('Idle-stop warnings unavailable: the idle culler is unreachable');
    expect(statusText(null)).toBe('Workspace: unavailable');
  });
});

describe('culler warnings', () => {
  it('counts down to the culler own stop time, says what is kept and lost, and fits a toast', () => {
    const message = warningMessage(WARNING, new Date('2026-12-02T12:20:55Z'));
    expect(message).toBe('Workspace stops in 4 min 5 s (idle, warning 1/2). Kept: home disk. Lost: GPU, kernels, scratch.');
    expect(message.length).toBeLessThanOrEqual(MAX_MESSAGE);
    const long = { ...WARNING, reason: 'max_duration', dry_run: true, stop_at: '2026-12-03T12:20:55Z' };
    expect(warningMessage(long, new Date('2026-12-02T12:20:55Z')).length).toBeLessThanOrEqual(MAX_MESSAGE);
  });

  it('the tooltip says which evidence the culler sees', () => {
    const status = { ...STATUS, culler: { available: true as const, warnings: [WARNING] } };
    expect(statusTitle(status)).toContain('The culler sees: idle since 11:30 (latest: kernel k1). Kept: your home disk');
  });

  it('never counts below zero', () => {
    expect(warningMessage(WARNING, new Date('2026-12-02T13:00:00Z'))).toContain('in 0 s');
    expect(countdown(-5)).toBe('0 s');
  });

  it('a new stage or a moved stop is a new notification', () => {
    expect(warningKey(WARNING)).not.toBe(warningKey({ ...WARNING, stage: 2 }));
    expect(warningKey(WARNING)).not.toBe(warningKey({ ...WARNING, stop_at: '2026-12-02T12:30:00Z' }));
    expect(warningKey(WARNING)).toBe(warningKey({ ...WARNING, seconds_left: 10 }));
  });
});
