"""A user's server options (form or REST API) → the profile and editor to start, or a clear refusal.

``user_options`` come from the spawn form (after KubeSpawner's ``options_from_form`` removed the
``profile-option-<slug>--`` prefix) or straight from the REST API, so anything may arrive: this
module accepts only a small dict of short strings and says precisely what is wrong otherwise.
A profile the user may not use is refused without revealing whether it exists.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from .errors import OptionsError
from .model import Catalog, Ide, WorkspaceProfile

KNOWN_KEYS = ("profile", "ide")
MAX_KEYS = 16
MAX_VALUE_LENGTH = 256


@dataclass(frozen=True)
class Selection:
    """What to start: a profile of the catalog and the editor within it."""

    profile: WorkspaceProfile
    ide: Ide


def accessible_profiles(catalog: Catalog, user: str, groups: Iterable[str]) -> list[WorkspaceProfile]:
    """The profiles ``user`` (member of ``groups``) may start, in catalog order."""
    group_set = frozenset(groups)
    return [p for p in catalog.profiles if p.access.allows(user, group_set)]


def default_profile_for(catalog: Catalog, user: str, groups: Iterable[str]) -> WorkspaceProfile | None:
    """The catalog's default profile if the user may start it, else the first one they may, else None."""
    allowed = accessible_profiles(catalog, user, groups)
    default = catalog.default_profile
    if default is not None and default in allowed:
        return default
    return allowed[0] if allowed else None


def _names(profiles: Iterable[WorkspaceProfile]) -> str:
    names = [p.slug for p in profiles]
    return ", ".join(names) if names else "none (ask your platform team for access)"


def _unwrap(key: str, value: object) -> str:
    """Form data arrives as single-element lists of strings; the REST API sends strings."""
    if isinstance(value, list) and len(value) == 1:
        value = value[0]
    if not isinstance(value, str):
        raise OptionsError(f"The option {key!r} must be a text value.", "malformed-options")
    if len(value) > MAX_VALUE_LENGTH:
        raise OptionsError(
            f"The option {key!r} is too long (at most {MAX_VALUE_LENGTH} characters).", "malformed-options"
        )
    return value


def _clean(user_options: object) -> dict[str, str]:
    if user_options is None:
        return {}
    if not isinstance(user_options, Mapping):
        raise OptionsError(
            'Server options must be a set of named values, like {"profile": "cpu-small"}.',
            "malformed-options",
        )
    if len(user_options) > MAX_KEYS:
        raise OptionsError(
            f"Too many server options ({len(user_options)}); at most {MAX_KEYS} are accepted.",
            "malformed-options",
        )
    keys = list(user_options)
    if not all(isinstance(key, str) and len(key) <= MAX_VALUE_LENGTH for key in keys):
        raise OptionsError("Server option names must be short text.", "malformed-options")
    unknown = sorted(str(key) for key in keys if key not in KNOWN_KEYS)
    if unknown:
        raise OptionsError(
            f"Unknown server option{'s' if len(unknown) > 1 else ''}: {', '.join(unknown)}. "
            f"Known options: {', '.join(KNOWN_KEYS)}.",
            "malformed-options",
        )
    return {key: _unwrap(key, value) for key, value in user_options.items()}


def _profile(catalog: Catalog, slug: str, user: str, groups: frozenset[str]) -> WorkspaceProfile:
    allowed = accessible_profiles(catalog, user, groups)
    if not allowed:
        raise OptionsError(
            "You may not start any workspace profile; ask your platform team for access.",
            "forbidden-profile",
        )
    if not slug:
        return default_profile_for(catalog, user, groups) or allowed[0]
    profile = catalog.get(slug)
    if profile is not None and profile in allowed:
        return profile
    # Refused the same way whether or not the profile exists: which restricted profiles a catalog
    # holds is not the business of users outside their groups.
    raise OptionsError(
        f"There is no profile {slug!r} you may use. Profiles you may use: {_names(allowed)}.",
        "unknown-profile",
    )


SOURCE_CATALOG = "catalog"


@dataclass(frozen=True)
class TeamDecision:
    """The team of a start (``""``: none), where it came from (``catalog``, ``group <name>``, ``""``), why."""

    team: str
    source: str
    reason: str


def decide_team(profile: WorkspaceProfile, groups: Iterable[str], *, group_prefix: str) -> TeamDecision:
    """The profile's ``team``; else the first sorted group named ``<group_prefix><team>``; else none.

    An empty ``group_prefix`` turns the group rule off. A group that is only the prefix names no team.
    """
    if profile.team:
        return TeamDecision(profile.team, SOURCE_CATALOG, f"profile {profile.slug} sets team")
    if not group_prefix:
        return TeamDecision("", "", "the profile sets no team and the group rule is off")
    for group in sorted(set(groups)):
        if group.startswith(group_prefix) and len(group) > len(group_prefix):
            return TeamDecision(
                group[len(group_prefix) :], f"group {group}", f"the first group named {group_prefix}*"
            )
    return TeamDecision("", "", f"the profile sets no team and no group is named {group_prefix}*")


def resolve_user_options(
    catalog: Catalog, user_options: object, *, user: str, groups: Iterable[str]
) -> Selection:
    """The profile and editor the user asked for, checked against the catalog and their access.

    Raises OptionsError with ``reason`` one of ``malformed-options``, ``unknown-profile``,
    ``forbidden-profile``, ``unknown-option``; the message is meant for the user.
    """
    options = _clean(user_options)
    profile = _profile(catalog, options.get("profile", ""), user, frozenset(groups))
    ide = options.get("ide", "")
    if not ide:
        return Selection(profile=profile, ide=profile.ide.default)
    for choice in profile.ide.choices:
        if choice == ide:
            return Selection(profile=profile, ide=choice)
    raise OptionsError(
        f"The editor {ide!r} is not available in the profile {profile.slug!r}. "
        f"Choose one of: {', '.join(profile.ide.choices)}.",
        "unknown-option",
    )
