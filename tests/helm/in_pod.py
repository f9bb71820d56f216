"""``python in_pod.py <serviceaccount dir> -m <module> [args...]``: run ``<module>`` as ``python -m`` does,
with kubernetes_asyncio's in-cluster configuration reading the ServiceAccount token and CA from
``<serviceaccount dir>`` instead of ``/var/run/secrets/kubernetes.io/serviceaccount`` (which a test
machine does not have). Everything else, the environment above all, is left as the caller set it.
"""

from __future__ import annotations

import runpy
import sys

from kubernetes_asyncio.config import incluster_config


def main() -> None:
    sa_dir, flag, module, *args = sys.argv[1:]
    if flag != "-m":
        raise SystemExit(f"usage: {sys.argv[0]} <serviceaccount dir> -m <module> [args...]")
    incluster_config.SERVICE_TOKEN_FILENAME = f"{sa_dir}/token"
    incluster_config.SERVICE_CERT_FILENAME = f"{sa_dir}/ca.crt"
    sys.argv = [module, *args]
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
