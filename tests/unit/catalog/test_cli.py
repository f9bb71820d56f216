"""python -m gpuworkspace_spawner.catalog PATH."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from gpuworkspace_spawner.catalog.__main__ import main

from .conftest import catalog_doc, profile_doc, with_path, write_yaml

REPO = Path(__file__).resolve().parents[3]


def test_sample_catalog_is_ok() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "gpuworkspace_spawner.catalog", str(REPO / "hub_config" / "catalog")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert (result.returncode, result.stdout) == (0, "ok: 6 profiles, version 2026.12.1\n")


def test_problems_and_exit_status(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    file = write_yaml(
        tmp_path / "c.yaml", catalog_doc(), with_path(profile_doc("p"), "spec.placement.gpuMode", "fast")
    )
    assert main([str(file)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("invalid workspace catalog: 1 problem\n")
    assert 'profile "p": spec.placement.gpuMode' in err


def test_schema_output(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--schema", "WorkspaceProfile"]) == 0
    schema = json.loads(capsys.readouterr().out)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert "displayName" in schema["properties"]["spec"]["properties"]
