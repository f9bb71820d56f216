import {
  basisText,
  diskText,
  escapeXml,
  History,
  linePath,
  niceCeil,
  panelHtml,
  PLOTS,
  plotHeading,
  plotSvg,
  Usage
} from '../src/usage';

const AT = 1_767_225_600;
const FRAME = { width: 110, height: 60, left: 10, bottom: 10, top: 0, right: 0 }; // a 100 x 50 plot area

const USAGE: Usage = {
  available: true,
  at: AT,
  window_s: 3600,
  basis: 'per-process',
  gpu_mode: 'time-sliced',
  caveat: '',
  limits: { cpu_cores: 4, memory_bytes: 16 * 1024 ** 3 },
  series: {
    gpu_util_percent: [
      [AT - 3600, 0],
      [AT - 1800, 50],
      [AT, 55]
    ],
    gpu_mem_used_mib: [[AT, 4096]],
    cpu_cores: [],
    memory_bytes: [[AT - 60, 2 * 1024 ** 3]]
  }
};

const HISTORY: History = {
  user: 'alice',
  server: 'lab',
  usage: USAGE,
  disk: { available: true, used_bytes: 3 * 1024 ** 3, total_bytes: 10 * 1024 ** 3, used_fraction: 0.3 },
  dashboard_url: '/services/gpuworkspace-attribution/'
};

const [GPU_UTIL, GPU_MEM, CPU, MEMORY] = PLOTS;

describe('linePath', () => {
  it('maps time to x and value to y (0 at the bottom, the top value at the top)', () => {
    const path = linePath(USAGE.series.gpu_util_percent, AT - 3600, AT, 100, FRAME, 3600);
    expect(path).toBe('M10.0,50.0 L60.0,25.0 L110.0,22.5');
  });

  it('does not bridge a gap and leaves out points outside the window', () => {
    const points: [number, number][] = [
      [AT - 7200, 10], // before the window
      [AT - 3600, 10],
      [AT - 3540, 10],
      [AT - 600, 20], // 49 minutes later: a new stretch
      [AT + 60, 30] // after `now`
    ];
    const path = linePath(points, AT - 3600, AT, 100, FRAME, 180);
    expect(path.split(' ').map(p => p[0])).toEqual(['M', 'L', 'M']);
  });

  it('clamps values to the axis', () => {
    expect(linePath([[AT, 250]], AT - 60, AT, 100, FRAME)).toBe('M110.0,0.0');
    expect(linePath([[AT, -5]], AT - 60, AT, 100, FRAME)).toBe('M110.0,50.0');
  });
});

describe('axes', () => {
  it.each([
    [0.7, 1],
    [1, 1],
    [1.2, 2],
    [3, 5],
    [4507, 5000],
    [0, 1]
  ])('niceCeil(%p) is %p', (value, top) => {
    expect(niceCeil(value)).toBe(top);
  });

  it('scales CPU and memory to the limit, GPU utilisation to 100 %', () => {
    expect(GPU_UTIL.yMax(USAGE, [55])).toBe(100);
    expect(CPU.yMax(USAGE, [0.5])).toBe(4);
    expect(CPU.yMax(USAGE, [7])).toBe(10); // over the limit (a burst): the line stays in the plot
    expect(MEMORY.yMax(USAGE, [1])).toBe(16 * 1024 ** 3);
    expect(GPU_MEM.yMax(USAGE, [6144])).toBe(10 * 1024); // 10 GiB, not 10,000 MiB
    expect(GPU_MEM.yMax(USAGE, [300])).toBe(500);
    expect(MEMORY.yMax({ ...USAGE, limits: { cpu_cores: null, memory_bytes: null } }, [3 * 1024 ** 3])).toBe(
      5 * 1024 ** 3
    );
  });

  it('labels the axes and reads the current value', () => {
    const svg = plotSvg(GPU_UTIL, USAGE, AT);
    for (const label of ['>100%<', '>0%<', '>-60 min<', '>-30 min<', '>now<']) {
      expect(svg).toContain(label);
    }
    expect(svg).toContain('aria-label="GPU utilisation: 55%, last 60 minutes"');
    expect(svg).toContain('class="jp-gpuworkspace-line"');
    expect(plotSvg(CPU, USAGE, AT)).toContain('no data in this window');
    expect(plotSvg(CPU, USAGE, AT)).not.toContain('<circle');
  });

  it('marks the newest value with a dot, also when it is the only point', () => {
    const frame = { ...FRAME };
    const single: Usage = { ...USAGE, series: { gpu_util_percent: [[AT, 40]] } };
    expect(plotSvg(GPU_UTIL, single, AT, frame)).toContain('<circle class="jp-gpuworkspace-now" cx="110.0" cy="30.0"');
    // the service rounds its points' times: the newest may be a hair after its `at`
    const rounded: Usage = { ...USAGE, series: { gpu_util_percent: [[AT + 0.0004, 40]] } };
    expect(plotSvg(GPU_UTIL, rounded, AT, frame)).toContain('<circle class="jp-gpuworkspace-now" cx="110.0" cy="30.0"');
  });
});

