"""Route 53 traffic: read and set the weights of a service's weighted records (one per region), and move them in steps.

Each change is one atomic change batch of UPSERTs against records that already exist, guarded by the
weights read just before (a concurrent mover makes it fail instead of silently overwriting), then
waited for until INSYNC and read back.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError
from temporalio import activity

from activities.adapters.aws import THROTTLING_CODES, aws_error, aws_status, lazy_aws_client
from activities.adapters.base import TrafficError
from activities.adapters.retry import Backoff, retrying

log = logging.getLogger(__name__)

MAX_WEIGHT = 255
ALIAS_TTL_SECONDS = 60  # alias records take the TTL of their target; a common default for load balancers


class ChangeBatchRefused(TrafficError):
    """Route 53 refused a change batch as a whole (InvalidChangeBatch): e.g. its guard no longer matched."""


@dataclass(frozen=True)
class WeightedRecord:
    """A weighted record set: every record with this name and type in the zone, told apart by SetIdentifier."""

    zone_id: str
    record_name: str
    record_type: str = "CNAME"

    @property
    def fqdn(self) -> str:
        return self.record_name if self.record_name.endswith(".") else self.record_name + "."


def shares(weights: dict[str, int]) -> dict[str, float]:
    """Fraction of traffic per set identifier (Route 53 splits by weight / total)."""
    total = sum(weights.values())
    return {k: (w / total if total else 0.0) for k, w in weights.items()}


def validate_weights(current: dict[str, int], wanted: dict[str, int], *, allow_all_zero: bool = False) -> None:
    """Weights must be integers 0..255 for records that exist, and not all zero (Route 53 would then split evenly)."""
    unknown = sorted(set(wanted) - set(current))
    if unknown:
        raise TrafficError(f"unknown set identifiers {unknown}; the record set has {sorted(current)} "
                           "(Bifrost changes weights of existing records, it does not create records)", retryable=False)
    for key, w in wanted.items():
        if not isinstance(w, int) or isinstance(w, bool) or not 0 <= w <= MAX_WEIGHT:
            raise TrafficError(f"weight of {key!r} must be an integer from 0 to {MAX_WEIGHT}, got {w!r}", retryable=False)
    merged = {**current, **wanted}
    if not allow_all_zero and sum(merged.values()) == 0:
        raise TrafficError("all weights would be 0, which Route 53 treats as an even split across every record; "
                           "keep at least one region above 0", retryable=False)


def plan_steps(current: dict[str, int], target: dict[str, int], max_step: int) -> list[dict[str, int]]:
    """Intermediate weight maps from `current` to `target`, no weight moving more than `max_step` per step."""
    if max_step < 1:
        raise TrafficError(f"max_step must be at least 1, got {max_step}", retryable=False)
    full = {**current, **target}
    biggest = max((abs(full[k] - current.get(k, 0)) for k in full), default=0)
    n = max(1, math.ceil(biggest / max_step))
    steps: list[dict[str, int]] = []
    for i in range(1, n + 1):
        step = {k: round(current.get(k, 0) + (full[k] - current.get(k, 0)) * i / n) for k in full}
        if not steps or step != steps[-1]:
            steps.append(step)
    return [s for s in steps if s != current] or [full]


class Route53Traffic:
    """Reads and changes the weights of one weighted record set."""

    def __init__(self, record: WeightedRecord, client_factory: Callable[[], Any], *, poll_seconds: float = 1.0,
                 sync_timeout_seconds: float = 300.0, attempts: int = 6, backoff_seconds: float = 0.5,
                 max_backoff_seconds: float = 8.0) -> None:
        self.record = record
        self.attempts = attempts
        self.backoff_seconds = backoff_seconds
        self.max_backoff_seconds = max_backoff_seconds
        self._route53 = lazy_aws_client(client_factory, "Route 53")
        self.poll_seconds = poll_seconds
        self.sync_timeout_seconds = sync_timeout_seconds

    async def _aws(self, what: str, fn: Callable[..., Any], **kwargs: Any) -> Any:
        """One Route 53 call; retryable failures (5xx, throttling, timeouts, no connection) are tried again here.

        Up to `attempts` tries with exponential backoff (botocore's own retries come on top), heartbeating while
        waiting, so a short outage or one InternalFailure never fails a step. Only a change batch guarded by a
        DELETE of the record as read may be sent again: a copy that lands late is refused by Route 53."""

        def failure(err: Exception, attempt: int) -> TrafficError:
            if isinstance(err, ClientError):
                code, msg, http = aws_error(err)
                retryable = code in THROTTLING_CODES or (http is not None and http >= 500)
                if code == "InvalidChangeBatch":
                    raise ChangeBatchRefused(f"{what}: Route 53 {aws_status(code, http)}: {msg}; the weights were "
                                             "not changed", retryable=False) from err
                if not retryable:
                    raise TrafficError(f"{what}: Route 53 {aws_status(code, http)}: {msg}; check zone_id/record_name "
                                       "in the targets file and the worker's IAM permissions", retryable=False) from err
                found = TrafficError(f"{what}: Route 53 {aws_status(code, http)}: {msg} ({attempt} tries); "
                                     "the activity will be retried")
            else:
                found = TrafficError(f"{what}: cannot reach Route 53 ({type(err).__name__}: {err}; {attempt} tries); "
                                     "the activity will be retried")
            found.__cause__ = err
            return found

        return await retrying(lambda: asyncio.to_thread(fn, **kwargs), retry_on=(ClientError, BotoCoreError),
                              failure=failure, logger=log,
                              backoff=Backoff(self.attempts, self.backoff_seconds, self.max_backoff_seconds),
                              note=lambda _, attempt, delay: f"{what}: try {attempt + 1} in {delay:.1f} s")

    async def records(self) -> dict[str, dict[str, Any]]:
        """The weighted records of the set, by SetIdentifier, as Route 53 returns them."""
        r = self.record
        client = self._route53.get()
        out: dict[str, dict[str, Any]] = {}
        kwargs: dict[str, Any] = {"HostedZoneId": r.zone_id, "StartRecordName": r.fqdn, "StartRecordType": r.record_type}
        while True:
            resp = await self._aws(f"read {r.fqdn}", client.list_resource_record_sets, **kwargs)
            done = False
            for rr in resp.get("ResourceRecordSets", []):
                if rr["Name"].rstrip(".").lower() != r.fqdn.rstrip(".").lower() or rr["Type"] != r.record_type:
                    done = True
                    break
                if "SetIdentifier" in rr and "Weight" in rr:
                    out[rr["SetIdentifier"]] = rr
            if done or not resp.get("IsTruncated"):
                break
            kwargs.update(StartRecordName=resp["NextRecordName"], StartRecordType=resp["NextRecordType"])
            if resp.get("NextRecordIdentifier"):
                kwargs["StartRecordIdentifier"] = resp["NextRecordIdentifier"]
        if not out:
            raise TrafficError(f"no weighted {r.record_type} records named {r.fqdn} in zone {r.zone_id}; "
                               "create them first (one per region, SetIdentifier = region)", retryable=False)
        return out

    @property
    def name(self) -> str:
        """The record set in words, for messages."""
        r = self.record
        return f"Route 53 {r.fqdn} {r.record_type} in zone {r.zone_id}"

    async def weights(self) -> dict[str, int]:
        return {k: int(rr["Weight"]) for k, rr in (await self.records()).items()}

    async def ttl_seconds(self) -> int:
        """The longest TTL among the set's records: how long a resolver may keep sending clients to an old answer.

        Alias records have no TTL of their own (Route 53 uses the target's); they count as 60 s."""
        return max(int(rr.get("TTL", ALIAS_TTL_SECONDS)) for rr in (await self.records()).values())

    async def set_weights(self, wanted: dict[str, int], *, expect: dict[str, int] | None = None,
                          allow_all_zero: bool = False) -> dict[str, int]:
        """Set some or all weights in one atomic change; with `expect`, refuse if someone else moved them first."""
        r = self.record
        records = await self.records()
        current = {k: int(rr["Weight"]) for k, rr in records.items()}
        if expect is not None and current != expect:
            raise TrafficError(f"weights of {r.fqdn} changed under us: expected {expect}, found {current}; "
                               "another change is in progress, re-read and retry", retryable=True)
        validate_weights(current, wanted, allow_all_zero=allow_all_zero)
        target = {**current, **wanted}
        # guarded: DELETE the record exactly as read, then UPSERT it with the new weight, in one atomic batch.
        # Route 53 refuses the whole batch if the record no longer has the values deleted, so a copy of this
        # batch that arrives late (a retried request, a slow network) can never undo a later step.
        changes: list[dict[str, Any]] = []
        for k, w in sorted(wanted.items()):
            if current[k] != w:
                changes.append({"Action": "DELETE", "ResourceRecordSet": records[k]})
                changes.append({"Action": "UPSERT", "ResourceRecordSet": {**records[k], "Weight": w}})
        if not changes:
            return current
        client = self._route53.get()
        try:
            resp = await self._aws(
                f"set weights of {r.fqdn}", client.change_resource_record_sets, HostedZoneId=r.zone_id,
                ChangeBatch={"Comment": f"bifrost: weights {target}", "Changes": changes},
            )
        except ChangeBatchRefused as err:
            # refused by the guard: an earlier copy of this batch may have landed, or someone else moved them
            after = await self.weights()
            if after == target:
                return after
            raise TrafficError(f"weights of {r.fqdn} changed under us: expected {current}, found {after}; "
                               "another change is in progress, re-read and retry", retryable=True) from err
        await self._wait_insync(resp["ChangeInfo"]["Id"])
        after = await self.weights()
        if after != target:
            raise TrafficError(f"weights of {r.fqdn} read back as {after} after setting {target}; another change "
                               "raced this one, re-read and retry", retryable=True)
        return after

    async def _wait_insync(self, change_id: str) -> None:
        """Poll GetChange until Route 53 reports the change INSYNC on its name servers."""
        client = self._route53.get()
        deadline = time.monotonic() + self.sync_timeout_seconds
        while True:
            resp = await self._aws("wait for change", client.get_change, Id=change_id)
            status = resp["ChangeInfo"]["Status"]
            if status == "INSYNC":
                return
            if activity.in_activity():
                activity.heartbeat(f"change {change_id} {status}")
            if time.monotonic() >= deadline:
                raise TrafficError(f"change {change_id} still {status} after {self.sync_timeout_seconds:g}s; "
                                   "Route 53 is slow to propagate, the activity will be retried", retryable=True)
            await asyncio.sleep(self.poll_seconds)

    async def move(self, target: dict[str, int], *, max_step: int,
                   between_steps: Callable[[dict[str, int]], Awaitable[None]] | None = None) -> list[dict[str, int]]:
        """Move toward `target` in steps of at most `max_step` weight, each step guarded, synced and read back.

        `between_steps` runs after every step but the last (e.g. a health check that raises to stop the move).
        """
        current = await self.weights()
        full = {**current, **target}
        validate_weights(current, target)
        applied: list[dict[str, int]] = []
        steps = plan_steps(current, full, max_step)
        for i, step in enumerate(steps):
            log.info("%s: step %d/%d %s", self.record.fqdn, i + 1, len(steps), step)
            current = await self.set_weights(step, expect=current)
            applied.append(current)
            if between_steps is not None and i < len(steps) - 1:
                await between_steps(current)
        return applied


@dataclass(frozen=True)
class RegionTraffic:
    """The weighted record set of a stage and which record in it is this region's."""

    router: Route53Traffic
    set_identifier: str
