"""Label values, identities and the labels/annotations of a workspace context."""

from __future__ import annotations

import re

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from gpuworkspace_spawner.manifests import names
from gpuworkspace_spawner.manifests.names import WorkspaceIdentity, dns_label, label_value
from tests.unit.manifests.scenarios import ALICE, CPU, CUDA_DIGEST, GPU_EXCLUSIVE, MIG, context

LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")
DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")

names_st = st.text(max_size=120) | st.emails() | st.from_regex(r"[A-Za-z0-9._-]{0,80}", fullmatch=True)


def is_label_value(text: str) -> bool:
    return len(text) <= 63 and LABEL_VALUE.fullmatch(text) is not None


@given(names_st)
def test_label_value_is_always_valid(text: str) -> None:
    assert is_label_value(label_value(text))


@given(names_st)
def test_label_value_keeps_valid_values_and_is_idempotent(text: str) -> None:
    value = label_value(text)
    assert label_value(value) == value
    if is_label_value(text):
        assert value == text


@given(names_st, names_st)
def test_label_value_distinct_inputs_give_distinct_outputs(a: str, b: str) -> None:
    assume(a != b)
    assert label_value(a) != label_value(b)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("alice", "alice", id="plain"),
        pytest.param("", "", id="empty-is-valid"),
        pytest.param("alice@example.com", re.compile(r"alice-example\.com-[0-9a-f]{8}"), id="email"),
        pytest.param("-x-", re.compile(r"x-[0-9a-f]{8}"), id="bad-ends"),
        pytest.param("@@@", re.compile(r"[0-9a-f]{8}"), id="nothing-left"),
        pytest.param("a" * 64, re.compile(r"a{54}-[0-9a-f]{8}"), id="too-long"),
    ],
)
def test_label_value_examples(text: str, expected: str | re.Pattern[str]) -> None:
    value = label_value(text)
    if isinstance(expected, str):
        assert value == expected
    else:
        assert expected.fullmatch(value), value


@given(names_st)
def test_dns_label_is_valid(text: str) -> None:
    value = dns_label(text)
    assert value == text or len(value) <= 63
    assert DNS_LABEL.fullmatch(value) or value == text == ""


def test_selector_labels_name_the_default_server() -> None:
    assert ALICE.selector_labels == {names.LABEL_USER: "alice", names.LABEL_SERVER: "default"}
    named = WorkspaceIdentity(user="bob@example.com", server="gpu box", namespace="ns")
    assert named.selector_labels[names.LABEL_SERVER].startswith("gpu-box-")
    assert named.owns({"labels": named.selector_labels, "annotations": named.name_annotations})
    assert not named.owns({"labels": named.selector_labels})  # labels alone never decide ownership
    assert not ALICE.owns({"labels": named.selector_labels, "annotations": named.name_annotations})
    assert not ALICE.owns(None)


def test_context_labels_and_annotations() -> None:
    ws = context(GPU_EXCLUSIVE, WorkspaceIdentity(user="Alice.Smith@example.com", server="", namespace="ns"))
    assert ws.labels == {
        names.LABEL_USER: label_value("Alice.Smith@example.com"),
        names.LABEL_SERVER: "default",
        names.LABEL_PROFILE: "gpu-a100-exclusive",
        names.LABEL_CATALOG_VERSION: "2026.03.1",
        names.LABEL_GPU_MODE: "exclusive",
        names.LABEL_RUNTIME: "container",
        names.LABEL_COST_CENTER: label_value("research/nlp"),
        names.LABEL_NETWORK_PROFILE: "egress-git-registry",
        names.LABEL_TEAM: "nlp",
        names.LABEL_IMAGE_DIGEST_PREFIX: CUDA_DIGEST.removeprefix("sha256:")[:16],
    }
    assert ws.annotations == {
        names.ANN_USERNAME: "Alice.Smith@example.com",
        names.ANN_SERVERNAME: "",
        names.ANN_PROFILE: "gpu-a100-exclusive",
        names.ANN_CATALOG_VERSION: "2026.03.1",
        names.ANN_TEAM: "nlp",
        names.ANN_IMAGE: GPU_EXCLUSIVE.image,
        names.ANN_IMAGE_DIGEST: CUDA_DIGEST,
    }


def test_optional_labels_are_left_out() -> None:
    labels = context(MIG).labels
    assert names.LABEL_COST_CENTER not in labels
    assert names.LABEL_NETWORK_PROFILE not in labels
    assert context(CPU).labels[names.LABEL_COST_CENTER] == "cc-1234"
