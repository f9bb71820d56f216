"""The simulation's control API: workloads and faults, over HTTP on the API server and from Python.

HTTP (JSON bodies; merge :func:`control_handlers` into ``ApiServerConfig.extra_handlers``):

- ``/_devcluster/sim/workload``: GET lists the scripts; PUT ``{namespace, pod, [pid], gpu_util,
  mem_used_mib, power_w, sm_clock_mhz, tensor_active, dram_active, cpu_cores, memory_bytes, start,
  loop_s, ...}`` scripts a pod (by uid when it exists, else by name, for a pod still to come; a series
  is a number or ``[[t_offset_s, value], ...]``); DELETE ``{namespace, pod}`` drops its scripts, with
  no body all of them.
- ``/_devcluster/sim/node``: POST ``{node, action}``, action ``not-ready``, ``recover``,
  ``out-of-service`` or ``clear-out-of-service``.
- ``/_devcluster/sim/pod``: POST ``{namespace, pod, action: "kill", [signal]}`` (default SIGKILL).
- ``/_devcluster/sim/volume``: POST ``{namespace, pvc, action: "fill" | "unfill", [leave_bytes]}``.
- ``/_devcluster/sim/faults``: GET; PUT ``{slow_pull_s: {image prefix: s}, slow_disk_s, xid_errors:
  {GPU uuid: xid}}`` (the keys given replace theirs); DELETE resets them.
- ``/_devcluster/sim/nvml``: GET ``?node=<node>``: the node's devices and GPU processes as NVML would
  list them, for the fake NVML module (:mod:`.nvmlview`, :mod:`.fakenvml`).

A bad request answers 400 with a ``Status`` whose message and ``details.causes[].field`` name the field.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import orjson
from aiohttp import web

from ..errors import ApiError
from .base import rt_of
from .context import SimContext
from .failures import (
    FaultError,
    add_out_of_service_taint,
    clear_out_of_service_taint,
    faults_of,
    fill_volume,
    kill_pod_process,
    node_not_ready,
    node_recover,
    unfill_volume,
)
from .nvmlview import PATH as NVML_PATH
from .nvmlview import nvml_handler
from .workloads import SERIES_FIELDS, Workload, WorkloadBook, WorkloadError, workload_book

PREFIX = "/_devcluster/sim"
PODS = rt_of("", "pods")
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
NODE_ACTIONS = ("not-ready", "recover", "out-of-service", "clear-out-of-service")
_WORKLOAD_KEYS = frozenset({"namespace", "pod", "pid", "start", "loop_s", *SERIES_FIELDS})


def field_error(name: str, message: str) -> ApiError:
    return ApiError(
        400,
        "BadRequest",
        f"{name}: {message}",
        details={"causes": [{"reason": "FieldValueInvalid", "field": name, "message": message}]},
    )


def _text(body: Mapping[str, Any], name: str) -> str:
    value = body.get(name)
    if not isinstance(value, str) or not value:
        raise field_error(name, "Required value: a non-empty string")
    return value


def _choice(body: Mapping[str, Any], name: str, choices: tuple[str, ...]) -> str:
    value = _text(body, name)
    if value not in choices:
        raise field_error(name, f"Unsupported value: {value!r}: supported values: {', '.join(choices)}")
    return value


def _signal(value: Any) -> int:
    if value is None:
        return int(signal.SIGKILL)
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    if isinstance(value, str):
        name = value.upper() if value.upper().startswith("SIG") else f"SIG{value.upper()}"
        if name in signal.Signals.__members__:
            return int(signal.Signals[name])
    raise field_error("signal", f"not a signal: {value!r}")


class SimControl:
    """The same operations for Python callers (tests, the demo script)."""

    def __init__(self, ctx: SimContext, *, clock: Callable[[], float] | None = None) -> None:
        self.ctx = ctx
        self.clock = clock or time.time

    @property
    def workloads(self) -> WorkloadBook:
        return workload_book(self.ctx)

    def set_workload(self, body: Mapping[str, Any]) -> dict[str, Any]:
        unknown = sorted(set(body) - _WORKLOAD_KEYS)
        if unknown:
            raise field_error(unknown[0], "unknown field")
        namespace, name = _text(body, "namespace"), _text(body, "pod")
        pid = body.get("pid")
        if pid is not None and (isinstance(pid, bool) or not isinstance(pid, int) or pid <= 0):
            raise field_error("pid", "must be a positive integer")
        try:
            workload = Workload.from_json(body, now=self.clock())
        except WorkloadError as exc:
            raise field_error(exc.field, exc.message) from exc
        pod = self.ctx.verbs.store.get(PODS, namespace, name)
        uid = (pod or {}).get("metadata", {}).get("uid", "")
        ref = WorkloadBook.ref(uid=uid, namespace=namespace, name=name)
        self.workloads.put(ref, workload, pid)
        return {"namespace": namespace, "pod": name, "uid": uid, "pid": pid, "workload": workload.to_json()}

    def clear_workload(self, namespace: str, name: str) -> int:
        pod = self.ctx.verbs.store.get(PODS, namespace, name)
        removed = self.workloads.remove(WorkloadBook.ref(namespace=namespace, name=name), all_pids=True)
        if pod is not None:
            removed += self.workloads.remove(WorkloadBook.ref(uid=pod["metadata"]["uid"]), all_pids=True)
        return removed

    def node(self, node: str, action: str) -> dict[str, Any]:
        removed: list[str] = []
        if action == "not-ready":
            node_not_ready(self.ctx, node)
        elif action == "recover":
            node_recover(self.ctx, node)
        elif action == "out-of-service":
            removed = add_out_of_service_taint(self.ctx, node)
        elif action == "clear-out-of-service":
            clear_out_of_service_taint(self.ctx, node)
        else:
            raise field_error(
                "action", f"Unsupported value: {action!r}: supported values: {', '.join(NODE_ACTIONS)}"
            )
        return {"node": node, "action": action, "forceDeletedPods": removed}

    def kill(
        self, namespace: str, name: str, sig: int = signal.SIGKILL, *, oom: bool = False
    ) -> dict[str, Any]:
        return {
            "namespace": namespace,
            "pod": name,
            "signalled": kill_pod_process(self.ctx, namespace, name, sig, oom=oom),
        }

    def volume(self, namespace: str, pvc: str, action: str, leave_bytes: int = 0) -> dict[str, Any]:
        try:
            if action == "fill":
                return {
                    "namespace": namespace,
                    "pvc": pvc,
                    "filledBytes": fill_volume(self.ctx, namespace, pvc, leave_bytes),
                }
            unfill_volume(self.ctx, namespace, pvc)
        except ValueError as exc:
            raise field_error("pvc", str(exc)) from exc
        return {"namespace": namespace, "pvc": pvc, "filledBytes": 0}

    def set_faults(self, body: Mapping[str, Any]) -> dict[str, Any]:
        try:
            faults_of(self.ctx).update_from_json(body)
        except FaultError as exc:
            raise field_error(exc.field, exc.message) from exc
        return faults_of(self.ctx).to_json()


async def _json(request: web.Request, *, optional: bool = False) -> dict[str, Any]:
    raw = await request.read()
    if not raw.strip():
        if optional:
            return {}
        raise field_error("body", "Required value: a JSON object")
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise field_error("body", f"invalid JSON: {exc}") from exc
    if not isinstance(body, dict):
        raise field_error("body", "must be a JSON object")
    return body


def _reply(data: Any) -> web.Response:
    return web.Response(body=orjson.dumps(data), content_type="application/json")


def _methods(request: web.Request, *allowed: str) -> None:
    if request.method not in allowed:
        raise ApiError(
            405, "MethodNotAllowed", f"{request.path} allows {', '.join(allowed)}, not {request.method}"
        )


def control_handlers(ctx: SimContext, control: SimControl | None = None) -> dict[str, Handler]:
    """Exact paths -> handlers, for ``ApiServerConfig.extra_handlers``."""
    api = control or SimControl(ctx)

    async def workload(request: web.Request) -> web.StreamResponse:
        _methods(request, "GET", "PUT", "DELETE")
        if request.method == "GET":
            return _reply({"workloads": api.workloads.to_json()})
        if request.method == "PUT":
            return _reply(api.set_workload(await _json(request)))
        body = await _json(request, optional=True)
        if not body:
            count = len(api.workloads.entries)
            api.workloads.clear()
            return _reply({"removed": count})
        return _reply({"removed": api.clear_workload(_text(body, "namespace"), _text(body, "pod"))})

    async def node(request: web.Request) -> web.StreamResponse:
        _methods(request, "POST")
        body = await _json(request)
        return _reply(api.node(_text(body, "node"), _choice(body, "action", NODE_ACTIONS)))

    async def pod(request: web.Request) -> web.StreamResponse:
        _methods(request, "POST")
        body = await _json(request)
        namespace, name = _text(body, "namespace"), _text(body, "pod")
        action = _choice(body, "action", ("kill", "oom"))  # oom: SIGKILL, reported as OOMKilled
        sig = signal.SIGKILL if action == "oom" else _signal(body.get("signal"))
        return _reply(api.kill(namespace, name, sig, oom=action == "oom"))

    async def volume(request: web.Request) -> web.StreamResponse:
        _methods(request, "POST")
        body = await _json(request)
        namespace, pvc = _text(body, "namespace"), _text(body, "pvc")
        action = _choice(body, "action", ("fill", "unfill"))
        leave = body.get("leave_bytes", 0)
        if isinstance(leave, bool) or not isinstance(leave, int) or leave < 0:
            raise field_error("leave_bytes", "must be an integer >= 0")
        return _reply(api.volume(namespace, pvc, action, leave))

    async def faults(request: web.Request) -> web.StreamResponse:
        _methods(request, "GET", "PUT", "DELETE")
        if request.method == "PUT":
            return _reply(api.set_faults(await _json(request)))
        if request.method == "DELETE":
            faults_of(ctx).clear()
        return _reply(faults_of(ctx).to_json())

    return {
        f"{PREFIX}/workload": workload,
        f"{PREFIX}/node": node,
        f"{PREFIX}/pod": pod,
        f"{PREFIX}/volume": volume,
        f"{PREFIX}/faults": faults,
        NVML_PATH: nvml_handler(ctx, api.clock),
    }
