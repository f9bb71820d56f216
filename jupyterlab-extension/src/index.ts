import { JupyterFrontEnd, JupyterFrontEndPlugin } from '@jupyterlab/application';
import { ICommandPalette, Notification } from '@jupyterlab/apputils';
import { URLExt } from '@jupyterlab/coreutils';
import { ServerConnection } from '@jupyterlab/services';
import { IStatusBar } from '@jupyterlab/statusbar';
import { Widget } from '@lumino/widgets';

import { Action, handoffAction } from './handoff';
import { launcherPlugin } from './launcher-plugin';
import { addUsagePanel } from './panel';
import { Status, statusText, statusTitle, Warning, warningKey, warningMessage } from './status';

const POLL_MS = 5_000;
const AFTER_CLICK_MS = 1_000; // after "I'm still working": until the culler's next cycle withdraws the warning
const AFTER_CLICK_TRIES = 20;

async function request(settings: ServerConnection.ISettings, path: string, method = 'GET'): Promise<any> {
  const url = URLExt.join(settings.baseUrl, 'gpuworkspace', 'api', path);
  const response = await ServerConnection.makeRequest(url, { method }, settings);
  if (!response.ok) {
    throw new Error(`${path}: ${response.status}`);
  }
  return response.json();
}

/** The status-bar item and the culler's warnings as notifications, refreshed every POLL_MS. */
export class WorkspaceStatus {
  readonly widget = new Widget();
  private shown = new Map<string, string>(); // warning key -> notification id
  private settings = ServerConnection.makeSettings();

  constructor(private readonly app?: JupyterFrontEnd) {
    this.widget.addClass('jp-gpuworkspace-status');
    this.widget.node.textContent = 'Workspace: …';
  }

  async refresh(): Promise<void> {
    let status: Status | null = null;
    try {
      status = (await request(this.settings, 'status')) as Status;
    } catch {
      status = null; // shown as "unavailable"; never an error dialog
    }
    this.widget.node.textContent = statusText(status);
    this.widget.node.title = statusTitle(status);
    this.notify(status);
  }

  private notify(status: Status | null): void {
    if (status === null || !status.culler.available) {
      return; // unknown: keep what is shown
    }
    const now = new Date();
    const current = new Map(status.culler.warnings.map(w => [warningKey(w), w]));
    for (const [key, id] of this.shown) {
      if (!current.has(key)) {
        Notification.dismiss(id); // withdrawn by the culler, or replaced by a later stage
        this.shown.delete(key);
      }
    }
    for (const [key, warning] of current) {
      const message = warningMessage(warning, now);
      const id = this.shown.get(key);
      const options = {
        autoClose: false as const,
        data: { gpuworkspace: key },
        actions: [
          {
            label: "I'm still working",
            caption: 'Counts as activity: the idle culler sees it at its next check',
            callback: (event: Event) => {
              event.preventDefault();
              void this.stillWorking();
            }
          },
          ...this.handoff(warning)
        ]
      };
      if (id === undefined) {
        this.shown.set(key, Notification.warning(message, options));
      } else {
        Notification.update({ id, message, type: 'warning', ...options });
      }
    }
  }

  /** "Run as a job" where the warning offers the hand-off (handoff.ts). */
  private handoff(warning: Warning): Action[] {
    const app = this.app;
    const action = app ? handoffAction(warning, app.commands, () => currentPath(app)) : null;
    return action ? [action] : [];
  }

  async stillWorking(): Promise<void> {
    try {
      await request(this.settings, 'activity', 'POST');
    } catch {
      // the refreshes below show whether the warning is still there
    }
    for (let i = 0; i < AFTER_CLICK_TRIES && this.shown.size > 0; i++) {
      await new Promise(resolve => window.setTimeout(resolve, AFTER_CLICK_MS));
      await this.refresh();
    }
  }
}

/** The path of the document in the main area (a notebook's, for the hand-off), if any. */
function currentPath(app: JupyterFrontEnd): string | null {
  const widget = app.shell.currentWidget as { context?: { path?: unknown } } | null;
  const path = widget?.context?.path;
  return typeof path === 'string' ? path : null;
}

const plugin: JupyterFrontEndPlugin<void> = {
  id: '@gpuworkspace/jupyterlab-status:plugin',
  description: "This workspace's GPU, CPU, memory and home disk, and the idle culler's warnings",
  autoStart: true,
  optional: [IStatusBar, ICommandPalette],
  activate: (app: JupyterFrontEnd, statusBar: IStatusBar | null, palette: ICommandPalette | null) => {
    const status = new WorkspaceStatus(app);
    addUsagePanel(app, palette, status.widget); // a click on the item, or the palette, opens the last hour
    if (statusBar) {
      statusBar.registerStatusItem('@gpuworkspace/jupyterlab-status:item', {
        item: status.widget,
        align: 'left',
        rank: 1000
      });
    }
    void app.restored.then(() => {
      void status.refresh();
      window.setInterval(() => void status.refresh(), POLL_MS);
    });
  }
};

export default [plugin, launcherPlugin];
