"""JupyterHub configuration for the local demo and the end-to-end tests.

Run it with ``jupyterhub -f hub_config/jupyterhub_config.py`` (``make demo`` and
``hub_config/demo.py`` do that for you, after starting the devcluster and the mock OIDC provider).
Every setting below is what a production deployment also has to decide; the values are the local
ones. Everything that differs between machines comes from an environment variable:

=====================  ==========================================  ===============================
variable               meaning                                     default
=====================  ==========================================  ===============================
GPUWS_STATE_DIR        the devcluster's state directory; the hub   ``<repo>/.state/devcluster``
                       talks to Kubernetes through
                       ``$GPUWS_STATE_DIR/kubeconfig``
GPUWS_CATALOG          WorkspaceProfile YAML (a file or directory) ``hub_config/catalog``
GPUWS_PUBLIC_PORT      the port users open (the proxy's)           ``8000``
GPUWS_HUB_PORT         the hub's own port (behind the proxy)       ``8081``
GPUWS_PROXY_API_PORT   configurable-http-proxy's REST API port     ``8001``
GPUWS_OIDC_URL         the OpenID Connect issuer                   ``http://127.0.0.1:9480``
GPUWS_DATA_DIR         where jupyterhub.sqlite, the cookie secret  ``<repo>/.state/hub``
                       and the proxy's pid file live
GPUWS_SPAWNER          ``gpuworkspace`` (this project's spawner)   ``gpuworkspace``
                       or ``kubespawner`` (plain KubeSpawner with
                       an equivalent profile list)
GPUWS_DISKS_PORT       the disk admin service's port (loopback)    ``10101``
GPUWS_DISK_WARN_       used share (bytes or inodes) at which the   ``0.9``
THRESHOLD              home page warns a disk is near full
GPUWS_ATTRIBUTION_     the GPU attribution service's port          ``10102``
PORT                   (loopback)
GPUWS_ATTRIBUTION_     its collection cycle in seconds             ``15``
INTERVAL
GPUWS_ATTRIBUTION_     a Prometheus to read GPU/CPU figures from   unset: scrape dcgm-exporter,
PROMETHEUS_URL         instead of scraping                         the kubelets and agents directly
GPUWS_ATTRIBUTION_     extra command-line arguments for it         unset
ARGS                   (shell words; the tests use it)
GPUWS_CULLER           ``0`` to not run the idle culler            ``1``
GPUWS_CULLER_PORT      the idle culler's port (loopback)           ``10103``
GPUWS_RECLAIMER_       the reclaimer's /metrics port (loopback)    ``10104``
METRICS_PORT
GPUWS_CULLER_INTERVAL  its cycle in seconds                        ``300``
GPUWS_CULLER_CONFIG    a traitlets config file for it              unset: the defaults
                       (docs/reference/culler.md)
GPUWS_CULLER_ARGS      extra command-line arguments for it         unset
                       (shell words; the tests use it)
GPUWS_NAMED_SERVER_    the most named servers a user may have      ``20``
LIMIT                  (running or stopped; 0: no limit)
GPUWS_MAX_DISKS_PER_   the most workspace disks (active or         ``20``
USER                   retained) one user may hold (0: no limit)
GPUWS_MAX_DISKS_TOTAL  the most workspace disks in the namespace   ``500``
                       (0: no limit)
GPUWS_DISKS_           the kubeconfig of the disk service, the     ``$KUBECONFIG``
KUBECONFIG,            reclaimer, the attribution service: each
GPUWS_RECLAIMER_       its own identity (tests/e2e_rbac gives each
KUBECONFIG,            its own ServiceAccount)
GPUWS_ATTRIBUTION_
KUBECONFIG
JUPYTERHUB_CRYPT_KEY   when set, auth state (the OIDC tokens) is   unset: auth state is not kept
                       stored encrypted with this key
=====================  ==========================================  ===============================
"""

from __future__ import annotations

import os
import shlex
import sys
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

c = get_config()  # type: ignore[name-defined]  # provided by JupyterHub when it loads this file

HERE = Path(__file__).resolve().parent
REPO = HERE.parent


def _env(name: str, default: str) -> str:
    """An environment variable, or the default when it is unset or empty."""
    return os.environ.get(name) or default


