import { declaredEditors, offersVSCode, VSCODE_LABEL, vscodeUrl } from '../src/launcher';

describe('the launcher offers "Open VS Code"', () => {
  it('where the profile\'s image declares code-server', () => {
    expect(offersVSCode(declaredEditors('jupyterlab,code-server'))).toBe(true);
    expect(offersVSCode(declaredEditors(' code-server '))).toBe(true);
    expect(VSCODE_LABEL).toBe('Open VS Code');
  });

  it('nowhere else: a JupyterLab-only image, or no declaration at all', () => {
    expect(offersVSCode(declaredEditors('jupyterlab'))).toBe(false);
    expect(offersVSCode(declaredEditors(''))).toBe(false);
    expect(offersVSCode(declaredEditors(undefined))).toBe(false);
    expect(offersVSCode(declaredEditors('code-server-ish'))).toBe(false);
  });

  it('opens VS Code under the server\'s base URL, where jupyter-vscode-proxy serves it', () => {
    expect(vscodeUrl('/user/alice/ide/')).toBe('/user/alice/ide/vscode/');
    expect(vscodeUrl('/user/alice/ide')).toBe('/user/alice/ide/vscode/');
  });
});
