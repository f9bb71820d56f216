"""helm-values/values*.yaml: valid for the z2jh chart after Helm's merge, and consistent with what
hub_config/jupyterhub_config.py (the demo, run end to end by the e2e tests) configures.

Schema: every values file, and values.yaml with each overlay, coalesced over the chart's defaults
(``../shared/schemas/z2jh-values.defaults.yaml``) and validated against its ``values.schema.yaml``, as
``helm install`` does. Consistency: the services, their commands, URLs and roles, the spawner traits,
the catalog mount and the culler switch, checked by :func:`consistency_problems`.
"""

from __future__ import annotations

import copy
import functools
import re
import sys
from collections.abc import Iterator, Mapping
from importlib.metadata import entry_points
from typing import Any
from urllib.parse import urlparse

import jsonschema
import pytest
from traitlets.config.loader import PyFileConfigLoader

from gpuworkspace_spawner import GPUWorkspaceSpawner
from tests.helm import (
    BASE,
    OVERLAYS,
    REPO,
    SHARED,
    SKIP_NO_SHARED,
    WORKSPACE_NAMESPACE,
    coalesce,
    combinations,
    deployments,
    load_yaml,
    manifests,
    merge_user_values,
    user_values,
)

COMBOS = [pytest.param(files, id=name) for name, files in combinations()]
FILES = [pytest.param(p, id=p.name) for p in (BASE, *OVERLAYS)]
needs_shared = pytest.mark.skipif(SHARED is None, reason=SKIP_NO_SHARED)

# Options of hub_config's service commands that exist only for the devcluster (plain-HTTP kubelets).
DEVCLUSTER_ONLY = frozenset({"--kubelet-scheme"})
# Options the values may add: where to listen (the url's host is the hub Service), the attribution
# service's namespace (keeps its pod watch and RBAC to the workspaces), a culler config file.
MAY_ADD = frozenset({"--listen", "--namespace", "--config"})


# ------------------------------------------------------------------------------ chart schema
@functools.cache
def _chart() -> tuple[dict[str, Any], jsonschema.protocols.Validator]:
    assert SHARED is not None
    defaults = load_yaml(SHARED / "z2jh-values.defaults.yaml")
    schema = load_yaml(SHARED / "z2jh-values.schema.yaml")
    validator = jsonschema.validators.validator_for(schema)(schema)
    return defaults, validator


def schema_errors(user: Mapping[str, Any]) -> list[str]:
    """What helm would refuse: the user values coalesced over the chart defaults, against its schema."""
    defaults, validator = _chart()
    merged = coalesce(defaults, user)
    return [
        f"{'.'.join(map(str, e.absolute_path)) or '<root>'}: {e.message}"
        for e in sorted(validator.iter_errors(merged), key=str)
    ]


@needs_shared
@pytest.mark.parametrize("path", FILES)
def test_each_file_is_valid_for_the_chart(path: Any) -> None:
    assert schema_errors(load_yaml(path)) == []


@needs_shared
@pytest.mark.parametrize("files", COMBOS)
def test_values_with_overlays_are_valid_for_the_chart(files: tuple[Any, ...]) -> None:
    assert schema_errors(user_values(*files)) == []


@needs_shared
@pytest.mark.parametrize(
    ("change", "expected"),
    [
        pytest.param({"hub": {"extraConfg": {}}}, "'extraConfg' was unexpected", id="typo-under-hub"),
        pytest.param({"cull": {"enabled": "no"}}, "'no' is not of type 'boolean'", id="wrong-type"),
        pytest.param({"singleuser": {"storage": {"type": "pvc"}}}, "'pvc' is not one of", id="bad-enum"),
        pytest.param({"cull": {"culler": "ours"}}, "'culler' was unexpected", id="cull-is-closed"),
    ],
)
def test_the_schema_check_can_fail(change: dict[str, Any], expected: str) -> None:
    errors = schema_errors(merge_user_values(load_yaml(BASE), change))
    assert any(expected in e for e in errors), errors


