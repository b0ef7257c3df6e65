"""Reading a request: from a decoded document or a YAML/JSON file, every problem named by its field."""

from __future__ import annotations

from pathlib import Path

from pydantic import ValidationError

from common.loading import load_document
from common.problems import FileProblems, validation_problems
from workflows.request.bounds import MAX_PAYLOAD_BYTES
from workflows.request.model import RolloutRequest


class RequestError(FileProblems):
    """A request file that cannot be used, with one line per problem naming the field."""

    what = "request"


def parse_request(data: object, source: str = "<request>") -> RolloutRequest:
    """Validate a decoded request; raise `RequestError` listing every problem by field."""
    if not isinstance(data, dict):
        raise RequestError(source, [f"(top level): expected a mapping of fields, got {type(data).__name__}"])
    try:
        req = RolloutRequest.model_validate(data)
    except ValidationError as err:
        raise RequestError(source, validation_problems(err, "docs/request.md")) from None
    except RecursionError:  # only reachable by callers that skip load_request's depth limit
        raise RequestError(source, ["(top level): nested too deeply"]) from None
    size = len(req.model_dump_json())
    if size > MAX_PAYLOAD_BYTES:
        raise RequestError(source, [f"(top level): the request is {size} bytes as JSON, more than {MAX_PAYLOAD_BYTES}; "
                                    "Temporal refuses workflow inputs over 2 MB: shorten the lists and texts"])
    return req


def load_request(path: str | Path) -> RolloutRequest:
    """Read a YAML or JSON (by the `.json` suffix) request file, within the loader's limits, and validate it."""
    data = load_document(path, RequestError)
    return parse_request(data, str(path))
