import { JupyterFrontEnd, JupyterFrontEndPlugin } from '@jupyterlab/application';
import { ICommandPalette, Notification } from '@jupyterlab/apputils';
import { URLExt } from '@jupyterlab/coreutils';
import { ServerConnection } from '@jupyterlab/services';
import { IStatusBar } from '@jupyterlab/statusbar';
import { Widget } from '@lumino/widgets';

import { addUsagePanel } from './panel';
import { Status, statusText, statusTitle, warningKey, warningMessage } from './status';

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

  constructor() {
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
          }
        ]
      };
      if (id === undefined) {
        this.shown.set(key, Notification.warning(message, options));
      } else {
        Notification.update({ id, message, type: 'warning', ...options });
      }
    }
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

const plugin: JupyterFrontEndPlugin<void> = {
  id: '@gpuworkspace/jupyterlab-status:plugin',
  description: "This workspace's GPU, CPU, memory and home disk, and the idle culler's warnings",
  autoStart: true,
  optional: [IStatusBar, ICommandPalette],
  activate: (app: JupyterFrontEnd, statusBar: IStatusBar | null, palette: ICommandPalette | null) => {
    const status = new WorkspaceStatus();
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

export default plugin;
