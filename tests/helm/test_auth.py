"""helm-values/: production login is OIDC (GenericOAuthenticator), never the chart's dummy authenticator.

:func:`auth_problems` checks the user values of every file combination the docs name: the
authenticator class they select (coalesced with the chart's default, which is ``dummy``), that the
client secret comes from a Kubernetes Secret and is nowhere inline, and that the OIDC settings are
complete, by instantiating the installed GenericOAuthenticator with them (its own validators run:
``allowed_groups`` without ``manage_groups`` is refused, for example). A login is then run through
the real authenticator, with the identity provider's HTTP answers simulated: who gets in, with which
hub groups, who is admin, which catalog profiles each one sees, and what secret the token request
carries.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from importlib.metadata import entry_points
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest
import yaml
from jupyterhub.auth import Authenticator
from oauthenticator.generic import GenericOAuthenticator
from oauthenticator.oauth2 import _serialize_state
from traitlets import TraitError
from traitlets.config import Config

from gpuworkspace_spawner.catalog import load_catalog
from gpuworkspace_spawner.catalog.options import accessible_profiles
from tests.helm import BASE, HELM, REPO, combinations, load_yaml, user_values

COMBOS = [pytest.param(files, id=name) for name, files in combinations()]
# z2jh's values.yaml: hub.config.JupyterHub.authenticator_class when the user values do not set it.
CHART_DEFAULT_AUTHENTICATOR = "dummy"
# GenericOAuthenticator's client_secret default reads this variable (oauthenticator/oauth2.py).
SECRET_ENV = "OAUTH_CLIENT_SECRET"
# The hub.config sections that configure a GenericOAuthenticator (its class and its parents).
AUTH_SECTIONS = ("Authenticator", "OAuthenticator", "GenericOAuthenticator")
REQUIRED = ("client_id", "oauth_callback_url", "authorize_url", "token_url", "username_claim")


def resolve_authenticator(name: str) -> type[Any] | None:
    """The class JupyterHub loads for ``authenticator_class``: an entry point name or a dotted path."""
    registered = {ep.name: ep for ep in entry_points(group="jupyterhub.authenticators")}
    if name in registered:
        loaded: type[Any] = registered[name].load()
        return loaded
    module, _, attr = name.rpartition(".")
    if not module:
        return None
    try:
        return getattr(__import__(module, fromlist=[attr]), attr)  # type: ignore[no-any-return]
    except (ImportError, AttributeError):
        return None


def _strings(value: Any, where: str) -> Iterator[tuple[str, str, Any]]:
    """(path, key, value) of every mapping entry under ``value``."""
    if isinstance(value, Mapping):
        for key, item in value.items():
            yield where, str(key), item
            yield from _strings(item, f"{where}.{key}")
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from _strings(item, f"{where}[{i}]")


def _class_problems(config: Mapping[str, Any]) -> Iterator[str]:
    name = (config.get("JupyterHub") or {}).get("authenticator_class") or CHART_DEFAULT_AUTHENTICATOR
    cls = resolve_authenticator(str(name))
    if cls is None or not issubclass(cls, GenericOAuthenticator):
        what = f"{cls.__module__}.{cls.__qualname__}" if cls else "not an installed authenticator"
        yield (
            f"hub.config.JupyterHub.authenticator_class: {name!r} ({what}) is not OIDC login "
            "(generic-oauth); the chart's dummy lets any name in with any password"
        )


def _secret_problems(values: Mapping[str, Any]) -> Iterator[str]:
    hub = values.get("hub") or {}
    for where, key, item in _strings(values, ""):
        if key == "client_secret" and item is not None:
            yield f"{where.lstrip('.')}.client_secret: inline client secret; read it from a Secret"
    for name, code in (hub.get("extraConfig") or {}).items():
        if "client_secret" in str(code):
            yield f"hub.extraConfig.{name}: sets client_secret in code; read it from a Secret"
    env = hub.get("extraEnv") or {}
    entry = env.get(SECRET_ENV) if isinstance(env, Mapping) else None
    if isinstance(env, list):
        entry = next((e for e in env if isinstance(e, Mapping) and e.get("name") == SECRET_ENV), None)
    ref = ((entry or {}).get("valueFrom") or {}).get("secretKeyRef") if isinstance(entry, Mapping) else None
    if not ref or not ref.get("name") or not ref.get("key"):
        yield f"hub.extraEnv.{SECRET_ENV}: must be valueFrom.secretKeyRef (name and key), got {entry!r}"
    elif ref.get("optional"):
        yield f"hub.extraEnv.{SECRET_ENV}: an optional Secret would start the hub with no client secret"


def build_authenticator(config: Mapping[str, Any], secret: str) -> GenericOAuthenticator:
    """GenericOAuthenticator as the hub builds it from ``hub.config``, with ``$OAUTH_CLIENT_SECRET``
    set as the Secret would set it (the caller restores the environment)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(SECRET_ENV, secret)
        sections = {s: dict(config[s]) for s in AUTH_SECTIONS if s in config}
        authenticator = GenericOAuthenticator(config=Config(sections))
        authenticator.client_secret  # noqa: B018  (its default reads the variable: read it while set)
    return authenticator


