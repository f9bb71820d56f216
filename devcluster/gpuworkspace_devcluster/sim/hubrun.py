"""JupyterHub as ``quay.io/jupyterhub/jupyterhub`` runs it (``CMD ["jupyterhub"]``), on the simulated node.

``python -m gpuworkspace_devcluster.sim.hubrun ARGS`` is the installed ``jupyterhub ARGS`` with one
change: pods share the host's network here, so addresses a container would bind on all interfaces (the
hub's ``hub_bind_url``/``hub_ip`` and the proxy's public ``bind_url``/``ip``, when their host is empty,
``0.0.0.0`` or ``::``) are bound to the pod IP instead (``GPUWORKSPACE_POD_IP``), after the config file the
pod mounts was read; so is configurable-http-proxy's REST API, which a pod would keep on its own loopback
(``http://127.0.0.1:8001``). Ports, and everything else the config says, are kept.
"""

from __future__ import annotations

import os
from urllib.parse import urlsplit, urlunsplit

from jupyterhub.app import JupyterHub

POD_IP_ENV = "GPUWORKSPACE_POD_IP"
_ANY = ("", "0.0.0.0", "::", "[::]")
_LOOPBACK = ("127.0.0.1", "localhost", "::1")
PROXY_API_URL = "http://127.0.0.1:8001"  # ConfigurableHTTPProxy.api_url's default


def rebind(url: str, ip: str, hosts: tuple[str, ...] = _ANY) -> str:
    """``url`` with its host replaced by ``ip`` when it is one of ``hosts`` (any other host is kept)."""
    parts = urlsplit(url)
    if (parts.hostname or "") not in hosts:
        return url
    netloc = f"{ip}:{parts.port}" if parts.port else ip
    return urlunsplit(parts._replace(netloc=netloc))


class PodHub(JupyterHub):  # type: ignore[misc]
    """JupyterHub, bound to the pod IP once its config file is loaded."""

    def load_config_file(self, *args: object, **kwargs: object) -> None:
        super().load_config_file(*args, **kwargs)
        ip = os.environ.get(POD_IP_ENV, "")
        if not ip:
            return
        if self.hub_bind_url:
            self.hub_bind_url = rebind(self.hub_bind_url, ip)
        elif self.hub_ip in _ANY:
            self.hub_ip = ip
        self.bind_url = rebind(self.bind_url, ip)
        proxy = self.config.ConfigurableHTTPProxy
        proxy.api_url = rebind(str(proxy.get("api_url") or PROXY_API_URL), ip, _LOOPBACK)


if __name__ == "__main__":
    PodHub.launch_instance()