STATE_DIR = Path(_env("GPUWS_STATE_DIR", str(REPO / ".state" / "devcluster"))).resolve()
CATALOG = Path(_env("GPUWS_CATALOG", str(HERE / "catalog"))).resolve()
PUBLIC_PORT = int(_env("GPUWS_PUBLIC_PORT", "8000"))
HUB_PORT = int(_env("GPUWS_HUB_PORT", "8081"))
PROXY_API_PORT = int(_env("GPUWS_PROXY_API_PORT", "8001"))
OIDC_URL = _env("GPUWS_OIDC_URL", "http://127.0.0.1:9480").rstrip("/")
DATA_DIR = Path(_env("GPUWS_DATA_DIR", str(REPO / ".state" / "hub"))).resolve()
SPAWNER = _env("GPUWS_SPAWNER", "gpuworkspace")

# The default single-user image (the sample catalog's). Pin images by digest, never by a moving tag.
# The devcluster's kubelet runs any docker-stacks notebook image (whatever the digest) as a local
# jupyterhub-singleuser process; on a real cluster, put the digest you have tested here.
NOTEBOOK_IMAGE = (
    "quay.io/jupyter/base-notebook@sha256:07ada0bb13ec7286cdaaeab442f196959e1330993fa72ec0503e0bc429dbf29f"
)

DATA_DIR.mkdir(parents=True, exist_ok=True)

# --------------------------------------------------------------------------------- Kubernetes
# KubeSpawner (and so our spawner) loads the client configuration from $KUBECONFIG when it does not
# run inside a pod. The devcluster writes an admin kubeconfig into its state directory. An explicit
# GPUWS_STATE_DIR wins over an inherited KUBECONFIG; otherwise an inherited KUBECONFIG is kept.
if "GPUWS_STATE_DIR" in os.environ or "KUBECONFIG" not in os.environ:
    os.environ["KUBECONFIG"] = str(STATE_DIR / "kubeconfig")
# JupyterHub imports every registered spawner (our "gpuworkspace" entry point, so KubeSpawner and
# kubernetes_asyncio) before it reads this file, and kubernetes_asyncio reads $KUBECONFIG once, at
# import. Tell it again; demo.py and the test harness also put KUBECONFIG in the hub's environment.
_kube_config = sys.modules.get("kubernetes_asyncio.config.kube_config")
if _kube_config is not None:
    _kube_config.KUBE_CONFIG_DEFAULT_LOCATION = os.environ["KUBECONFIG"]

# ------------------------------------------------------------------------------ network layout
# Users open the proxy (configurable-http-proxy, which JupyterHub starts and stops itself).
c.JupyterHub.bind_url = f"http://127.0.0.1:{PUBLIC_PORT}"
# The proxy's own REST API, which only the hub talks to.
c.ConfigurableHTTPProxy.api_url = f"http://127.0.0.1:{PROXY_API_PORT}"
# The proxy binary installed by `npm ci` (package.json) into node_modules.
c.ConfigurableHTTPProxy.command = [str(REPO / "node_modules" / ".bin" / "configurable-http-proxy")]
# Where the proxy's pid file goes (by default the current directory).
c.ConfigurableHTTPProxy.pid_file = str(DATA_DIR / "jupyterhub-proxy.pid")
# The hub listens on loopback: the devcluster's "pods" are local processes on loopback addresses
# (127.10.x.y and so on), so they reach the hub there. In a real cluster this is 0.0.0.0 and
# hub_connect_ip is the hub Service's name.
c.JupyterHub.hub_ip = "127.0.0.1"
c.JupyterHub.hub_port = HUB_PORT
# The address single-user servers use to call the hub API (JUPYTERHUB_API_URL in the pod).
c.JupyterHub.hub_connect_ip = "127.0.0.1"

# ------------------------------------------------------------------------------------- storage
# The hub's database and cookie secret. The hub keeps only names in its database; the workspaces
# themselves live in Kubernetes ("Kubernetes is the database").
c.JupyterHub.db_url = f"sqlite:///{DATA_DIR / 'jupyterhub.sqlite'}"
c.JupyterHub.cookie_secret_file = str(DATA_DIR / "jupyterhub_cookie_secret")
# Workspaces outlive the hub: stopping or restarting the hub leaves pods running, as on Z2JH. Stop
# servers from the hub (or the admin page) before taking the cluster down.
c.JupyterHub.cleanup_servers = False

