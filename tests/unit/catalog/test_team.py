"""``spec.team``: a profile names the team of its workspaces, as a label value or not at all."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuworkspace_spawner.catalog import CatalogError, load_catalog

from .conftest import catalog_doc, profile_doc, write_yaml


def test_team_is_loaded_and_optional(tmp_path: Path) -> None:
    file = write_yaml(tmp_path / "c.yaml", catalog_doc(), profile_doc("nlp", team="nlp"), profile_doc("cpu"))
    teams = {p.slug: p.team for p in load_catalog(file).profiles}
    assert teams == {"nlp": "nlp", "cpu": None}


@pytest.mark.parametrize(
    "team",
    [
        pytest.param("research/nlp", id="slash"),
        pytest.param("-nlp", id="leading-dash"),
        pytest.param("n" * 64, id="too-long"),
        pytest.param("", id="empty"),
        pytest.param(7, id="not-text"),
    ],
)
def test_a_team_that_is_no_label_value_is_refused_naming_file_profile_and_field(
    tmp_path: Path, team: object
) -> None:
    file = write_yaml(tmp_path / "c.yaml", catalog_doc(), profile_doc("nlp", team=team))
    with pytest.raises(CatalogError) as caught:
        load_catalog(file)
    (problem,) = [p for p in caught.value.problems if p.field == "spec.team"]
    assert (problem.file, problem.profile) == (str(file), "nlp")
    if isinstance(team, str) and team:
        assert "label value" in problem.message and team in problem.message
