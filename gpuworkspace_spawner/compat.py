"""JupyterHub version differences, in one place."""

from __future__ import annotations

try:  # JupyterHub >= 6
    from jupyterhub.spawner import SpawnException
except ImportError:  # JupyterHub 5: same constructor, so callers need not care
    from tornado import web

    class SpawnException(web.HTTPError):  # type: ignore[no-redef]
        """A spawn refused for a reason the user can act on (``reason`` labels the failure metric)."""

        reason = ""
        status_code = 400
        message = ""
        message_html = ""
        log_message = ""  # shadows tornado's property, as JupyterHub 6's class does

        def __init__(
            self,
            message: str,
            *,
            reason: str,
            log_message: str = "",
            message_html: str = "",
            status_code: int = 400,
        ) -> None:
            self.message = message
            self.reason = reason
            self.log_message = log_message or message
            self.message_html = message_html
            self.status_code = status_code
            super().__init__(status_code, message, reason=reason)


__all__ = ["SpawnException"]
