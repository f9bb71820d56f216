"""build_profile_list: which profiles each user sees, the default, the editor option, the card."""

from __future__ import annotations

import html
import re
from pathlib import Path

import pytest

from gpuworkspace_spawner.catalog import build_profile_list, describe_gpu_mode, load_catalog
from gpuworkspace_spawner.catalog.model import Catalog

from .conftest import catalog_doc, gpu_doc, profile_doc, write_yaml

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def sample() -> Catalog:
    return load_catalog(REPO / "hub_config" / "catalog")


@pytest.mark.parametrize(
    ("user", "groups", "slugs", "default"),
    [
        pytest.param(
            "alice",
            [],
            ["cpu-small", "cpu-team", "gpu-shared", "gpu-mig", "vm-workstation"],
            "cpu-small",
            id="no-groups",
        ),
        pytest.param(
            "bob",
            ["gpu-users"],
            ["cpu-small", "cpu-team", "gpu-exclusive", "gpu-shared", "gpu-mig", "vm-workstation"],
            "cpu-small",
            id="gpu-group",
        ),
        pytest.param(
            "carol",
            ["other", "gpu-users"],
            ["cpu-small", "cpu-team", "gpu-exclusive", "gpu-shared", "gpu-mig", "vm-workstation"],
            "cpu-small",
            id="groups-iterable",
        ),
    ],
)
def test_access_by_group(
    sample: Catalog, user: str, groups: list[str], slugs: list[str], default: str
) -> None:
    entries = build_profile_list(sample, user, groups)
    assert [e["slug"] for e in entries] == slugs
    assert [e["slug"] for e in entries if e["default"]] == [default]
    assert all(e["kubespawner_override"] == {} for e in entries)


def test_access_by_user_and_default_fallback(tmp_path: Path) -> None:
    docs = [
        catalog_doc(),
        profile_doc("restricted", default=True, access={"groups": ["staff"]}),
        profile_doc("open"),
        gpu_doc("mine", access={"users": ["dana"]}),
    ]
    catalog = load_catalog(write_yaml(tmp_path / "c.yaml", *docs))
    dana = build_profile_list(catalog, "dana", [])
    assert [(e["slug"], e["default"]) for e in dana] == [("open", True), ("mine", False)]
    staff = build_profile_list(catalog, "erin", ["staff"])
    assert [(e["slug"], e["default"]) for e in staff] == [("restricted", True), ("open", False)]
    assert build_profile_list(load_catalog(write_yaml(tmp_path / "d.yaml", docs[0], docs[1])), "x", []) == []


def test_ide_option_only_with_a_choice(sample: Catalog, tmp_path: Path) -> None:
    entries = {e["slug"]: e for e in build_profile_list(sample, "alice", [])}
    assert "profile_options" not in entries["cpu-small"]  # its image declares JupyterLab only
    option = entries["vm-workstation"]["profile_options"]["ide"]
    assert option["display_name"] == "Editor"
    assert list(option["choices"]) == ["jupyterlab", "code-server"]
    assert option["choices"]["jupyterlab"]["default"] is True
    assert option["choices"]["code-server"] == {
        "display_name": "VS Code (code-server)",
        "default": False,
        "kubespawner_override": {},
    }
    single = load_catalog(write_yaml(tmp_path / "c.yaml", catalog_doc(), profile_doc("p", ide="jupyterlab")))
    assert "profile_options" not in build_profile_list(single, "x", [])[0]


def test_catalog_text_is_escaped(tmp_path: Path) -> None:
    doc = profile_doc(
        "p",
        displayName="<script>alert(1)</script>",
        description='Say "hi" & {{ spawner.user.name }} <b>bold</b>',
        costCenter="<img src=x>",
    )
    entry = build_profile_list(load_catalog(write_yaml(tmp_path / "c.yaml", catalog_doc(), doc)), "x", [])[0]
    assert entry["display_name"] == "&lt;script&gt;alert(1)&lt;/script&gt;"
    card = entry["description"]
    assert "<script" not in card and "<b>" not in card and "<img" not in card
    assert "&quot;hi&quot; &amp; &#123;&#123; spawner.user.name &#125;&#125; &lt;b&gt;bold&lt;/b&gt;" in card
    assert "{" not in card and "}" not in card


@pytest.mark.parametrize(
    ("slug", "phrases"),
    [
        pytest.param(
            "gpu-exclusive",
            ["whole GPU", "fault isolation", "card-hour", "8 CPU guaranteed, up to 16 CPU"],
            id="exclusive",
        ),
        pytest.param("gpu-mig", ["MIG slice", "own memory", "slice-hour"], id="mig"),
        pytest.param(
            "gpu-shared",
            ["no memory or fault isolation", "speed varies", "one shared access, not a whole card"],
            id="time-sliced",
        ),
        pytest.param(
            "cpu-small", ["no GPU", "CPU only", "2Gi memory guaranteed, up to 4Gi memory"], id="none"
        ),
    ],
)
def test_card_explains_gpu_mode(sample: Catalog, slug: str, phrases: list[str]) -> None:
    entry = next(e for e in build_profile_list(sample, "bob", ["gpu-users"]) if e["slug"] == slug)
    text = html.unescape(entry["description"])
    for phrase in phrases:
        assert phrase in text


