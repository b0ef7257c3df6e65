"""CloudWatch alarm states over boto3 DescribeAlarms: which of a region's alarms are in ALARM now (read-only).

The region guard counts a region with an alarm in ALARM as unhealthy at that look (issue #19 item 1), beside its
metrics against its peers and its SLOs. Throttling and server errors are retried (by botocore, then by the
activity); a missing permission or bad credentials are not.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from activities.adapters.aws import CREDENTIAL_CODES, PERMISSION_CODES, aws_error, aws_status
from activities.adapters.base import MetricsError

ALARM = "ALARM"
_PERMISSION_HINT = "grant cloudwatch:DescribeAlarms to the worker's IAM role"


@dataclass(frozen=True)
class AlarmStates:
    """The alarms of one region (names may use {service}), read through one CloudWatch client of its AWS region."""

    names: tuple[str, ...]
    client: Callable[[], Any]  # a boto3 CloudWatch client, built inside the activity (secrets are read there)

    def for_service(self, service: str) -> list[str]:
        return [n.replace("{service}", service) for n in self.names]

    async def read(self, service: str) -> tuple[list[str], list[str]]:
        """(the alarms of `service` in ALARM now, the ones that do not exist): a missing alarm is a note for the
        guard's page, never a reason to evacuate a region."""
        names = self.for_service(service)
        if not names:
            return [], []
        return await asyncio.to_thread(self._read, names)

    def _read(self, names: list[str]) -> tuple[list[str], list[str]]:
        found: dict[str, str] = {}
        try:
            pages = self.client().get_paginator("describe_alarms").paginate(
                AlarmNames=names, AlarmTypes=["MetricAlarm", "CompositeAlarm"])
            for page in pages:
                for alarm in [*page.get("MetricAlarms", []), *page.get("CompositeAlarms", [])]:
                    found[alarm["AlarmName"]] = alarm["StateValue"]
        except ClientError as err:
            code, message, http = aws_error(err)
            raise MetricsError("could not read the CloudWatch alarms", target=f"DescribeAlarms {', '.join(names)}",
                               status=aws_status(code, http), detail=message,
                               hint=_PERMISSION_HINT if code in PERMISSION_CODES else None,
                               retryable=code not in PERMISSION_CODES | CREDENTIAL_CODES) from None
        except BotoCoreError as err:
            raise MetricsError("could not read the CloudWatch alarms", target=f"DescribeAlarms {', '.join(names)}",
                               status=type(err).__name__, retryable=True) from None
        return [n for n in names if found.get(n) == ALARM], [n for n in names if n not in found]
