"""The soak's observer: kubectl watches (never faulted) that record what a disk-safety audit needs.

Every change of a VolumeAttachment is checked as it happens: a volume attached on two nodes at once is
a double attach, however briefly. Claims are followed too, so a workspace disk deleted or replaced
(a new uid under the same name) is seen even if nothing reads it afterwards.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class Observations:
    attachments_seen: int = 0
    double_attaches: list[str] = field(default_factory=list)
    claim_uids: dict[str, set[str]] = field(default_factory=dict)  # name → every uid it has had
    claims_deleted: list[str] = field(default_factory=list)
    watch_restarts: int = 0


class Observer:
    """``kubectl get --watch`` on VolumeAttachments and claims, restarted whenever a watch ends."""

    def __init__(self, kubeconfig: Path, namespace: str) -> None:
        self.env = {**os.environ, "KUBECONFIG": str(kubeconfig)}
        self.namespace = namespace
        self.seen = Observations()
        self.lock = threading.Lock()
        self._attached: dict[str, dict[str, str]] = {}  # PV → node → VolumeAttachment
        self._procs: list[subprocess.Popen[str]] = []
        self._stopping = threading.Event()
        self._threads = [
            threading.Thread(
                target=self._follow, args=(["volumeattachments"], self._attachment), daemon=True
            ),
            threading.Thread(target=self._follow, args=(["pvc", "-n", namespace], self._claim), daemon=True),
        ]

    def __enter__(self) -> Observer:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stopping.set()
        for proc in list(self._procs):
            proc.kill()
        for thread in self._threads:
            thread.join(10)

    def _follow(self, what: list[str], handle: Any) -> None:
        while not self._stopping.is_set():
            argv = ["kubectl", "get", *what, "--watch", "--output-watch-events", "-o", "json"]
            proc = subprocess.Popen(
                argv, env=self.env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
            )
            self._procs.append(proc)
            decoder, buffer = json.JSONDecoder(), ""
            assert proc.stdout is not None
            for line in proc.stdout:
                buffer += line
                while buffer.strip():
                    try:
                        event, end = decoder.raw_decode(buffer.lstrip())
                    except ValueError:
                        break  # an object split across lines: read on
                    buffer = buffer.lstrip()[end:]
                    with self.lock:
                        handle(event.get("type", ""), event.get("object") or {})
            try:  # its output ended: it exits now, or it is stuck and killed
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
            proc.stdout.close()
            self._procs.remove(proc)
            with self.lock:
                self.seen.watch_restarts += 1

    def _attachment(self, kind: str, va: dict[str, Any]) -> None:
        spec, name = va.get("spec") or {}, va["metadata"]["name"]
        pv, node = (spec.get("source") or {}).get("persistentVolumeName") or "", spec.get("nodeName") or ""
        nodes = self._attached.setdefault(pv, {})
        if kind == "DELETED" or not (va.get("status") or {}).get("attached"):
            if nodes.get(node) == name:
                del nodes[node]
            return
        self.seen.attachments_seen += 1
        nodes[node] = name
        if len(nodes) > 1:
            self.seen.double_attaches.append(f"{pv} attached on {sorted(nodes)} at once")

    def _claim(self, kind: str, claim: dict[str, Any]) -> None:
        meta = claim["metadata"]
        name, uid = meta["name"], meta["uid"]
        self.seen.claim_uids.setdefault(name, set()).add(uid)
        if kind == "DELETED" or meta.get("deletionTimestamp"):
            entry = f"{name} (uid {uid})"
            if entry not in self.seen.claims_deleted:
                self.seen.claims_deleted.append(entry)
