"""Where an adapter's error becomes a Temporal failure the workflow can act on, and back into one line for humans.

An AdapterError leaves the activity as an ApplicationError whose message is the adapter's one line and whose
details are its fields. Nothing is chained to it: the raw client exception (an ApiException with its
response headers, a botocore dump) stays in the worker's log and never reaches Temporal, where the
workflow, the Web UI and notifications would show it instead of Bifrost's hint. `error_text` turns what a
workflow catches back into that line.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable
from typing import ParamSpec, TypeVar

from temporalio.exceptions import (
    ActivityError,
    ApplicationError,
    CancelledError,
    ChildWorkflowError,
    TerminatedError,
    TimeoutType,
)
from temporalio.exceptions import TimeoutError as ActivityTimeoutError

from activities.adapters.base import AdapterError, one_line
from activities.adapters.secrets import redact
from common.failures import OWN_LINE_TYPES

P = ParamSpec("P")
T = TypeVar("T")

log = logging.getLogger(__name__)


_TIMEOUTS = {
    TimeoutType.HEARTBEAT: "no heartbeat within its heartbeat timeout: the worker running it stopped or hung",
    TimeoutType.START_TO_CLOSE: "it ran past its start-to-close timeout",
    TimeoutType.SCHEDULE_TO_CLOSE: "it did not finish within its schedule-to-close timeout, retries included",
    TimeoutType.SCHEDULE_TO_START: "no worker picked it up in time; is a worker polling its task queue?",
}


def as_application_error(err: AdapterError) -> ApplicationError:
    """An ApplicationError of the adapter error's kind (common/failures.py), carrying its one line and its fields as details."""
    return ApplicationError(str(err), err.fields(), type=err.kind, non_retryable=not err.retryable)


def reports_adapter_errors(fn: Callable[P, Awaitable[T]]) -> Callable[P, Awaitable[T]]:
    """Wrap an activity so every `AdapterError` it raises reaches the workflow as an ApplicationError, with no cause chain."""

    @functools.wraps(fn)
    async def wrapper(*args: P.args, **kwargs: P.kwargs) -> T:
        try:
            return await fn(*args, **kwargs)
        except AdapterError as err:
            if err.__cause__ is not None:  # keep the raw client error for whoever reads the worker's log
                log.info("%s; raw cause: %s: %s", err, type(err.__cause__).__name__, one_line(err.__cause__))
            raise as_application_error(err) from None
        except ApplicationError:
            raise
        except Exception as err:  # any other error whose text holds a credential leaves as that text, redacted
            if redact(str(err)) == str(err):
                raise
            raise ApplicationError(one_line(err), type=type(err).__name__) from None

    return wrapper


def error_text(err: BaseException) -> str:
    """The one line a human should read for an exception a workflow caught from an activity or a child workflow,
    with anything shaped like a credential redacted (`secrets.redact`).

    Walks the cause chain from the outside in and answers with the first thing that explains the failure:
    Bifrost's own ApplicationError message (never the raw cause under it), a timeout or cancellation in
    words, else the innermost message. I/O-free, so workflows may call it.
    """
    return redact(_error_text(err))


def _error_text(err: BaseException) -> str:
    chain: list[BaseException] = []
    cur: BaseException | None = err
    while cur is not None and len(chain) < 32:
        chain.append(cur)
        cur = cur.__cause__
    what = _what(err)
    for e in chain:
        if isinstance(e, ApplicationError):
            message = e.message or (e.type or "failed")
            return message if (e.type in OWN_LINE_TYPES or not e.type or not e.message) else f"{e.type}: {message}"
        if isinstance(e, ActivityTimeoutError):
            return f"{what} timed out: {_TIMEOUTS.get(e.type, e.message) if e.type is not None else e.message}"
        if isinstance(e, CancelledError):
            return f"{what} was cancelled" + (f": {e.message}" if e.message and e.message.lower() != "cancelled" else "")
        if isinstance(e, TerminatedError):
            return f"{what} was terminated" + (f": {e.message}" if e.message else "")
    inner = chain[-1]
    return str(inner) or type(inner).__name__


def _what(err: BaseException) -> str:
    if isinstance(err, ActivityError):
        return f"activity {err.activity_type}"
    if isinstance(err, ChildWorkflowError):
        return f"child workflow {err.workflow_type}"
    return "it"