def _oidc_problems(config: Mapping[str, Any]) -> Iterator[str]:
    configurable = set(GenericOAuthenticator.class_trait_names(config=True))
    for section in AUTH_SECTIONS:
        for key in sorted((config.get(section) or {}).keys() - configurable):
            yield f"hub.config.{section}.{key}: not a GenericOAuthenticator trait"
    try:
        auth = build_authenticator(config, "from-the-secret")
    except (TraitError, ValueError) as e:  # a trait validator refuses the value
        yield f"hub.config.GenericOAuthenticator: refused by GenericOAuthenticator: {e}"
        return
    yield from (f"hub.config.GenericOAuthenticator.{k}: not set" for k in REQUIRED if not getattr(auth, k))
    if auth.client_secret != "from-the-secret":
        yield f"GenericOAuthenticator.client_secret: not read from ${SECRET_ENV}"
    urls = ("authorize_url", "token_url", "userdata_url", "oauth_callback_url")
    for key in (k for k in urls if getattr(auth, k) and urlparse(getattr(auth, k)).scheme != "https"):
        yield f"hub.config.GenericOAuthenticator.{key}: {getattr(auth, key)!r} is not https"
    if not auth.userdata_url and not auth.userdata_from_id_token:
        yield "hub.config.GenericOAuthenticator.userdata_url: not set (nor userdata_from_id_token)"
    if not auth.oauth_callback_url.endswith("/hub/oauth_callback"):
        yield "hub.config.GenericOAuthenticator.oauth_callback_url: must end in /hub/oauth_callback"
    if "openid" not in auth.scope:
        yield f"hub.config.GenericOAuthenticator.scope: {auth.scope} lacks openid"
    if not auth.manage_groups or not auth.auth_state_groups_key:
        yield "hub.config.GenericOAuthenticator: manage_groups and auth_state_groups_key map a claim to groups"
    if auth.allow_all or not auth.allowed_groups:
        yield "hub.config.GenericOAuthenticator.allowed_groups: empty, or allow_all lets everyone in"
    if not auth.admin_groups:
        yield "hub.config.GenericOAuthenticator.admin_groups: not set"


def auth_problems(values: Mapping[str, Any]) -> list[str]:
    """Why these user values would not give a production login; [] when they do."""
    config = (values.get("hub") or {}).get("config") or {}
    problems = list(_class_problems(config))
    problems += _secret_problems(values)
    if not problems or all("authenticator_class" not in p for p in problems):
        problems += _oidc_problems(config)
    return problems


@pytest.mark.parametrize("files", COMBOS)
def test_every_values_combination_logs_in_with_oidc(files: tuple[Any, ...]) -> None:
    assert auth_problems(user_values(*files)) == []


