/** The launcher's "Open VS Code" item (launcher.ts decides where; this adds it). */

import { JupyterFrontEnd, JupyterFrontEndPlugin } from '@jupyterlab/application';
import { PageConfig } from '@jupyterlab/coreutils';
import { ILauncher } from '@jupyterlab/launcher';

import { CATEGORY, declaredEditors, EDITORS_OPTION, OPEN_VSCODE, offersVSCode, VSCODE_LABEL, vscodeUrl } from './launcher';

export const launcherPlugin: JupyterFrontEndPlugin<void> = {
  id: '@gpuworkspace/jupyterlab-status:vscode-launcher',
  description: '"Open VS Code" in the launcher where the profile\'s image declares code-server',
  autoStart: true,
  optional: [ILauncher],
  activate: (app: JupyterFrontEnd, launcher: ILauncher | null) => {
    if (!launcher || !offersVSCode(declaredEditors(PageConfig.getOption(EDITORS_OPTION)))) {
      return;
    }
    app.commands.addCommand(OPEN_VSCODE, {
      label: VSCODE_LABEL,
      caption: 'VS Code (code-server) in a new browser tab, behind the same hub login',
      execute: () => {
        window.open(vscodeUrl(PageConfig.getBaseUrl()), '_blank', 'noopener');
      }
    });
    launcher.add({ command: OPEN_VSCODE, category: CATEGORY, rank: 1 });
  }
};