# ------------------------------------------------------------------------------ authentication
# Users log in with OpenID Connect. Locally the issuer is oidc-provider-mock (started by demo.py):
# its authorization page has one button per predefined user (alice, bob, admin), and any other
# subject typed into its form logs in as a new user without groups.
c.JupyterHub.authenticator_class = "generic-oauth"
c.GenericOAuthenticator.login_service = "the mock OIDC provider"
c.GenericOAuthenticator.client_id = "jupyterhub"  # the mock accepts any client id and secret
c.GenericOAuthenticator.client_secret = "jupyterhub-secret"
c.GenericOAuthenticator.oauth_callback_url = f"http://127.0.0.1:{PUBLIC_PORT}/hub/oauth_callback"
c.GenericOAuthenticator.authorize_url = f"{OIDC_URL}/oauth2/authorize"
c.GenericOAuthenticator.token_url = f"{OIDC_URL}/oauth2/token"
c.GenericOAuthenticator.userdata_url = f"{OIDC_URL}/userinfo"
# "profile" makes the provider release preferred_username; "groups" is a custom claim it always sends.
c.GenericOAuthenticator.scope = ["openid", "profile", "email"]


def _username(userinfo: dict[str, Any]) -> str:
    """The JupyterHub user name: preferred_username when the provider sends one, else the subject."""
    return str(userinfo.get("preferred_username") or userinfo["sub"])


c.GenericOAuthenticator.username_claim = _username
# The OIDC "groups" claim becomes the user's JupyterHub groups at every login (profiles restricted
# to a group, such as gpu-exclusive for gpu-users, read these). The userinfo response is stored under
# auth_state["oauth_user"]; a user without the claim gets no groups instead of a logged error.
c.GenericOAuthenticator.manage_groups = True


def _groups(auth_state: dict[str, Any]) -> list[str]:
    return list((auth_state.get("oauth_user") or {}).get("groups") or [])


c.GenericOAuthenticator.auth_state_groups_key = _groups
# Everyone the provider vouches for may log in; restrict with allowed_groups in production.
c.GenericOAuthenticator.allow_all = True
c.Authenticator.admin_users = {"admin"}
# Keep the OIDC tokens (encrypted) only when a key is provided; group management does not need them.
c.Authenticator.enable_auth_state = bool(os.environ.get("JUPYTERHUB_CRYPT_KEY"))

# ----------------------------------------------------------------------------------- spawning
# Users may run several named workspaces (/user/alice/<name>/) besides the default one, up to a limit:
# past it JupyterHub answers 400 "already has the maximum of N named servers" (docs/how-to/limits.md).
c.JupyterHub.allow_named_servers = True
c.JupyterHub.named_server_limit_per_user = int(_env("GPUWS_NAMED_SERVER_LIMIT", "20"))

# Settings for KubeSpawner apply to GPUWorkspaceSpawner too (it is a subclass).
c.KubeSpawner.namespace = "gpu-workspaces"  # where workspace pods and disks are created
c.KubeSpawner.image = NOTEBOOK_IMAGE  # the default image; profiles may choose another
c.KubeSpawner.image_pull_policy = "IfNotPresent"
# How long a start may take before the hub gives up: image pulls, disk provisioning and scheduling
# (start_timeout), then until the server answers HTTP (http_timeout).
c.KubeSpawner.start_timeout = 120
c.KubeSpawner.http_timeout = 60


def _kubespawner_profile(
    slug: str, name: str, requests: dict[str, str], limits: dict[str, str], pool: str, home: str
) -> dict[str, Any]:
    """One KubeSpawner profile with the shape of the catalog profile of the same slug."""
    extra = {k: v for k, v in limits.items() if k.startswith("nvidia.com/")}
    override: dict[str, Any] = {
        "cpu_guarantee": float(requests["cpu"]),
        "cpu_limit": float(limits["cpu"]),
        "mem_guarantee": requests["memory"].replace("Gi", "G"),  # KubeSpawner's G means GiB
        "mem_limit": limits["memory"].replace("Gi", "G"),
        "node_selector": {"gpuworkspace.dev/pool": pool},
        "storage_capacity": home,
    }
    if extra:
        override["extra_resource_guarantees"] = extra
        override["extra_resource_limits"] = extra
        override["tolerations"] = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    return {"display_name": name, "slug": slug, "kubespawner_override": override}


