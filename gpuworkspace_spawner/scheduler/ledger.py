"""What this single-user server remembers of its notebook jobs, in one JSON file of its own.

The jobs API keeps the jobs (Kubernetes is its database); this keeps only what it does not: the name
the user gave a job in the dialog, the parameters as typed, and the jobs the user stopped (a stop
cancels the job, which the API then forgets), so the Notebook Jobs panel keeps showing them as
STOPPED until they are deleted. A record of a job the API no longer has (its
``ttlSecondsAfterFinished`` passed, or it was cancelled elsewhere) and that is not kept as stopped is
pruned at the next listing, so the file does not grow with every job ever submitted.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
from pathlib import Path
from typing import Any

log = logging.getLogger("gpuworkspace.scheduler")
Obj = dict[str, Any]


class Ledger:
    def __init__(self, path: str) -> None:
        self.path = Path(path)

    def _read(self) -> Obj:
        try:
            data = json.loads(self.path.read_text())
        except FileNotFoundError:
            return {"created": {}, "stopped": {}}
        except (OSError, ValueError) as exc:
            log.warning("Ignoring unreadable notebook job records in %s: %s", self.path, exc)
            return {"created": {}, "stopped": {}}
        if not isinstance(data, dict):
            return {"created": {}, "stopped": {}}
        return {k: dict(data.get(k) or {}) for k in ("created", "stopped")}

    def _write(self, data: Obj) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=".gpuworkspace-jobs-")
        with os.fdopen(fd, "w") as out:
            json.dump(data, out)
        os.replace(tmp, self.path)

    def created(self) -> dict[str, Obj]:
        return dict(self._read()["created"])

    def stopped(self) -> dict[str, Obj]:
        return dict(self._read()["stopped"])

    def remember(self, job_id: str, record: Obj) -> None:
        data = self._read()
        data["created"][job_id] = record
        self._write(data)

    def rename(self, job_id: str, name: str) -> None:
        data = self._read()
        data["created"].setdefault(job_id, {})["name"] = name
        if job_id in data["stopped"]:
            data["stopped"][job_id]["name"] = name
        self._write(data)

    def stop(self, job_id: str, described: Obj) -> None:
        data = self._read()
        data["stopped"][job_id] = described
        self._write(data)

    def forget(self, job_id: str) -> None:
        data = self._read()
        data["created"].pop(job_id, None)
        data["stopped"].pop(job_id, None)
        self._write(data)

    def prune(self, known: set[str]) -> list[str]:
        """Forget the created records of jobs that are not in ``known`` (the API's full list of this
        user's jobs) and were not stopped here; returns their ids. Writes only when one goes."""
        data = self._read()
        gone = sorted(j for j in data["created"] if j not in known and j not in data["stopped"])
        if gone:
            for job_id in gone:
                del data["created"][job_id]
            self._write(data)
        return gone
