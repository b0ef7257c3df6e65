"""The one place where an adapter's error becomes a Temporal failure the workflow can act on."""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import ParamSpec, TypeVar

from temporalio.exceptions import ActivityError, ApplicationError, ChildWorkflowError, FailureError

from activities.adapters.base import AdapterError

P = ParamSpec("P")
T = TypeVar("T")


def as_application_error(err: AdapterError) -> ApplicationError:
    """An ApplicationError named after the adapter error's type; non-retryable when retrying cannot help."""
    return ApplicationError(str(err), type=type(err).__name__, non_retryable=not err.retryable)


def reports_adapter_errors(fn: Callable[P, Awaitable[T]]) -> Callable[P, Awaitable[T]]:
    """Wrap an activity so every `AdapterError` it raises reaches the workflow as an ApplicationError."""

    @functools.wraps(fn)
    async def wrapper(*args: P.args, **kwargs: P.kwargs) -> T:
        try:
            return await fn(*args, **kwargs)
        except AdapterError as err:
            raise as_application_error(err) from err

    return wrapper


def failure_text(err: BaseException) -> str:
    """The one line a person should read about a failed activity or child: the outermost failure that says
    what happened (an adapter's own message with its hint, a timeout), not the wrapper around it."""
    cause: BaseException | None = err
    while isinstance(cause, (ActivityError, ChildWorkflowError)) and cause.__cause__ is not None:
        cause = cause.__cause__
    if isinstance(cause, FailureError):
        return cause.message or type(cause).__name__
    return str(cause or err) or type(err).__name__