# The sample catalog's four profiles (hub_config/catalog), as a KubeSpawner profile list.
KUBESPAWNER_PROFILES = [
    _kubespawner_profile(
        "cpu-small",
        "CPU (small)",
        {"cpu": "1", "memory": "2Gi"},
        {"cpu": "2", "memory": "4Gi"},
        "cpu",
        "10Gi",
    )
    | {"default": True, "description": "No GPU."},
    _kubespawner_profile(
        "gpu-exclusive",
        "GPU (one whole H100)",
        {"cpu": "8", "memory": "64Gi"},
        {"cpu": "16", "memory": "96Gi", "nvidia.com/gpu": "1"},
        "gpu",
        "200Gi",
    )
    | {"description": "For members of gpu-users."},
    _kubespawner_profile(
        "gpu-shared",
        "GPU (time-sliced share)",
        {"cpu": "2", "memory": "8Gi"},
        {"cpu": "4", "memory": "16Gi", "nvidia.com/gpu.shared": "1"},
        "gpu",
        "20Gi",
    ),
    _kubespawner_profile(
        "gpu-mig",
        "GPU (MIG slice, 10 GB)",
        {"cpu": "4", "memory": "16Gi"},
        {"cpu": "8", "memory": "32Gi", "nvidia.com/mig-1g.10gb": "1"},
        "gpu",
        "50Gi",
    ),
]


def _profiles_for(spawner: Any) -> list[dict[str, Any]]:
    """KubeSpawner calls this per spawn: gpu-exclusive only for members of gpu-users, as in the catalog."""
    groups = {group.name for group in spawner.user.groups}
    return [p for p in KUBESPAWNER_PROFILES if p["slug"] != "gpu-exclusive" or "gpu-users" in groups]


def _use_kubespawner() -> None:
    """Plain KubeSpawner with a profile list shaped like the sample catalog's profiles."""
    c.JupyterHub.spawner_class = "kubespawner.KubeSpawner"
    # Open JupyterLab (the catalog's IDE choice does this for GPUWorkspaceSpawner).
    c.KubeSpawner.default_url = "/lab"
    # A home disk per server on ceph-rbd, like the catalog's: it survives stops.
    c.KubeSpawner.storage_pvc_ensure = True
    c.KubeSpawner.pvc_name_template = "home-{user_server}"
    c.KubeSpawner.storage_class = "ceph-rbd"
    c.KubeSpawner.storage_capacity = "10Gi"
    c.KubeSpawner.storage_access_modes = ["ReadWriteOnce"]
    c.KubeSpawner.volumes = [{"name": "home", "persistentVolumeClaim": {"claimName": "{pvc_name}"}}]
    c.KubeSpawner.volume_mounts = [{"name": "home", "mountPath": "/home/jovyan"}]
    c.KubeSpawner.profile_list = _profiles_for