def test_helm_merge_semantics() -> None:
    defaults = {"a": {"b": 1, "c": [1, 2]}, "d": 1, "e": {"f": 1}}
    user = merge_user_values({"a": {"c": [3]}, "d": 2}, {"a": {"b": None}, "e": {"g": {"h": None, "i": 1}}})
    assert user == {"a": {"c": [3], "b": None}, "d": 2, "e": {"g": {"h": None, "i": 1}}}
    # lists replaced, maps merged, a null deletes the chart's key (and a new map carries no nulls)
    assert coalesce(defaults, user) == {"a": {"c": [3]}, "d": 2, "e": {"f": 1, "g": {"i": 1}}}


# ------------------------------------------------------------------------------ hub_config
@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """hub_config/jupyterhub_config.py as the demo loads it (this project's spawner, culler on)."""
    tmp = tmp_path_factory.mktemp("hub")
    with pytest.MonkeyPatch.context() as mp:
        for name in ("GPUWS_STATE_DIR", "GPUWS_CULLER", "GPUWS_CULLER_CONFIG", "GPUWS_CULLER_ARGS"):
            mp.delenv(name, raising=False)
        for name in ("GPUWS_ATTRIBUTION_PROMETHEUS_URL", "GPUWS_CATALOG"):
            mp.delenv(name, raising=False)
        mp.setenv("KUBECONFIG", str(tmp / "kubeconfig"))
        mp.setenv("GPUWS_DATA_DIR", str(tmp / "data"))
        mp.setenv("GPUWS_SPAWNER", "gpuworkspace")
        kube_config = sys.modules.get("kubernetes_asyncio.config.kube_config")
        if kube_config is not None:  # the config file points kubernetes_asyncio at $KUBECONFIG
            mp.setattr(kube_config, "KUBE_CONFIG_DEFAULT_LOCATION", kube_config.KUBE_CONFIG_DEFAULT_LOCATION)
        return PyFileConfigLoader("jupyterhub_config.py", path=str(REPO / "hub_config")).load_config()


def _options(command: list[str]) -> tuple[str, dict[str, str]]:
    """(module after ``-m``, {--option: value}) of a ``python -m module --opt value ...`` command."""
    assert command[1] == "-m", command
    module, rest = command[2], command[3:]
    options: dict[str, str] = {}
    i = 0
    while i < len(rest):
        name = rest[i]
        assert name.startswith("--"), f"{module}: expected an option, got {name!r}"
        if i + 1 < len(rest) and not rest[i + 1].startswith("--"):
            options[name], i = rest[i + 1], i + 2
        else:
            options[name], i = "", i + 1
    return module, options


def _port(url: str | None) -> int | None:
    return urlparse(url).port if url else None


def _service_problems(
    name: str,
    ours: Mapping[str, Any],
    theirs: Mapping[str, Any],
    catalog: str,
    containers: Mapping[str, Mapping[str, Any]],
) -> Iterator[str]:
    where = f"hub.services.{name}"
    for key in ("oauth_no_confirm", "display"):
        if bool(ours.get(key)) != bool(theirs.get(key)):
            yield f"{where}.{key}: {ours.get(key)!r}, hub_config has {theirs.get(key)!r}"
    if _port(ours.get("url")) != _port(theirs.get("url")):
        yield f"{where}.url: port of {ours.get('url')!r} differs from hub_config's {theirs.get('url')!r}"
    if "command" not in ours:  # an external service: its Deployment runs the command
        deployment = containers.get(name)
        if deployment is None:
            yield f"{where}: no command, and no Deployment {name} in extra-manifests/ runs it"
            return
        where, ours = f"Deployment {name}", {**ours, "command": deployment["command"]}
    if ours.get("command", [None])[0] != "python3":
        yield f"{where}.command: start with python3 (the hub image's interpreter)"
    module, opts = _options(list(ours.get("command") or ["", "", ""]))
    their_module, their_opts = _options(list(theirs["command"]))
    if module != their_module:
        yield f"{where}.command: runs {module}, hub_config runs {their_module}"
    for option in their_opts.keys() - DEVCLUSTER_ONLY - opts.keys():
        yield f"{where}.command: lacks {option} (hub_config passes it)"
    for option in opts.keys() - their_opts.keys() - MAY_ADD:
        yield f"{where}.command: {option} is not in hub_config's command"
    yield from (f"{where}.command: {p}" for p in _option_value_problems(ours, opts, their_opts, catalog))


