"""Hostile user_options against the sample catalog: a Selection or an OptionsError naming the option.

test_options.py is a decision table of hand-picked cases; here hypothesis generates what a hostile
REST client or a forged spawn form can send (unknown keys, forged choice values, wrong types, unicode,
huge strings, nested structures, other users' groups) and an oracle written from the catalog's YAML,
not from the production code, says what must happen. KubeSpawner itself answers an unknown choice
with a KeyError; ours must never leak anything but OptionsError.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from kubespawner import KubeSpawner

from gpuworkspace_spawner.catalog import OptionsError, Selection, load_catalog, resolve_user_options
from gpuworkspace_spawner.catalog.model import Catalog

REPO = Path(__file__).resolve().parents[3]
SAMPLE = REPO / "hub_config" / "catalog"
FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
REASONS = {"malformed-options", "unknown-profile", "forbidden-profile", "unknown-option"}


# ------------------------------------------------------------------------- the oracle, from YAML
@dataclass(frozen=True)
class RawProfile:
    slug: str
    groups: frozenset[str]
    users: frozenset[str]
    ide_default: str
    ide_choices: tuple[str, ...]

    def allows(self, user: str, groups: frozenset[str]) -> bool:
        return (not self.groups and not self.users) or user in self.users or bool(self.groups & groups)


def _raw_profiles() -> tuple[list[RawProfile], str]:
    profiles, default = [], ""
    for path in sorted(SAMPLE.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if not doc or doc.get("kind") != "WorkspaceProfile":
                continue
            spec = doc["spec"]
            ide = spec.get("ide", "jupyterlab")
            if isinstance(ide, str):
                ide = {"default": ide, "choices": [ide]}
            access = spec.get("access", {})
            slug = doc["metadata"]["name"]
            profiles.append(
                RawProfile(
                    slug=slug,
                    groups=frozenset(access.get("groups", [])),
                    users=frozenset(access.get("users", [])),
                    ide_default=ide.get("default", ide["choices"][0]),
                    ide_choices=tuple(ide["choices"]),
                )
            )
            if spec.get("default"):
                default = slug
    return profiles, default


RAW, DEFAULT = _raw_profiles()
BY_SLUG = {p.slug: p for p in RAW}


@dataclass(frozen=True)
class Expected:
    reason: str | None  # None: accepted
    names: str = ""  # what the refusal must name (the option, the value)
    profile: str = ""
    ide: str = ""


def _bad_value(value: object) -> bool:
    if isinstance(value, list) and len(value) == 1:
        value = value[0]
    return not isinstance(value, str) or len(value) > 256


def _unwrapped(value: object) -> str:
    return str(value[0] if isinstance(value, list) else value)


def expect(options: object, user: str, groups: frozenset[str]) -> Expected:
    """What resolve_user_options must do, written from the docs (reference/spawner.md) and the YAML."""
    if options is None:
        options = {}
    if not isinstance(options, Mapping) or len(options) > 16:
        return Expected("malformed-options")
    if not all(isinstance(k, str) and len(k) <= 256 for k in options):
        return Expected("malformed-options")
    unknown = [k for k in options if k not in ("profile", "ide")]
    if unknown:
        return Expected("malformed-options", names=unknown[0])
    for key, value in options.items():  # the first bad value, in the order given
        if _bad_value(value):
            return Expected("malformed-options", names=repr(key))
    slug = _unwrapped(options.get("profile", ""))
    allowed = [p for p in RAW if p.allows(user, groups)]
    if not slug:
        slug = DEFAULT if BY_SLUG[DEFAULT] in allowed else allowed[0].slug
    elif BY_SLUG.get(slug) not in allowed:  # refused alike whether or not it exists
        return Expected("unknown-profile", names=repr(slug))
    profile = BY_SLUG[slug]
    ide = _unwrapped(options.get("ide", ""))
    if not ide:
        return Expected(None, profile=slug, ide=profile.ide_default)
    if ide not in profile.ide_choices:
        return Expected("unknown-option", names=repr(ide))
    return Expected(None, profile=slug, ide=ide)


@pytest.fixture(scope="module")
def sample() -> Catalog:
    return load_catalog(SAMPLE)


def check(catalog: Catalog, options: object, user: str, groups: frozenset[str]) -> Selection | OptionsError:
    """Resolve and compare with the oracle; anything but a Selection or an OptionsError fails."""
    wanted = expect(options, user, groups)
    event(wanted.reason or "accepted")
    try:
        got: Selection | OptionsError = resolve_user_options(catalog, options, user=user, groups=groups)
    except OptionsError as exc:
        got = exc
    if isinstance(got, Selection):
        assert wanted.reason is None, (wanted, got.profile.slug, got.ide)
        assert (got.profile.slug, got.ide) == (wanted.profile, wanted.ide)
        assert got.profile.access.allows(user, groups)
        assert got.ide in got.profile.ide.choices
        return got
    assert got.reason in REASONS and got.reason == wanted.reason, (wanted, got.reason, got.message)
    assert got.message and str(got) == got.message
    assert wanted.names in got.message, (wanted, got.message)
    for raw in RAW:  # never reveals who may use a profile
        for group in raw.groups:
            assert group not in got.message or group in repr(options), got.message
    return got


# --------------------------------------------------------------------------------- strategies
SLUGS = [p.slug for p in RAW]
IDES = ["jupyterlab", "code-server"]


def _forgeries(word: str) -> list[str]:
    """Values a forger tries in place of ``word``."""
    return [
        word,
        word.upper(),
        f" {word}",
        f"{word}\n",
        f"{word}\x00",
        f"../{word}",
        f"{word}/../{SLUGS[1]}",
        f"%2e%2e%2f{word}",
        word.replace("c", "\u0441"),  # Cyrillic es
        word.replace("-", "\u2010"),  # Unicode hyphen
        "".join(chr(ord(c) + 0xFEE0) if c.isalpha() else c for c in word),  # fullwidth
        f"{word}\u200b",  # zero-width space
        f"{word}{word}",
        f"profile-option-{word}--image",
    ]


FORGED = st.sampled_from([f for word in SLUGS + IDES for f in _forgeries(word)] + ["", "vim", "*", "%s"])
HUGE = st.integers(200, 20_000).map(lambda n: "x" * n)
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(),
    st.just(math.nan),
    st.binary(max_size=8),
    st.text(max_size=40),
    FORGED,
    HUGE,
)
VALUES = st.one_of(
    FORGED,
    st.sampled_from(SLUGS + IDES),
    st.lists(st.one_of(FORGED, st.sampled_from(SLUGS + IDES)), max_size=3),
    st.recursive(
        SCALARS,
        lambda inner: st.one_of(
            st.lists(inner, max_size=3),
            st.tuples(inner),
            st.dictionaries(st.text(max_size=8), inner, max_size=3),
        ),
        max_leaves=8,
    ),
)
KEYS = st.one_of(
    st.sampled_from(["profile", "ide", "profile", "ide"]),
    st.sampled_from(
        ["image", "Profile", "profile ", "ide\x00", "cpu_limit", "kubespawner_override", "__class__"]
    ),
    st.text(max_size=30),
    HUGE,
)
ODD_KEYS = st.one_of(st.integers(), st.none(), st.tuples(st.text(max_size=3)), st.binary(max_size=4))
OPTIONS = st.one_of(
    st.dictionaries(KEYS, VALUES, max_size=4),
    st.dictionaries(st.sampled_from(["profile", "ide"]), VALUES, min_size=1),
    st.dictionaries(st.one_of(KEYS, ODD_KEYS), VALUES, max_size=20),
    st.lists(VALUES, max_size=2),
    SCALARS,
)
USERS = st.one_of(st.sampled_from(["alice", "bob", "admin", ""]), st.text(max_size=20))
GROUPS = st.frozensets(
    st.one_of(st.sampled_from(["gpu-users", "researchers", "GPU-USERS", ""]), st.text(max_size=10))
)


# ------------------------------------------------------------------------------------ properties
@FUZZ
@given(options=OPTIONS, user=USERS, groups=GROUPS)
def test_any_options_give_a_selection_or_a_refusal_naming_the_option(
    sample: Catalog, options: object, user: str, groups: frozenset[str]
) -> None:
    check(sample, options, user, groups)


@FUZZ
@given(
    slug=st.one_of(st.sampled_from(SLUGS), FORGED),
    ide=st.one_of(st.none(), st.sampled_from(IDES), FORGED),
    form=st.booleans(),
    user=USERS,
    groups=GROUPS,
)
def test_forged_choice_values_are_refused_by_name(
    sample: Catalog, slug: str, ide: str | None, form: bool, user: str, groups: frozenset[str]
) -> None:
    options: dict[str, Any] = {"profile": [slug] if form else slug}
    if ide is not None:
        options["ide"] = [ide] if form else ide
    got = check(sample, options, user, groups)
    if isinstance(got, Selection):  # only the exact slugs and editors of the catalog get through
        assert slug in ("", got.profile.slug) and ide in (None, "", got.ide)


@FUZZ
@given(user=USERS, groups=GROUPS, slug=st.sampled_from(SLUGS))
def test_group_restricted_profiles_are_refused_outside_the_group(
    sample: Catalog, user: str, groups: frozenset[str], slug: str
) -> None:
    got = check(sample, {"profile": slug}, user, groups)
    raw = BY_SLUG[slug]
    if raw.allows(user, groups):
        assert isinstance(got, Selection)
    else:
        assert isinstance(got, OptionsError) and got.reason == "unknown-profile"
        assert not any(g in got.message for g in raw.groups | raw.users), got.message


def _options_from_form(formdata: dict[str, list[str]]) -> dict[str, Any]:
    """KubeSpawner's own form parsing (the spawner does not override it), on a stand-in ``self``."""
    stand_in = SimpleNamespace(log=SimpleNamespace(warning=lambda *args: None))
    return KubeSpawner._options_from_form(stand_in, formdata)