def test_no_shipped_file_selects_a_password_free_authenticator() -> None:
    """Not in values, not in an overlay, not in an extra manifest: only hub_config (the demo) may."""
    for path in sorted(HELM.rglob("*.yaml")):
        text = path.read_text()
        for where, key, item in _strings(list(yaml.safe_load_all(text)), ""):
            if key == "authenticator_class":
                cls = resolve_authenticator(str(item))
                assert cls is not None and issubclass(cls, GenericOAuthenticator), f"{path}{where}: {item}"
        for name in ("DummyAuthenticator", "NullAuthenticator", "SharedPasswordAuthenticator"):
            assert name not in text, f"{path.relative_to(REPO)} mentions {name}"


def _with(config_changes: Mapping[str, Any] | None = None, **top: Any) -> dict[str, Any]:
    values = load_yaml(BASE)
    for section, traits in (config_changes or {}).items():
        values["hub"]["config"].setdefault(section, {}).update(traits)
        for trait, value in traits.items():
            if value is None:
                values["hub"]["config"][section].pop(trait)
    values["hub"].update(top)
    return values


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        pytest.param(
            _with({"JupyterHub": {"authenticator_class": "dummy"}}),
            "'dummy' (jupyterhub.auth.DummyAuthenticator) is not OIDC login",
            id="dummy",
        ),
        pytest.param(
            _with({"JupyterHub": {"authenticator_class": None}}),
            "'dummy' (jupyterhub.auth.DummyAuthenticator)",
            id="unset-falls-back-to-the-chart-dummy",
        ),
        pytest.param(
            _with({"JupyterHub": {"authenticator_class": "jupyterhub.auth.DummyAuthenticator"}}),
            "is not OIDC login",
            id="dummy-by-path",
        ),
        pytest.param(
            _with({"GenericOAuthenticator": {"client_secret": "s3cret"}}),
            "GenericOAuthenticator.client_secret: inline client secret",
            id="inline-secret",
        ),
        pytest.param(
            _with(extraEnv={SECRET_ENV: "s3cret"}), f"hub.extraEnv.{SECRET_ENV}: must be", id="secret-in-env"
        ),
        pytest.param(_with(extraEnv={}), f"hub.extraEnv.{SECRET_ENV}: must be", id="no-secret"),
        pytest.param(
            _with(
                extraEnv={
                    SECRET_ENV: {"valueFrom": {"secretKeyRef": {"name": "x", "key": "y", "optional": True}}}
                }
            ),
            "an optional Secret",
            id="optional-secret",
        ),
        pytest.param(
            _with(extraConfig={"oidc": "c.GenericOAuthenticator.client_secret = 'x'"}),
            "hub.extraConfig.oidc: sets client_secret",
            id="secret-in-code",
        ),
        pytest.param(
            _with({"GenericOAuthenticator": {"manage_groups": None}}),
            "requires GenericOAuthenticator.manage_groups",
            id="groups-without-manage-groups",
        ),
        pytest.param(
            _with({"GenericOAuthenticator": {"token_url": None}}),
            "GenericOAuthenticator.token_url: not set",
            id="no-token-url",
        ),
        pytest.param(
            _with({"GenericOAuthenticator": {"userdata_url": None}}),
            "userdata_url: not set",
            id="no-userinfo",
        ),
        pytest.param(
            _with({"GenericOAuthenticator": {"authorize_url": "http://sso.example.org/auth"}}),
            "authorize_url: 'http://sso.example.org/auth' is not https",
            id="plain-http",
        ),
        pytest.param(
            _with({"GenericOAuthenticator": {"allowed_groups": []}}),
            "allowed_groups: empty",
            id="no-allowed-groups",
        ),
        pytest.param(
            _with({"GenericOAuthenticator": {"allow_all": True}}),
            "allow_all lets everyone in",
            id="allow-all",
        ),
        pytest.param(
            _with({"GenericOAuthenticator": {"admin_groups": None}}), "admin_groups: not set", id="no-admins"
        ),
        pytest.param(_with({"GenericOAuthenticator": {"scope": ["profile"]}}), "lacks openid", id="not-oidc"),
        pytest.param(
            _with({"GenericOAuthenticator": {"groups_claim": "groups"}}),
            "GenericOAuthenticator.groups_claim: not a GenericOAuthenticator trait",
            id="typo",
        ),
    ],
)
def test_the_auth_check_can_fail(values: dict[str, Any], expected: str) -> None:
    problems = auth_problems(values)
    assert any(expected in p for p in problems), problems