describe('text', () => {
  it('says the current value of each plot', () => {
    expect(plotHeading(GPU_UTIL, USAGE.series.gpu_util_percent)).toBe('GPU utilisation: 55%');
    expect(plotHeading(GPU_MEM, USAGE.series.gpu_mem_used_mib)).toBe('GPU memory: 4.0 GiB');
    expect(plotHeading(MEMORY, USAGE.series.memory_bytes)).toBe('Memory: 2.0 GiB');
    expect(plotHeading(CPU, [])).toBe('CPU: no data');
  });

  it.each([
    ['per-process', 'time-sliced', 'GPU (time-sliced) figures: measured per process.'],
    ['shared', 'time-sliced', 'GPU (time-sliced) figures: per card (shared: the split is unknown).'],
    ['allocation', 'exclusive', 'GPU (exclusive) figures: allocation only (no utilisation visible).'],
    ['none', 'none', 'No GPU in this workspace.']
  ])('the basis %p', (basis, mode, text) => {
    expect(basisText({ ...USAGE, basis, gpu_mode: mode })).toBe(text);
  });

  it('says the home disk use', () => {
    expect(diskText(HISTORY.disk)).toBe('Home disk: 3.0 GiB of 10.0 GiB used (30%)');
    expect(diskText({ available: false, reason: 'no size' })).toBe('Home disk: unavailable (no size)');
  });
});

describe('panelHtml', () => {
  it('shows four plots, the basis, the disk and the dashboard in a new tab', () => {
    const html = panelHtml(HISTORY, AT);
    expect(html.match(/<svg /g)).toHaveLength(4);
    expect(html).toContain('measured per process');
    expect(html).toContain('Home disk: 3.0 GiB');
    expect(html).toContain('href="/services/gpuworkspace-attribution/" target="_blank" rel="noopener noreferrer"');
    expect(html).toContain('>Open the full GPU dashboard</a>');
  });

  it('says "unavailable" with the reason when the service is down, and still the disk', () => {
    const html = panelHtml({ ...HISTORY, usage: { available: false, reason: 'unreachable: <refused>' } }, AT);
    expect(html).toContain('Usage unavailable: unreachable: &#60;refused&#62;');
    expect(html).not.toContain('<svg');
    expect(html).toContain('Home disk: 3.0 GiB');
    expect(panelHtml(null, AT)).toContain('Usage unavailable');
  });

  it('escapes what the answer says and links only to this hub', () => {
    const html = panelHtml(
      { ...HISTORY, usage: { ...USAGE, caveat: '<img src=x onerror=alert(1)>' }, dashboard_url: '//evil.example/' },
      AT
    );
    expect(html).not.toContain('<img');
    expect(html).not.toContain('evil.example');
    expect(escapeXml(`"'&`)).toBe('&#34;&#39;&#38;');
  });
});
