"""A cycle's scrapes go out a few at a time (``Settings.scrape_concurrency``), and every one is made."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

import pytest

from gpuworkspace_spawner.services.attribution.sources import KubernetesSource, Settings

SERVICE = ("gpu-operator", "nvidia-dcgm-exporter")


@dataclass
class SlowHttp:
    """Answers each GET after a few loop turns, counting how many are in flight at once."""

    in_flight: int = 0
    most: int = 0
    urls: list[str] = field(default_factory=list)

    async def get(self, url: Any, headers: Any = None) -> str:
        self.in_flight += 1
        self.most = max(self.most, self.in_flight)
        try:
            for _ in range(5):
                await asyncio.sleep(0)
            self.urls.append(str(url))
            return f"# scraped {url}\n"
        finally:
            self.in_flight -= 1


@dataclass
class Watched:
    """What ``KubernetesSource`` reads of an EndpointSlice watch."""

    objects: dict[str, Any]
    error: str | None = None
    synced: asyncio.Event = field(default_factory=asyncio.Event)


def endpoint_slice(nodes: int) -> dict[str, Any]:
    return {
        "ports": [{"name": "gpu-metrics", "port": 9400}],
        "endpoints": [
            {"addresses": [f"10.0.0.{i + 1}"], "nodeName": f"gpu-node-{i:02d}", "conditions": {"ready": True}}
            for i in range(nodes)
        ],
    }


@pytest.mark.parametrize("limit", [1, 3, 8])
async def test_at_most_the_configured_scrapes_are_in_flight_and_every_endpoint_is_scraped(limit: int) -> None:
    http = SlowHttp()
    source = KubernetesSource(Settings(agent_service=None, scrape_concurrency=limit), http=http)  # type: ignore[arg-type]
    source.slices[SERVICE] = Watched({"slice": endpoint_slice(20)})  # type: ignore[assignment]

    texts, errors = await source._scrape("dcgm", SERVICE, "gpu-metrics")

    assert errors == []
    assert len(texts) == 20
    assert sorted(http.urls) == sorted(f"http://10.0.0.{i + 1}:9400/metrics" for i in range(20))
    assert http.most == limit


def test_the_command_line_sets_the_scrape_concurrency_and_refuses_what_is_not_a_count(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from gpuworkspace_spawner.services.attribution.app import _parser, settings_from

    assert settings_from(_parser().parse_args([])).scrape_concurrency == 8
    assert settings_from(_parser().parse_args(["--scrape-concurrency", "3"])).scrape_concurrency == 3
    for wrong in ("0", "-1", "many", "99999"):
        with pytest.raises(SystemExit):
            _parser().parse_args(["--scrape-concurrency", wrong])
        assert "--scrape-concurrency: a whole number from 1 to 9999" in capsys.readouterr().err