def _option_value_problems(
    ours: Mapping[str, Any], opts: Mapping[str, str], their_opts: Mapping[str, str], catalog: str
) -> Iterator[str]:
    listen_port = opts.get("--listen", "").rpartition(":")[2]
    if "url" in ours and str(_port(ours["url"])) != listen_port:
        yield f"--listen {opts.get('--listen')!r} is not the url's port"
    for option in ("--namespace", "--interval"):
        if option in their_opts and opts.get(option) != their_opts[option]:
            yield f"{option} {opts.get(option)!r}, hub_config has {their_opts[option]!r}"
    if "--namespace" in opts and opts["--namespace"] != WORKSPACE_NAMESPACE:
        yield f"--namespace {opts['--namespace']!r} is not {WORKSPACE_NAMESPACE}"
    if "--catalog" in opts and opts["--catalog"] != catalog:
        yield f"--catalog {opts['--catalog']!r} is not catalog_path {catalog!r}"
    if "--attribution-url" in their_opts:
        mine, other = urlparse(opts.get("--attribution-url", "")), urlparse(their_opts["--attribution-url"])
        if (mine.port, mine.path) != (other.port, other.path):
            yield f"--attribution-url {opts.get('--attribution-url')!r} is not the attribution service's"


def _role_problems(values: Mapping[str, Any], hub: Any) -> Iterator[str]:
    ours = values.get("hub", {}).get("loadRoles") or {}
    for role in hub.JupyterHub.load_roles:
        mine = ours.get(role["name"])
        if mine is None:
            yield f"hub.loadRoles.{role['name']}: missing (hub_config loads it)"
            continue
        for key in ("scopes", "services"):
            if sorted(mine.get(key) or []) != sorted(role.get(key) or []):
                yield f"hub.loadRoles.{role['name']}.{key}: {mine.get(key)}, hub_config has {role.get(key)}"
    for name in ours.keys() - {r["name"] for r in hub.JupyterHub.load_roles}:
        yield f"hub.loadRoles.{name}: not loaded by hub_config"


def _spawner_problems(values: Mapping[str, Any], hub: Any) -> Iterator[str]:
    config = values.get("hub", {}).get("config") or {}
    spawner_class = config.get("JupyterHub", {}).get("spawner_class")
    registered = {ep.name: ep for ep in entry_points(group="jupyterhub.spawners")}
    if spawner_class not in registered or registered[spawner_class].load() is not GPUWorkspaceSpawner:
        yield f"hub.config.JupyterHub.spawner_class: {spawner_class!r} is not this package's entry point"
    for section in ("KubeSpawner", "GPUWorkspaceSpawner"):
        configurable = set(GPUWorkspaceSpawner.class_trait_names(config=True))
        for trait in (config.get(section) or {}).keys() - configurable:
            yield f"hub.config.{section}.{trait}: no such configurable trait"
    namespace = (config.get("KubeSpawner") or {}).get("namespace")
    if namespace != hub.KubeSpawner.namespace or namespace != WORKSPACE_NAMESPACE:
        yield f"hub.config.KubeSpawner.namespace: {namespace!r}, hub_config has {hub.KubeSpawner.namespace!r}"
    if (values.get("cull") or {}).get("enabled", True) is not False:
        yield "cull.enabled: must be false: gpuworkspace-culler replaces z2jh's culler (two would race)"
    storage = (values.get("singleuser") or {}).get("storage") or {}
    if storage.get("type") != "none":
        yield "singleuser.storage.type: must be none: the spawner manages the home claims"


