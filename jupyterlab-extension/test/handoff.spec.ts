import {
  CREATE_JOB,
  GO_TO_PATH,
  handoffAction,
  handoffSteps,
  HANDOFF_LABEL,
  LIST_JOBS,
  notebookPath,
  Step
} from '../src/handoff';
import { Warning } from '../src/status';

const MAX_DURATION: Warning = {
  reason: 'max_duration',
  stage: 1,
  stages: 2,
  stop_at: '2026-12-02T12:25:00Z',
  seconds_left: 1500,
  evidence: 'running 7.6 h, within the 8 h maximum',
  last_activity: null,
  activity_source: null,
  dry_run: false,
  handoff: true,
  kept: 'your home disk and the files on it',
  lost: 'the GPU, the running kernels and their memory'
};

const SCHEDULER = [CREATE_JOB, LIST_JOBS, GO_TO_PATH];

/** JupyterLab's command registry with the given commands, recording what runs. */
function commands(ids: string[]) {
  const ran: Step[] = [];
  return {
    ran,
    hasCommand: (id: string) => ids.includes(id),
    execute: async (command: string, args: Step['args'] = {}) => {
      ran.push({ command, args });
    }
  };
}

async function click(action: { callback: (event: Event) => void }): Promise<boolean> {
  let prevented = false;
  action.callback({ preventDefault: () => (prevented = true) } as unknown as Event);
  await new Promise(resolve => setTimeout(resolve, 0));
  return prevented;
}

describe('handoffSteps', () => {
  it('opens the Create Job form for the open notebook, selected in the file browser first', () => {
    const has = (id: string) => SCHEDULER.includes(id);
    expect(handoffSteps('work/train.ipynb', has)).toEqual([
      { command: GO_TO_PATH, args: { path: 'work/train.ipynb' } },
      { command: CREATE_JOB, args: {} }
    ]);
  });

  it('opens the Notebook Jobs panel when no notebook is open', () => {
    expect(handoffSteps(null, id => SCHEDULER.includes(id))).toEqual([{ command: LIST_JOBS, args: {} }]);
  });

  it('offers nothing without jupyter-scheduler', () => {
    expect(handoffSteps('train.ipynb', id => id === GO_TO_PATH)).toEqual([]);
  });
});

describe('notebookPath', () => {
  it('is the path of a notebook only', () => {
    expect(notebookPath('a/b.ipynb')).toBe('a/b.ipynb');
    expect(notebookPath('a/b.py')).toBeNull();
    expect(notebookPath(null)).toBeNull();
    expect(notebookPath(undefined)).toBeNull();
  });
});

describe('handoffAction', () => {
  it('is "Run as a job" on a warning that offers the hand-off, and runs the steps for the open notebook', async () => {
    const registry = commands(SCHEDULER);
    const action = handoffAction(MAX_DURATION, registry, () => 'train.ipynb');
    expect(action?.label).toBe(HANDOFF_LABEL);
    expect(await click(action!)).toBe(true); // the warning stays open: the stop is still due
    expect(registry.ran.map(s => s.command)).toEqual([GO_TO_PATH, CREATE_JOB]);
  });

  it('lists the jobs when a text file, or nothing, is open', async () => {
    const registry = commands(SCHEDULER);
    await click(handoffAction(MAX_DURATION, registry, () => 'notes.txt')!);
    await click(handoffAction(MAX_DURATION, registry, () => null)!);
    expect(registry.ran.map(s => s.command)).toEqual([LIST_JOBS, LIST_JOBS]);
  });

  it('is not offered where the warning does not offer it, or without jupyter-scheduler', () => {
    expect(handoffAction({ ...MAX_DURATION, handoff: false }, commands(SCHEDULER), () => null)).toBeNull();
    expect(handoffAction({ ...MAX_DURATION, handoff: undefined }, commands(SCHEDULER), () => null)).toBeNull();
    expect(handoffAction(MAX_DURATION, commands([GO_TO_PATH]), () => 'a.ipynb')).toBeNull();
  });
});
