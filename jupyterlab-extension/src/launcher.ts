/**
 * "Open VS Code" in JupyterLab's launcher, exactly where the workspace's profile declares code-server
 * for its image (the spawner's $GPUWS_EDITORS, handed to the page by the server extension as the page
 * option `gpuworkspaceEditors`). Pure: the plugin that adds the item is launcher-plugin.ts.
 */

export const EDITORS_OPTION = 'gpuworkspaceEditors'; // "jupyterlab,code-server"
export const OPEN_VSCODE = 'gpuworkspace:open-vscode';
export const VSCODE_LABEL = 'Open VS Code';
export const VSCODE_PATH = 'vscode/'; // jupyter-vscode-proxy's, under the server's base URL
export const CATEGORY = 'Other';

/** The editors the profile's image declares, from the page option (empty: none said). */
export function declaredEditors(option: string | null | undefined): string[] {
  return (option ?? '')
    .split(',')
    .map(name => name.trim())
    .filter(name => name !== '');
}

/** Whether the launcher offers VS Code: only where the image declares code-server. */
export function offersVSCode(editors: string[]): boolean {
  return editors.includes('code-server');
}

/** VS Code's address in this server (jupyter-server-proxy starts code-server on first use). */
export function vscodeUrl(baseUrl: string): string {
  return `${baseUrl.replace(/\/+$/, '')}/${VSCODE_PATH}`;
}