FORM_KEYS = st.one_of(
    st.just("profile"),
    st.sampled_from(SLUGS).map(lambda s: f"profile-option-{s}--ide"),
    st.sampled_from(SLUGS).map(lambda s: f"profile-option-{s}--profile"),
    st.sampled_from(SLUGS).map(lambda s: f"profile-option-{s}--image"),
    st.text(max_size=20).map(lambda s: f"profile-option-{s}"),
    st.text(max_size=20),
)
FORM_VALUES = st.lists(
    st.one_of(FORGED, st.sampled_from(SLUGS + IDES), st.text(max_size=20), HUGE), min_size=1, max_size=3
)


@FUZZ
@given(formdata=st.dictionaries(FORM_KEYS, FORM_VALUES, max_size=5), user=USERS, groups=GROUPS)
def test_forged_spawn_forms_give_a_selection_or_a_refusal(
    sample: Catalog, formdata: dict[str, list[str]], user: str, groups: frozenset[str]
) -> None:
    check(sample, _options_from_form(formdata), user, groups)


# ------------------------------------------------------------------------------------- examples
@pytest.mark.parametrize(
    ("options", "reason", "names"),
    [
        pytest.param({"profile": "x" * 2_000_000}, "malformed-options", "'profile'", id="2-MB-value"),
        pytest.param({"k" * 2_000_000: "v"}, "malformed-options", "short text", id="2-MB-key"),
        pytest.param({str(i): "v" for i in range(10_000)}, "malformed-options", "Too many", id="10k-keys"),
        pytest.param({"profile": {"$ne": ""}}, "malformed-options", "'profile'", id="operator-object"),
        pytest.param({"profile": ["cpu-small", "gpu-exclusive"]}, "malformed-options", "'profile'", id="two"),
        pytest.param({"profile": [["cpu-small"]]}, "malformed-options", "'profile'", id="nested-list"),
        pytest.param({"profile": b"cpu-small"}, "malformed-options", "'profile'", id="bytes"),
        pytest.param({"ide": None}, "malformed-options", "'ide'", id="null-ide"),
        pytest.param(
            {"profile": "../gpu-exclusive"}, "unknown-profile", "'../gpu-exclusive'", id="traversal"
        ),
        pytest.param({"profile": "cpu-small", "ide": "vim"}, "unknown-option", "'vim'", id="ide"),
        pytest.param(
            {"profile": "cpu-small", "ide": "code-server"}, "unknown-option", "cpu-small", id="undeclared"
        ),
        pytest.param({"__proto__": {"admin": True}}, "malformed-options", "__proto__", id="proto"),
    ],
)
def test_hostile_examples(sample: Catalog, options: object, reason: str, names: str) -> None:
    with pytest.raises(OptionsError) as caught:
        resolve_user_options(sample, options, user="alice", groups=["researchers"])
    assert caught.value.reason == reason and names in caught.value.message, caught.value.message
    assert len(caught.value.message) < 2_000  # a huge value is never echoed back whole


def test_oracle_agrees_with_the_decision_table() -> None:
    """The oracle reads the YAML the same way as the hand-written table in test_options.py."""
    assert DEFAULT == "cpu-small" and BY_SLUG["gpu-exclusive"].groups == {"gpu-users"}
    assert expect({"profile": "gpu-exclusive"}, "alice", frozenset()).reason == "unknown-profile"
    assert expect({"profile": "gpu-huge"}, "alice", frozenset()).reason == "unknown-profile"
    assert expect({}, "alice", frozenset()) == Expected(None, profile="cpu-small", ide="jupyterlab")


def test_a_forbidden_profile_is_refused_like_one_that_does_not_exist(sample: Catalog) -> None:
    refusals = []
    for slug in ("gpu-exclusive", "gpu-exclusiv"):
        with pytest.raises(OptionsError) as caught:
            resolve_user_options(sample, {"profile": slug}, user="alice", groups=[])
        refusals.append((caught.value.reason, re.sub(re.escape(repr(slug)), "<slug>", caught.value.message)))
    assert refusals[0] == refusals[1], refusals