def _use_gpuworkspace() -> None:
    """This project's spawner, reading its profiles from the WorkspaceProfile catalog."""
    registered = {ep.name for ep in entry_points(group="jupyterhub.spawners")}
    # The entry point name once the package registers it; the class path works either way.
    c.JupyterHub.spawner_class = (
        "gpuworkspace" if "gpuworkspace" in registered else "gpuworkspace_spawner.spawner.GPUWorkspaceSpawner"
    )
    c.GPUWorkspaceSpawner.catalog_path = str(CATALOG)  # a YAML file or a directory of them
    # The home page lists each workspace's state (Running, Stopped, Retained until ..., Degraded: why).
    import gpuworkspace_spawner  # noqa: PLC0415 -- only in this mode

    c.JupyterHub.template_paths = [str(Path(gpuworkspace_spawner.__file__).parent / "templates")]
    # Refuse to start on an invalid catalog, with the errors, instead of failing at the first spawn.
    from gpuworkspace_spawner import load_catalog_or_exit  # noqa: PLC0415 -- only in this mode

    load_catalog_or_exit(str(CATALOG))
    c.GPUWorkspaceSpawner.retention_days = 30  # how long a deleted workspace's disk is kept
    # Retained disks count: a start that would create a disk past either limit is refused (403).
    c.GPUWorkspaceSpawner.max_disks_per_user = int(_env("GPUWS_MAX_DISKS_PER_USER", "20"))
    c.GPUWorkspaceSpawner.max_disks_total = int(_env("GPUWS_MAX_DISKS_TOTAL", "500"))
    _register_disk_service()
    _register_reclaimer()
    _register_attribution_service()
    _register_jobs_service()
    if _env("GPUWS_CULLER", "1") != "0":
        _register_culler_service()
    _workspace_in_jupyterlab()
    # In a pod, JupyterHub would start these without KUBERNETES_SERVICE_HOST/PORT (it passes only PATH,
    # LANG, its JUPYTERHUB_* and each service's environment): pass them on, or in-cluster config fails.
    from gpuworkspace_spawner.services.hubenv import pass_in_cluster_environment  # noqa: PLC0415

    c.JupyterHub.services = pass_in_cluster_environment(c.JupyterHub.services, os.environ)


def _kubeconfig(service: str) -> dict[str, str]:
    """A service's Kubernetes identity outside a pod: $GPUWS_<SERVICE>_KUBECONFIG, else $KUBECONFIG."""
    return {"KUBECONFIG": _env(f"GPUWS_{service}_KUBECONFIG", os.environ["KUBECONFIG"])}


def _add_service(service: dict[str, Any], *, roles: tuple[dict[str, Any], ...] = ()) -> None:
    """Append a hub service (and roles for it) to what earlier configuration set."""
    c.JupyterHub.services = [*(c.JupyterHub.services if "services" in c.JupyterHub else []), service]
    if roles:
        c.JupyterHub.load_roles = [*_roles(), *roles]


def _roles() -> list[dict[str, Any]]:
    return list(c.JupyterHub.load_roles) if "load_roles" in c.JupyterHub else []


def _let_users_open(service: str) -> None:
    """Give every user access:services for ``service``, so a browser can log in to it with OAuth."""
    roles = _roles()
    user_role = next((r for r in roles if r.get("name") == "user"), None)
    if user_role is None:
        user_role = {"name": "user", "scopes": ["self"]}
        roles.append(user_role)
    user_role["scopes"] = [*user_role["scopes"], f"access:services!service={service}"]
    c.JupyterHub.load_roles = roles


def _register_disk_service() -> None:
    """The disk admin API (docs/reference/disk-api.md) as a managed service at /services/gpuworkspace-disks/.

    Least privilege: the service gets no hub scopes at all. It identifies callers by asking the hub
    about *their* token and authorizes from that token's scopes (admin:servers for changes, read:servers
    for reading a user's disks). Users get access:services for it only so that a browser can log in to it
    with OAuth; the API itself works with any hub API token.
    """
    port = int(_env("GPUWS_DISKS_PORT", "10101"))
    service = {
        "name": "gpuworkspace-disks",
        "url": f"http://127.0.0.1:{port}",
        "command": [
            sys.executable,
            "-m",
            "gpuworkspace_spawner.services.disks.app",
            "--namespace",
            "gpu-workspaces",
            "--catalog",
            str(CATALOG),
            "--warn-threshold",
            _env("GPUWS_DISK_WARN_THRESHOLD", "0.9"),
        ],
        "environment": _kubeconfig("DISKS"),
        "oauth_no_confirm": True,
    }
    _add_service(service)
    _let_users_open("gpuworkspace-disks")