# ------------------------------------------------------------------------------ a login
class _Callback:
    """What OAuthenticator reads from the /hub/oauth_callback request: the code and the PKCE cookie."""

    def get_argument(self, name: str) -> str:
        assert name == "code"
        return "the-code"

    def get_state_cookie(self) -> str:
        return str(_serialize_state({"state_id": "s", "code_verifier": "the-verifier"}))


async def _login(
    auth: GenericOAuthenticator, claims: dict[str, Any]
) -> tuple[dict[str, Any] | None, dict[str, Any]]:
    """Log in as the identity provider's userinfo ``claims``: (the hub's user model or None, the token
    request's form)."""
    token_form: dict[str, Any] = {}

    async def httpfetch(url: str, label: str = "", parse_json: bool = True, **kwargs: Any) -> Any:
        if url == auth.token_url:
            token_form.update({k: v[0] for k, v in parse_qs(kwargs["body"].decode()).items()})
            return {"access_token": "at", "token_type": "Bearer", "id_token": "x"}
        assert url == auth.userdata_url, url
        assert kwargs["headers"]["Authorization"] == "Bearer at"
        return json.loads(json.dumps(claims))

    auth.httpfetch = httpfetch  # type: ignore[method-assign]
    return await Authenticator.get_authenticated_user(auth, _Callback(), None), token_form


@pytest.fixture
def authenticator() -> GenericOAuthenticator:
    return build_authenticator(load_yaml(BASE)["hub"]["config"], "the-secret-from-the-secret")


@pytest.mark.parametrize(
    ("claims", "admin", "profiles"),
    [
        pytest.param(
            {"preferred_username": "alice", "groups": ["jupyter-users"]},
            False,
            ["cpu-small"],
            id="user-without-gpu-group",
        ),
        pytest.param(
            {"preferred_username": "bob", "groups": ["gpu-users", "unrelated"]},
            False,
            ["cpu-small", "gpu-exclusive"],
            id="gpu-group-sees-gpu-profiles",
        ),
        pytest.param(
            {"preferred_username": "carol", "groups": ["jupyter-admins"]},
            True,
            ["cpu-small"],
            id="admin-group",
        ),
    ],
)
async def test_a_member_of_an_allowed_group_logs_in_with_the_providers_groups(
    authenticator: GenericOAuthenticator, claims: dict[str, Any], admin: bool, profiles: list[str]
) -> None:
    user, token_form = await _login(authenticator, claims)
    assert user is not None
    assert (user["name"], user["admin"]) == (claims["preferred_username"], admin)
    assert user["groups"] == sorted(claims["groups"])
    # the Secret's value, not anything from values.yaml, authenticates the hub to the provider
    assert token_form["client_secret"] == "the-secret-from-the-secret"
    assert token_form["redirect_uri"] == "https://jupyter.example.org/hub/oauth_callback"
    catalog = load_catalog(REPO / "hub_config" / "catalog")
    seen = {p.slug for p in accessible_profiles(catalog, user["name"], user["groups"])}
    assert set(profiles) <= seen
    assert ("gpu-exclusive" in seen) == ("gpu-users" in claims["groups"])


@pytest.mark.parametrize(
    "claims",
    [
        pytest.param({"preferred_username": "mallory", "groups": ["students"]}, id="other-group"),
        pytest.param({"preferred_username": "mallory"}, id="no-groups-claim"),
        pytest.param({"preferred_username": "mallory", "groups": []}, id="no-groups"),
    ],
)
async def test_anyone_outside_the_allowed_groups_is_refused(
    authenticator: GenericOAuthenticator, claims: dict[str, Any]
) -> None:
    user, _ = await _login(authenticator, claims)
    assert user is None


async def test_a_login_without_the_username_claim_fails(authenticator: GenericOAuthenticator) -> None:
    with pytest.raises(ValueError, match="preferred_username"):
        await _login(authenticator, {"sub": "1234", "groups": ["jupyter-users"]})
