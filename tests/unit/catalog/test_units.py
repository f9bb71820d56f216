"""Durations and quantities."""

from __future__ import annotations

from decimal import Decimal

import pytest

from gpuworkspace_spawner.catalog.units import format_duration, parse_duration, parse_quantity


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        pytest.param("90m", 5400, id="minutes"),
        pytest.param("12h", 43200, id="hours"),
        pytest.param("1h30m", 5400, id="compound"),
        pytest.param("45s", 45, id="seconds"),
        pytest.param("2d", 172800, id="days"),
        pytest.param("1d2h3m4s", 93784, id="all-units"),
    ],
)
def test_parse_duration(text: str, seconds: int) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "90", "m", "1.5h", "30m1h", "1h 30m", "0s", "0h0m", "-5m", "5M", "1w"])
def test_parse_duration_refuses(text: str) -> None:
    with pytest.raises(ValueError, match="duration"):
        parse_duration(text)


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        pytest.param(5400, "90 min", id="90-min"),
        pytest.param(43200, "12 h", id="12-h"),
        pytest.param(1800, "30 min", id="30-min"),
        pytest.param(9000, "2 h 30 min", id="compound"),
        pytest.param(172800, "2 d", id="days"),
        pytest.param(45, "45 s", id="seconds"),
        pytest.param(0, "0 s", id="zero"),
    ],
)
def test_format_duration(seconds: int, text: str) -> None:
    assert format_duration(seconds) == text


@pytest.mark.parametrize(
    ("text", "value"),
    [
        pytest.param("64Gi", Decimal(64 * 1024**3), id="binary"),
        pytest.param("500m", Decimal("0.5"), id="milli"),
        pytest.param("4", Decimal(4), id="plain"),
        pytest.param("1e3", Decimal(1000), id="exponent"),
        pytest.param("1.5G", Decimal(1_500_000_000), id="decimal-suffix"),
    ],
)
def test_parse_quantity(text: str, value: Decimal) -> None:
    assert parse_quantity(text) == value


@pytest.mark.parametrize("text", ["", "64GB", "-1", "1..2", "Gi", "1e999999999"])
def test_parse_quantity_refuses(text: str) -> None:
    with pytest.raises(ValueError, match="quantity"):
        parse_quantity(text)