def _register_jobs_service() -> None:
    """The jobs API (docs/reference/jobs-api.md) as a managed service at /services/gpuworkspace-jobs/:
    hand a notebook or script to the cluster's queue (Kueue) as a batch/v1 Job.

    Least privilege: its Kubernetes identity ($GPUWS_JOBS_KUBECONFIG; in a cluster the gpuworkspace-jobs
    ServiceAccount, helm-values/extra-manifests/63-gpuworkspace-jobs.yaml) may create Jobs, snapshots and
    claims in the workspace namespace and nothing more; its one hub scope, read:users:groups, reads a
    caller's groups when the caller's token does not carry them (job profiles' access.groups). Callers
    use their own hub token; users get access:services for it so their tokens are accepted.
    """
    port = int(_env("GPUWS_JOBS_PORT", "10105"))
    service = {
        "name": "gpuworkspace-jobs",
        "url": f"http://127.0.0.1:{port}",
        "command": [
            sys.executable,
            "-m",
            "gpuworkspace_spawner.services.jobs.app",
            "--namespace",
            "gpu-workspaces",
            "--catalog",
            str(CATALOG),
        ],
        "environment": _kubeconfig("JOBS"),
        "oauth_no_confirm": True,
    }
    role = {"name": "gpuworkspace-jobs", "scopes": ["read:users:groups"], "services": ["gpuworkspace-jobs"]}
    _add_service(service, roles=(role,))
    _let_users_open("gpuworkspace-jobs")
    _notebook_jobs_in_jupyterlab(f"http://127.0.0.1:{PUBLIC_PORT}/services/gpuworkspace-jobs/api/v1")


def _notebook_jobs_in_jupyterlab(jobs_url: str) -> None:
    """JupyterLab's "Create Notebook Job" (jupyter-scheduler) submits to the jobs API
    (docs/how-to/notebook-jobs.md): our backend in the single-user server, its URL, and the one scope
    the server's own token needs to call it.

    Spawner.server_token_scopes: JupyterHub 4+ gives $JUPYTERHUB_API_TOKEN the `server` role's scopes
    (users:activity!user, access:servers!server) unless this is set, and only those of the requested
    scopes the user holds (every user holds access:services!service=gpuworkspace-jobs above). The
    service accepts the token for that user's own jobs only. Nothing broader: not `inherit`.
    """
    c.KubeSpawner.server_token_scopes = [
        "users:activity!user",
        "access:servers!server",
        "access:services!service=gpuworkspace-jobs",
    ]
    c.KubeSpawner.environment = {**dict(c.KubeSpawner.get("environment", {})), "GPUWS_JOBS_URL": jobs_url}
    backend = "gpuworkspace_spawner.scheduler.backend"
    # KubeSpawner passes args only with an explicit cmd (get_pod_manifest: "Ignoring arguments when
    # using implicit command from image"); jupyterhub-singleuser is z2jh's default singleuser.cmd, and
    # what docker-stacks' start-notebook.py runs under a hub. It is the container's args: the image's
    # entrypoint (tini, start.sh) stays.
    if not c.KubeSpawner.get("cmd"):
        c.KubeSpawner.cmd = ["jupyterhub-singleuser"]
    c.KubeSpawner.args = [
        *list(c.KubeSpawner.get("args", [])),
        f"--SchedulerApp.scheduler_class={backend}.GPUWorkspaceScheduler",
        f"--SchedulerApp.environment_manager_class={backend}.JobProfiles",
        f"--SchedulerApp.job_files_manager_class={backend}.JobOutputs",
    ]


def _register_reclaimer() -> None:
    """gpuworkspace-reclaimer as a managed service (no HTTP): deletes retained disks after retention.

    It talks only to Kubernetes (list/watch/delete persistentvolumeclaims and datavolumes, list pods,
    create events in the workspace namespace), never to the hub, so it gets no hub scopes.
    """
    service = {
        "name": "gpuworkspace-reclaimer",
        "command": [
            sys.executable,
            "-m",
            "gpuworkspace_spawner.services.reclaimer",
            "--namespace",
            "gpu-workspaces",
            # its own /metrics (passes, failures, overdue disks: docs/reference/metrics.md)
            "--metrics-listen",
            f"127.0.0.1:{_env('GPUWS_RECLAIMER_METRICS_PORT', '10104')}",
        ],
        "environment": _kubeconfig("RECLAIMER"),
    }
    _add_service(service)


