import { JupyterFrontEnd } from '@jupyterlab/application';
import { ICommandPalette } from '@jupyterlab/apputils';
import { URLExt } from '@jupyterlab/coreutils';
import { ServerConnection } from '@jupyterlab/services';
import { Widget } from '@lumino/widgets';

import { History, panelHtml } from './usage';

export const SHOW_USAGE = 'gpuworkspace:show-usage';
type Message = Parameters<Widget['processMessage']>[0]; // @lumino/messaging's, without a new dependency
const REFRESH_MS = 15_000; // the attribution service's cycle is 15 s by default

/**
 * The usage panel: this workspace's last hour (GPU utilisation and memory with their basis, CPU,
 * memory), the home disk and a link to the full dashboard; refreshed while it is shown. A server or
 * service that cannot answer is "unavailable" in the panel, never an error dialog.
 */
export class UsagePanel extends Widget {
  private timer: number | undefined;
  private settings = ServerConnection.makeSettings();

  constructor() {
    super();
    this.id = 'gpuworkspace-usage';
    this.title.label = 'Workspace usage';
    this.title.caption = "This workspace's last hour";
    this.title.closable = true;
    this.addClass('jp-gpuworkspace-usage');
    this.node.style.overflow = 'auto';
    this.node.style.padding = '8px 16px';
    this.node.textContent = 'Workspace usage: …';
  }

  async refresh(): Promise<void> {
    let history: History | null = null;
    try {
      const url = URLExt.join(this.settings.baseUrl, 'gpuworkspace', 'api', 'history');
      const response = await ServerConnection.makeRequest(url, { method: 'GET' }, this.settings);
      history = response.ok ? ((await response.json()) as History) : null;
    } catch {
      history = null; // shown as "unavailable"; never an error dialog
    }
    this.node.innerHTML = panelHtml(history, Date.now() / 1000);
  }

  protected onAfterAttach(msg: Message): void {
    super.onAfterAttach(msg);
    void this.refresh();
    this.timer = window.setInterval(() => void this.refresh(), REFRESH_MS);
  }

  protected onBeforeDetach(msg: Message): void {
    window.clearInterval(this.timer);
    this.timer = undefined;
    super.onBeforeDetach(msg);
  }
}

/** "Workspace: show usage" in the command palette, and a click on the status-bar item, open the panel. */
export function addUsagePanel(app: JupyterFrontEnd, palette: ICommandPalette | null, item: Widget): void {
  let panel: UsagePanel | null = null;
  app.commands.addCommand(SHOW_USAGE, {
    label: 'Workspace: show usage',
    caption: "This workspace's GPU, CPU and memory over the last hour, and a link to the full dashboard",
    execute: () => {
      if (panel === null || panel.isDisposed) {
        panel = new UsagePanel();
        app.shell.add(panel, 'main', { mode: 'split-right' });
      }
      app.shell.activateById(panel.id);
    }
  });
  palette?.addItem({ command: SHOW_USAGE, category: 'Workspace' });
  item.node.style.cursor = 'pointer';
  item.node.addEventListener('click', () => void app.commands.execute(SHOW_USAGE));
}