def _catalog_mount_problems(values: Mapping[str, Any]) -> Iterator[str]:
    hub_values = values.get("hub") or {}
    path = (hub_values.get("config") or {}).get("GPUWorkspaceSpawner", {}).get("catalog_path")
    mounts = [m for m in hub_values.get("extraVolumeMounts") or [] if m.get("mountPath") == path]
    if len(mounts) != 1:
        yield f"hub.extraVolumeMounts: nothing mounted at catalog_path {path!r}"
        return
    if mounts[0].get("subPath"):
        yield "hub.extraVolumeMounts: a subPath mount never sees ConfigMap updates"
    names = {v.get("name") for v in hub_values.get("extraVolumes") or []}
    if mounts[0]["name"] not in names:
        yield f"hub.extraVolumes: no volume {mounts[0]['name']!r} for the catalog mount"


def _network_problems(values: Mapping[str, Any]) -> Iterator[str]:
    hub_values = values.get("hub") or {}
    services = hub_values.get("services") or {}
    # services in the hub pod (url on the hub Service); external ones have a Service of their own
    ports = {
        _port(s["url"]) for s in services.values() if s.get("url") and urlparse(s["url"]).hostname == "hub"
    }
    own = {
        (d["metadata"]["name"], p["port"])
        for _, d in manifests()
        if d["kind"] == "Service"
        for p in d["spec"]["ports"]
    }
    for name, service in sorted(services.items()):
        url = urlparse(service.get("url") or "")
        if url.hostname not in (None, "hub") and (url.hostname, url.port) not in own:
            yield f"hub.services.{name}.url: no Service {url.hostname} with port {url.port} in extra-manifests/"
    exposed = {p.get("port") for p in (hub_values.get("service") or {}).get("extraPorts") or []}
    for port in sorted(ports - exposed):
        yield f"hub.service.extraPorts: a service listens on {port}, the hub Service does not expose it"
    ingress = (hub_values.get("networkPolicy") or {}).get("ingress") or []
    allowed = {p.get("port") for rule in ingress for p in rule.get("ports") or []}
    for port in sorted(ports - allowed):
        yield f"hub.networkPolicy.ingress: nothing lets the proxy reach port {port}"


def consistency_problems(
    values: Mapping[str, Any], hub: Any, containers: Mapping[str, Mapping[str, Any]] | None = None
) -> list[str]:
    """What a user would trip over: the values (and the services' Deployments, ``containers``: by
    default those of extra-manifests/) disagree with the hub_config the e2e tests run."""
    containers = deployments() if containers is None else containers
    problems: list[str] = []
    config = values.get("hub", {}).get("config") or {}
    catalog = (config.get("GPUWorkspaceSpawner") or {}).get("catalog_path", "")
    services = values.get("hub", {}).get("services") or {}
    theirs = {s["name"]: s for s in hub.JupyterHub.services}
    for name in sorted(theirs.keys() - services.keys()):
        if "url" not in theirs[name] and name in containers:  # no hub API, no URL: only a Deployment
            problems += _service_problems(name, {}, theirs[name], catalog, containers)
        else:
            problems.append(f"hub.services.{name}: missing (hub_config registers it)")
    for name in sorted(services.keys() - theirs.keys()):
        problems.append(f"hub.services.{name}: not registered by hub_config")
    for name in sorted(theirs.keys() & services.keys()):
        problems += _service_problems(name, services[name], theirs[name], catalog, containers)
    problems += _role_problems(values, hub)
    problems += _spawner_problems(values, hub)
    problems += _catalog_mount_problems(values)
    problems += _network_problems(values)
    return problems


@pytest.mark.parametrize("files", COMBOS)
def test_values_agree_with_hub_config(files: tuple[Any, ...], hub: Any) -> None:
    assert consistency_problems(user_values(*files), hub) == []


def test_hub_config_registers_what_the_values_mirror(hub: Any) -> None:
    names = {s["name"] for s in hub.JupyterHub.services}
    assert names == {
        "gpuworkspace-disks",
        "gpuworkspace-reclaimer",
        "gpuworkspace-attribution",
        "gpuworkspace-culler",
        "gpuworkspace-jobs",
    }
    culler = next(r for r in hub.JupyterHub.load_roles if r["name"] == "gpuworkspace-culler")
    assert sorted(culler["scopes"]) == sorted(
        [
            "list:users",
            "read:users:activity",
            "read:servers",
            "delete:servers",
            "admin:server_state",
            "read:users:groups",
        ]
    )