def _register_attribution_service() -> None:
    """GPU attribution (docs/reference/attribution-api.md) as a managed service at
    /services/gpuworkspace-attribution/: who uses which GPU, CPU and memory, with a dashboard linked
    from the home page.

    Least privilege: the service's own token gets one role with only what it calls the hub for,
    group membership (group totals, and whom a user may rank among):

    - ``list:groups``: list the hub's groups (``GET /hub/api/groups``);
    - ``read:groups``: see each group's members in that list.

    It reads no users, servers or tokens of its own: callers are identified by asking the hub about
    *their* token, and the answers are filtered by that token's scopes (``admin:servers``: everyone;
    ``read:servers!user=<u>`` or the user's own OAuth login: that user). Users get
    ``access:services!service=gpuworkspace-attribution`` so a browser can log in to the dashboard.
    """
    name = "gpuworkspace-attribution"
    port = int(_env("GPUWS_ATTRIBUTION_PORT", "10102"))
    command = [
        sys.executable,
        "-m",
        "gpuworkspace_spawner.services.attribution",
        "--interval",
        _env("GPUWS_ATTRIBUTION_INTERVAL", "15"),
    ]
    if os.environ.get("GPUWS_ATTRIBUTION_PROMETHEUS_URL"):
        command += ["--prometheus-url", os.environ["GPUWS_ATTRIBUTION_PROMETHEUS_URL"]]
    command += shlex.split(os.environ.get("GPUWS_ATTRIBUTION_ARGS", ""))
    service = {
        "name": name,
        "url": f"http://127.0.0.1:{port}",
        "command": command,
        "environment": _kubeconfig("ATTRIBUTION"),
        "oauth_no_confirm": True,
        "display": True,  # listed in the hub's Services menu (the home page links it as "GPU usage")
    }
    role = {
        "name": name,
        "description": "Read group membership for the GPU attribution service's group totals",
        "scopes": ["list:groups", "read:groups"],
        "services": [name],
    }
    _add_service(service, roles=(role,))
    _let_users_open(name)


# The idle culler's role (see _register_culler_service for why each one).
CULLER_SCOPES = [
    "list:users",
    "read:users:activity",
    "read:servers",
    "delete:servers",
    "admin:server_state",
    "read:users:groups",
]


def _service_url(name: str) -> str | None:
    """The direct URL of a service registered above, or None."""
    services = c.JupyterHub.services if "services" in c.JupyterHub else []
    return next((s.get("url") for s in services if s.get("name") == name), None)


