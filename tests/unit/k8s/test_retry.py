"""Requests the API server answered 429/5xx are repeated; other errors are not."""

from __future__ import annotations

import pytest

from gpuworkspace_spawner.k8s import errors
from gpuworkspace_spawner.k8s.errors import NotFound, Unavailable, error_for_status, retry_unavailable


@pytest.fixture(autouse=True)
def _no_pauses(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(errors, "RETRY_DELAYS_S", (0.0, 0.0, 0.0, 0.0))


def flaky(*answers: Exception | str) -> tuple[list[int], object]:
    calls: list[int] = []

    @retry_unavailable
    async def call(n: int) -> str:
        calls.append(n)
        answer = answers[len(calls) - 1]
        if isinstance(answer, Exception):
            raise answer
        return answer

    return calls, call


@pytest.mark.parametrize("status", [429, 500, 503, 504])
async def test_a_transient_answer_is_repeated_until_the_request_succeeds(status: int) -> None:
    calls, call = flaky(error_for_status(status, b""), error_for_status(status, b""), "ok")
    assert await call(7) == "ok"  # type: ignore[operator]
    assert calls == [7, 7, 7]


async def test_after_five_transient_answers_the_last_error_is_raised() -> None:
    calls, call = flaky(*[Unavailable(503, "down") for _ in range(5)])
    with pytest.raises(Unavailable, match="down"):
        await call(1)  # type: ignore[operator]
    assert len(calls) == 5


async def test_a_definite_answer_is_not_repeated() -> None:
    calls, call = flaky(NotFound(404, "no such claim"), "never")
    with pytest.raises(NotFound):
        await call(1)  # type: ignore[operator]
    assert calls == [1]
