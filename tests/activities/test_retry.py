"""activities/adapters/retry.py: the one retry loop of the routers and Route 53 (no server)."""

from __future__ import annotations

import logging

import pytest

from activities.adapters.base import TrafficError
from activities.adapters.retry import Backoff, retrying


class Flaky:
    """A call that fails with `errors` in turn, then answers "ok"; counts its tries."""

    def __init__(self, *errors: Exception) -> None:
        self.errors = list(errors)
        self.tries = 0

    async def __call__(self) -> str:
        self.tries += 1
        if self.errors:
            raise self.errors.pop(0)
        return "ok"


def failure(err: Exception, attempt: int) -> TrafficError:
    if isinstance(err, KeyError):
        raise LookupError("refused at once") from err
    return TrafficError(f"try {attempt}: {err}", retryable=not isinstance(err, PermissionError))


NOW = Backoff(attempts=3, first_seconds=0)


def test_the_wait_doubles_from_the_first_up_to_the_cap() -> None:
    assert [Backoff(6, 0.5).delay(n) for n in range(1, 6)] == [0.5, 1, 2, 4, 8]
    assert [Backoff(6, 0.5, max_seconds=2).delay(n) for n in range(1, 6)] == [0.5, 1, 2, 2, 2]


async def test_a_passing_failure_is_tried_again_and_logged(caplog: pytest.LogCaptureFixture) -> None:
    call = Flaky(OSError("reset"), OSError("reset"))
    caplog.set_level(logging.INFO)
    assert await retrying(call, retry_on=(OSError,), failure=failure, backoff=NOW, note=lambda *_: "",
                          logger=logging.getLogger("t")) == "ok"
    assert call.tries == 3 and [r.getMessage() for r in caplog.records] == [
        "try 1: reset; trying again in 0.0 s", "try 2: reset; trying again in 0.0 s"]


async def test_the_last_failure_is_raised_after_the_last_try() -> None:
    call = Flaky(*[OSError("down")] * 5)
    with pytest.raises(TrafficError, match="try 3: down"):
        await retrying(call, retry_on=(OSError,), failure=failure, backoff=NOW, note=lambda *_: "")
    assert call.tries == 3


async def test_what_retrying_cannot_help_is_raised_at_once() -> None:
    for error, raised in ((PermissionError("denied"), TrafficError), (KeyError("gone"), LookupError),
                          (ValueError("not ours"), ValueError)):
        call = Flaky(error)
        with pytest.raises(raised):
            await retrying(call, retry_on=(OSError, KeyError), failure=failure, backoff=NOW, note=lambda *_: "")
        assert call.tries == 1, error