def _register_culler_service() -> None:
    """The idle culler (docs/how-to/idle-culler.md) as a managed service at /services/gpuworkspace-culler/:
    warns users in stages, then stops idle servers through the hub API (never removing them, so every
    disk is kept); a status page and JSON API list the upcoming stops with their reasons.

    Least privilege: the service's own token gets one role with only what a cycle needs:

    - ``list:users``: list the users and their running servers (``GET /hub/api/users?state=ready``);
    - ``read:users:activity``: each user's and server's ``last_activity`` in that list;
    - ``read:servers``: each server's ``started``, ``url`` and ``user_options`` (the profile) in that list;
    - ``delete:servers``: stop a server (``DELETE /hub/api/users/<u>/servers/<s>``; never ``remove``);
    - ``admin:server_state``: each server's state in that list, which holds the server's own probe
      token (``gpuworkspace_spawner.probecredentials``: scope ``access:servers!server=<user>/<server>``,
      issued by the spawner at each start, revoked at the stop). The probes of ``/api/status``,
      ``/api/kernels``, ``/api/terminals`` and, with save-first, the checkpoints carry that token, never
      the culler's own: they end in user code, and the token opens that one server only;
    - ``read:users:groups``: each user's groups, for ``exempt_groups`` (without it, group exemptions
      would silently never match, and an exempt user's server would be stopped).

    It gets no ``access:servers``: its own token opens no single-user server. Its one ``admin:*``
    scope is ``admin:server_state`` (read the servers' state); it cannot start servers, read tokens or
    change users. Users get
    ``access:services!service=gpuworkspace-culler`` so that their browser can log in to it: the home
    page's banner reads their own warnings from ``api/v1/notices``, and the status page shows their
    servers.
    """
    name = "gpuworkspace-culler"
    port = int(_env("GPUWS_CULLER_PORT", "10103"))
    command = [
        sys.executable,
        "-m",
        "gpuworkspace_spawner.services.culler.app",
        # single-user servers are reached through the proxy, as users reach them
        "--proxy-url",
        c.JupyterHub.bind_url,
        "--interval",
        _env("GPUWS_CULLER_INTERVAL", "300"),
        # each profile's session.idleTimeout / maxDuration, as its spawn-form card promises
        "--catalog",
        str(CATALOG),
    ]
    attribution = _service_url("gpuworkspace-attribution")
    if attribution:  # GPU utilisation and idle-allocated GPU time come from the attribution service
        command += ["--attribution-url", f"{attribution}/services/gpuworkspace-attribution/"]
    if any(s.get("name") == "gpuworkspace-jobs" for s in c.JupyterHub.services):
        base = c.JupyterHub.base_url if isinstance(c.JupyterHub.base_url, str) else "/"  # unset: a lazy value
        jobs = f"{base.rstrip('/')}/services/gpuworkspace-jobs/"
        command += [  # warnings say where long runs go instead
            "--job-handoff",
            "To keep a long run going, submit it as a job (JupyterLab: the notebook's Create a notebook job "
            f"button; or {jobs}api/v1/jobs): it queues for the cluster's GPUs and keeps running after this "
            "workspace stops.",
        ]
    if os.environ.get("GPUWS_CULLER_CONFIG"):
        command += ["--config", os.environ["GPUWS_CULLER_CONFIG"]]
    command += shlex.split(os.environ.get("GPUWS_CULLER_ARGS", ""))
    service = {
        "name": name,
        "url": f"http://127.0.0.1:{port}",
        "command": command,
        "oauth_no_confirm": True,  # the home page's banner logs in without showing a page
        "display": True,  # listed in the hub's Services menu: the status page
    }
    role = {
        "name": name,
        "description": "Find idle servers, probe them through the proxy and stop them (keeping their disks)",
        "scopes": CULLER_SCOPES,
        "services": [name],
    }
    _add_service(service, roles=(role,))
    _let_users_open(name)


def _workspace_in_jupyterlab() -> None:
    """The workspace's figures and the culler's warnings inside JupyterLab (docs/reference/jupyterlab-extension.md):
    the server extension gpuworkspace_spawner.labextension asks the attribution service and the culler
    with the server's own token, for this workspace only.

    The token gets ``access:services!service=<name>`` for each of the two services, nothing broader; they
    accept it for the token's own user only (403 for anyone else's workspace). ``JUPYTER_CONFIG_PATH``
    is the demo's stand-in for the image's own configuration (docs/reference/image-contract.md): the
    devcluster's pods run this host's Python, so the package's ``jupyter-config`` directory enables the
    extension and turns JupyterLab's news and update checks off, as an image built by the contract does;
    ``JUPYTER_PATH`` likewise adds the prebuilt front end (``jupyter-data``: the status-bar item and the
    notifications).
    """
    from gpuworkspace_spawner.labextension import CONFIG_DIR, DATA_DIR  # noqa: PLC0415 -- only in this mode

    proxy = f"http://127.0.0.1:{PUBLIC_PORT}"
    services = {s.get("name") for s in c.JupyterHub.services}
    env = {"JUPYTER_CONFIG_PATH": str(CONFIG_DIR), "JUPYTER_PATH": str(DATA_DIR)}
    scopes = list(c.KubeSpawner.get("server_token_scopes", []))
    for name, variable in (
        ("gpuworkspace-attribution", "GPUWS_ATTRIBUTION_URL"),
        ("gpuworkspace-culler", "GPUWS_CULLER_URL"),
    ):
        if name in services:
            env[variable] = f"{proxy}/services/{name}/api/v1"
            scopes.append(f"access:services!service={name}")
    c.KubeSpawner.server_token_scopes = scopes
    c.KubeSpawner.environment = {**dict(c.KubeSpawner.get("environment", {})), **env}


if SPAWNER == "kubespawner":
    _use_kubespawner()
elif SPAWNER == "gpuworkspace":
    _use_gpuworkspace()
else:
    raise ValueError(f"GPUWS_SPAWNER must be 'gpuworkspace' or 'kubespawner', not {SPAWNER!r}")
