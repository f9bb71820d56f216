/**
 * The hand-off to a job on a culler warning: "Run as a job" opens jupyter-scheduler's Create Job form
 * for the notebook that is open, or its Notebook Jobs panel when none is (pure: no DOM, no JupyterLab).
 *
 * The server extension sets a warning's `handoff` only where the culler offers the hand-off (a stop
 * for the maximum session length, or a workspace holding a GPU) and this user may submit a job (the
 * jobs service is configured for this server and lists a job profile for them).
 */

import { Warning } from './status';

export const HANDOFF_LABEL = 'Run as a job';
export const HANDOFF_CAPTION =
  'Opens the Create Job form (jupyter-scheduler): a job queues for the GPUs and keeps running after this workspace stops';

// jupyter-scheduler 2.12's commands (@jupyterlab/scheduler: CommandIDs) and JupyterLab's file browser
export const CREATE_JOB = 'scheduling:create-from-notebook'; // the form, for the file browser's selection
export const LIST_JOBS = 'scheduling:list-jobs-from-launcher'; // the Notebook Jobs panel
export const GO_TO_PATH = 'filebrowser:go-to-path'; // shows and selects a file in the file browser

export interface Step {
  command: string;
  args: { [key: string]: string | boolean };
}

/** Whether the warning carries the action (structured data from the status API, never its text). */
export function offersHandoff(warning: Warning): boolean {
  return warning.handoff === true;
}

/** The path of the open notebook, from the current widget's document path (null: not a notebook). */
export function notebookPath(path: string | null | undefined): string | null {
  return typeof path === 'string' && path.endsWith('.ipynb') ? path : null;
}

/**
 * The commands to run for "Run as a job": the scheduler's Create Job form takes the file browser's
 * selection as its input file, so the open notebook is selected there first. Empty when
 * jupyter-scheduler is not installed (then no action is offered).
 */
export function handoffSteps(notebook: string | null, hasCommand: (id: string) => boolean): Step[] {
  if (notebook !== null && hasCommand(CREATE_JOB) && hasCommand(GO_TO_PATH)) {
    return [
      { command: GO_TO_PATH, args: { path: notebook } },
      { command: CREATE_JOB, args: {} }
    ];
  }
  return hasCommand(LIST_JOBS) ? [{ command: LIST_JOBS, args: {} }] : [];
}

/** The part of JupyterLab the action uses (JupyterFrontEnd satisfies it). */
export interface Commands {
  hasCommand(id: string): boolean;
  execute(id: string, args?: Step['args']): Promise<unknown>;
}

export interface Action {
  label: string;
  caption: string;
  callback: (event: Event) => void;
}

/**
 * The notification's "Run as a job" action, or null where the warning does not offer it or
 * jupyter-scheduler is missing. `currentPath` gives the path of the document open in the main area.
 */
export function handoffAction(
  warning: Warning,
  commands: Commands,
  currentPath: () => string | null | undefined
): Action | null {
  const has = (id: string) => commands.hasCommand(id);
  if (!offersHandoff(warning) || !(has(LIST_JOBS) || has(CREATE_JOB))) {
    return null;
  }
  return {
    label: HANDOFF_LABEL,
    caption: HANDOFF_CAPTION,
    callback: (event: Event) => {
      event.preventDefault(); // the warning stays: the stop is still due until the user stops working here
      void (async () => {
        for (const step of handoffSteps(notebookPath(currentPath()), has)) {
          await commands.execute(step.command, step.args);
        }
      })();
    }
  };
}