def test_card_explains_persistence_and_session(sample: Catalog) -> None:
    entry = next(e for e in build_profile_list(sample, "bob", ["gpu-users"]) if e["slug"] == "gpu-exclusive")
    text = html.unescape(entry["description"])
    assert "/home/jovyan" in text and "200Gi" in text and "survives stopping" in text and "retention" in text
    assert "/scratch" in text and "/dev/shm" in text and "emptied when the workspace stops" in text
    assert "stops after 90 min idle" in text and "at most 12 h per session" in text
    assert "warned 30 min and 5 min before" in text
    assert "research-platform-gpu" in text


def test_card_lists_read_only_data(tmp_path: Path) -> None:
    doc = profile_doc(
        "p",
        storage={
            "datasets": {"claimName": "ds"},
            "models": {"claimName": "models"},
            "teamDirectories": [{"name": "t", "claimName": "fs", "mountPath": "/team", "readOnly": False}],
        },
    )
    entry = build_profile_list(load_catalog(write_yaml(tmp_path / "c.yaml", catalog_doc(), doc)), "x", [])[0]
    text = html.unescape(entry["description"])
    assert "datasets at /data (read-only)" in text.replace("<code>", "").replace("</code>", "")
    assert "models at /models (read-only)" in text.replace("<code>", "").replace("</code>", "")
    assert "read-write, shared with your team" in text
    assert "no automatic stop" in text


def test_card_is_inline_html(sample: Catalog) -> None:
    """KubeSpawner wraps the description in <p>: block elements would break out of it."""
    for entry in build_profile_list(sample, "bob", ["gpu-users"]):
        for block in ("<p", "<div", "<ul", "<li", "<table", "<h"):
            assert block not in entry["description"]


def test_renders_in_kubespawner_form(sample: Catalog) -> None:
    """The entries render with KubeSpawner's own form template, no autoescape, as it does."""
    from jinja2 import Environment, PackageLoader

    env = Environment(
        loader=PackageLoader("kubespawner", "templates")
    )  # KubeSpawner does not autoescape either
    from kubespawner.spawner import KubeSpawner

    profiles = KubeSpawner._get_initialized_profile_list(
        None, build_profile_list(sample, "bob", ["gpu-users"])
    )  # type: ignore[arg-type]
    page = env.get_template("form.html").render(profile_list=profiles, user_options={})
    assert 'value="gpu-mig"' in page and "profile-option-vm-workstation--ide" in page
    assert re.findall(r'value="([a-z0-9-]+)"\s+checked\s*/>', page) == ["cpu-small"]


def test_describe_gpu_mode_covers_every_mode() -> None:
    for mode in ("exclusive", "mig", "time-sliced", "none"):
        assert describe_gpu_mode(mode)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("slug", "query"),
    [
        pytest.param(
            "gpu-exclusive",
            "resource=nvidia.com%2Fgpu&count=1&selector=gpuworkspace.dev%2Fpool%3Dgpu",
            id="whole-gpu",
        ),
        pytest.param(
            "gpu-mig",
            "resource=nvidia.com%2Fmig-1g.10gb&count=1&selector=gpuworkspace.dev%2Fpool%3Dgpu",
            id="mig",
        ),
        pytest.param(
            "gpu-shared",
            "resource=nvidia.com%2Fgpu.shared&count=1&selector=gpuworkspace.dev%2Fpool%3Dgpu",
            id="time-sliced",
        ),
        pytest.param("cpu-small", None, id="cpu-only"),
        pytest.param("vm-workstation", None, id="vm-without-gpu"),
    ],
)
def test_card_asks_the_attribution_service_for_its_gpu(sample: Catalog, slug: str, query: str | None) -> None:
    """The spawn page's script fills the "Free now" line from api/v1/availability?<this query>."""
    (entry,) = [e for e in build_profile_list(sample, "bob", ["gpu-users"]) if e["slug"] == slug]
    found = re.findall(r'data-gpuws-availability="([^"]*)"', entry["description"])
    assert found == ([html.escape(query)] if query else [])


def test_card_summary_first_details_for_the_selected_profile(sample: Catalog) -> None:
    """Five cards fit a screen: description, what is free and the resources stay; the rest is detail."""
    (entry,) = [e for e in build_profile_list(sample, "bob", ["gpu-users"]) if e["slug"] == "gpu-exclusive"]
    lines = re.findall(r'<span class="gpuws-card-line([^"]*)"[^>]*><strong>([^<]*):', entry["description"])
    assert lines == [
        (" gpuws-availability", "Free now"),
        (" gpuws-card-detail", "GPU"),
        ("", "Resources"),
        (" gpuws-card-detail", "Kept"),
        (" gpuws-card-detail", "Wiped"),
        (" gpuws-card-detail", "Session"),
        (" gpuws-card-detail", "Cost center"),
    ]


def test_a_refused_runtime_says_why_on_its_cards_before_the_click(sample: Catalog) -> None:
    """A disk limit (limiting.form_refusals) for VMs: every VM card says so, escaped; no container card does."""
    entries = build_profile_list(sample, "bob", ["gpu-users"], {"vm": "you have 3 disks <the most>"})
    by_slug = {e["slug"]: e["description"] for e in entries}
    refused = {slug for slug, card in by_slug.items() if "Cannot start now:" in card}
    assert refused == {p.slug for p in sample.profiles if p.runtime == "vm" and p.slug in by_slug} and refused
    assert "you have 3 disks &lt;the most&gt;" in by_slug[next(iter(refused))]
    assert build_profile_list(sample, "bob", ["gpu-users"]) == build_profile_list(
        sample, "bob", ["gpu-users"], {}
    )
