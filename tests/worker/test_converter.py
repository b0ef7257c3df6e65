"""The shared data converter: built per activation by the SDK, so it must be cheap to build (worker/converter.py)."""

from __future__ import annotations


def test_every_data_converter_shares_the_process_json_converter():
    """The SDK builds DataConverters per activation; each must reuse one JSON converter and its TypeAdapter cache."""
    import dataclasses

    from pydantic import BaseModel

    from worker.converter import DATA_CONVERTER, BifrostPayloadConverter

    class Probe(BaseModel):
        n: int

    first, second = BifrostPayloadConverter(), BifrostPayloadConverter()
    assert first.converters[b"json/plain"] is second.converters[b"json/plain"]
    again = dataclasses.replace(DATA_CONVERTER).payload_converter
    payload = first.to_payloads([Probe(n=1)])[0]
    assert again.from_payloads([payload], [Probe]) == [Probe(n=1)]
