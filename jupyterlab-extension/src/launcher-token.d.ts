/**
 * The type of JupyterLab's launcher token, declared here rather than installed: `@jupyterlab/launcher` is
 * one of JupyterLab's shared singleton packages, so the prebuilt extension takes it from the running
 * JupyterLab (@jupyterlab/builder shares it with `import: false`: nothing of it is bundled), and only
 * the two members launcher.ts uses need a type.
 */
declare module '@jupyterlab/launcher' {
  import { Token } from '@lumino/coreutils';

  export interface ILauncher {
    add(options: ILauncher.IItemOptions): { dispose(): void };
  }

  export namespace ILauncher {
    interface IItemOptions {
      command: string;
      args?: { [key: string]: string };
      category?: string;
      rank?: number;
    }
  }

  export const ILauncher: Token<ILauncher>;
}
