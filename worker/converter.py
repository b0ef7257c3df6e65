"""The data converter every Bifrost client and worker shares: pydantic JSON, readable refusals, quiet failures.

- A payload that does not match its model (a misspelt update field typed in the Temporal UI, a workflow
  input the request model would refuse) becomes an `InvalidPayload` failure naming the field, instead of
  "Failed decoding arguments" and an SDK stack. For a workflow input that fails the run at once (it cannot
  wedge retrying its first task); for an update it rejects the update before any history is written.
- A start input over the bound on sent payloads reaches the converter as a marker (worker/bounds.py), which it
  refuses as an `InvalidPayload` naming the size: the run fails at once, as for any other bad input.
- Failures Bifrost raises on purpose (refusals, outcomes such as RolledBack, adapter errors such as
  DeployError) carry no stack trace, and neither does anything chained to them (the stage's internal reason,
  an activity's failure it wraps): the UI shows the message a release manager needs, not Python frames or
  the worker's file paths.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import temporalio.api.common.v1
import temporalio.api.failure.v1
from pydantic import BaseModel, ValidationError
from temporalio.contrib.pydantic import PydanticJSONPlainPayloadConverter, pydantic_data_converter
from temporalio.converter import (
    CompositePayloadConverter,
    DefaultFailureConverter,
    DefaultPayloadConverter,
    EncodingPayloadConverter,
    JSONPlainPayloadConverter,
    PayloadConverter,
)
from temporalio.exceptions import ApplicationError

from common.failures import FAILURE_TYPES
from common.problems import joined, payload_problems
from common.types import INVALID_PAYLOAD
from worker.bounds import OVERSIZED_ENCODING, too_large_text


class _ModelJSONConverter(PydanticJSONPlainPayloadConverter):
    """Pydantic JSON, but a payload that fails its model's validation is an InvalidPayload naming the field."""

    def from_payload(self, payload: temporalio.api.common.v1.Payload, type_hint: type | None = None) -> Any:
        try:
            return super().from_payload(payload, type_hint)
        except ValidationError as err:
            model = type_hint if isinstance(type_hint, type) and issubclass(type_hint, BaseModel) else None
            what = model.__name__ if model is not None else "payload"
            problems = payload_problems(err, model)
            raise ApplicationError(f"invalid {what}: {joined(problems)}", type=INVALID_PAYLOAD,
                                   non_retryable=True) from None


class _OversizedMarker(EncodingPayloadConverter):
    """Decodes the marker worker/bounds.py puts in place of a start input over the bound: an InvalidPayload naming
    its size. Encodes nothing."""

    @property
    def encoding(self) -> str:
        return OVERSIZED_ENCODING.decode()

    def to_payload(self, value: Any) -> temporalio.api.common.v1.Payload | None:
        return None

    def from_payload(self, payload: temporalio.api.common.v1.Payload, type_hint: type | None = None) -> Any:
        raise ApplicationError(too_large_text(int(payload.data)), type=INVALID_PAYLOAD, non_retryable=True)


# One JSON converter per process, so its cache of pydantic TypeAdapters lives as long as the worker: the SDK builds a
# new DataConverter (and so a new payload converter) for every workflow activation, twice, and a fresh converter
# per construction cost a SchemaSerializer and an empty cache each time (9 % of the event loop's activation work).
_JSON = _ModelJSONConverter()
_ENCODINGS = (*(_JSON if isinstance(c, JSONPlainPayloadConverter) else c
                 for c in DefaultPayloadConverter.default_encoding_payload_converters), _OversizedMarker())


class BifrostPayloadConverter(CompositePayloadConverter):
    """The default encodings, with JSON handled by the process's one `_ModelJSONConverter`."""

    def __init__(self) -> None:
        super().__init__(*_ENCODINGS)


# Every failure type raised on purpose (common/failures.py: outcomes, refusals, adapter errors), its message written
# for a person: no Python frames anywhere in its chain.
QUIET_FAILURE_TYPES: frozenset[str] = frozenset(FAILURE_TYPES)


class BifrostFailureConverter(DefaultFailureConverter):
    """Drops the stack traces of the failures Bifrost raises on purpose and of their causes; keeps them for bugs."""

    def to_failure(self, exception: BaseException, payload_converter: PayloadConverter,
                   failure: temporalio.api.failure.v1.Failure) -> None:
        super().to_failure(exception, payload_converter, failure)
        if isinstance(exception, ApplicationError) and exception.type in QUIET_FAILURE_TYPES:
            _drop_stack_traces(failure)


def _drop_stack_traces(failure: temporalio.api.failure.v1.Failure) -> None:
    """Clear the stack trace of `failure` and of every cause chained to it (the SDK chains `__context__` too)."""
    while True:
        failure.stack_trace = ""
        if not failure.HasField("cause"):
            return
        failure = failure.cause


DATA_CONVERTER = dataclasses.replace(
    pydantic_data_converter,
    payload_converter_class=BifrostPayloadConverter,
    failure_converter_class=BifrostFailureConverter,
)

__all__ = ["DATA_CONVERTER", "QUIET_FAILURE_TYPES", "BifrostFailureConverter", "BifrostPayloadConverter"]