def _changed(path: str, value: Any) -> dict[str, Any]:
    """values.yaml with the dotted ``path`` set to ``value`` (``[n]`` indexes a list)."""
    values = copy.deepcopy(load_yaml(BASE))
    node: Any = values
    keys = [
        int(k[1:-1]) if re.fullmatch(r"\[\d+\]", k) else k for k in re.findall(r"\[\d+\]|[^.\[\]]+", path)
    ]
    for key in keys[:-1]:
        node = node[key]
    node[keys[-1]] = value
    return values


@pytest.mark.parametrize(
    ("path", "value", "expected"),
    [
        pytest.param("cull.enabled", True, "cull.enabled: must be false", id="z2jh-culler-on"),
        pytest.param(
            "hub.loadRoles.gpuworkspace-culler.scopes",
            ["list:users", "admin:servers"],
            "hub.loadRoles.gpuworkspace-culler.scopes",
            id="culler-scopes",
        ),
        pytest.param(
            "hub.services.gpuworkspace-attribution.url",
            "http://hub:10199",
            "gpuworkspace-attribution.url: port",
            id="service-port",
        ),
        pytest.param(
            "hub.services.gpuworkspace-culler.command.[2]",
            "gpuworkspace_spawner.services.culler",
            "runs gpuworkspace_spawner.services.culler",
            id="managed-service-module",
        ),
        pytest.param(
            "hub.services.gpuworkspace-disks.url",
            "http://gpuworkspace-disk:10101",
            "no Service gpuworkspace-disk with port 10101",
            id="external-url",
        ),
        pytest.param(
            "hub.config.GPUWorkspaceSpawner.catalog_dir", "/x", "no such configurable trait", id="trait"
        ),
        pytest.param("hub.config.JupyterHub.spawner_class", "kubespawner", "spawner_class", id="spawner"),
        pytest.param("singleuser.storage.type", "dynamic", "singleuser.storage.type", id="storage"),
        pytest.param("hub.extraVolumeMounts.[0].mountPath", "/etc/catalog", "catalog_path", id="mount"),
        pytest.param("hub.service.extraPorts", [], "does not expose it", id="ports"),
        pytest.param("hub.loadRoles.user.scopes", ["self"], "hub.loadRoles.user.scopes", id="user-role"),
    ],
)
def test_the_consistency_check_can_fail(path: str, value: Any, expected: str, hub: Any) -> None:
    problems = consistency_problems(_changed(path, value), hub)
    assert any(expected in p for p in problems), problems


def test_a_missing_service_is_reported(hub: Any) -> None:
    values = load_yaml(BASE)
    del values["hub"]["services"]["gpuworkspace-culler"]
    assert "hub.services.gpuworkspace-culler: missing (hub_config registers it)" in consistency_problems(
        values, hub
    )
    without_reclaimer = {k: v for k, v in deployments().items() if k != "gpuworkspace-reclaimer"}
    assert "hub.services.gpuworkspace-reclaimer: missing (hub_config registers it)" in consistency_problems(
        load_yaml(BASE), hub, without_reclaimer
    )


def _deployment_changed(name: str, index: int, value: str) -> dict[str, dict[str, Any]]:
    containers = copy.deepcopy(deployments())
    containers[name]["command"][index] = value
    return containers


@pytest.mark.parametrize(
    ("name", "index", "value", "expected"),
    [
        pytest.param(
            "gpuworkspace-disks",
            2,
            "gpuworkspace_spawner.services.disk.app",
            "Deployment gpuworkspace-disks.command: runs gpuworkspace_spawner.services.disk.app",
            id="service-module",
        ),
        pytest.param("gpuworkspace-reclaimer", 4, "jhub", "--namespace 'jhub'", id="namespace"),
        pytest.param(
            "gpuworkspace-attribution", 8, "0.0.0.0:10199", "is not the url's port", id="listen-port"
        ),
    ],
)
def test_the_deployment_check_can_fail(name: str, index: int, value: str, expected: str, hub: Any) -> None:
    problems = consistency_problems(load_yaml(BASE), hub, _deployment_changed(name, index, value))
    assert any(expected in p for p in problems), problems
