"""How the worker reaches AWS (Route 53, CloudWatch): endpoint, profile and credentials by env-var name; AWS errors in words."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from activities.adapters.base import AdapterError, TrafficError, http_status
from activities.adapters.lazy import LazyClient
from activities.adapters.secrets import resolve_secret


@dataclass(frozen=True)
class AwsConnection:
    """How to reach AWS: optional endpoint (moto, VPC endpoints), profile, and credentials by env-var name."""

    endpoint_url: str | None = None
    profile: str | None = None
    access_key_id_env: str | None = None
    secret_access_key_env: str | None = None
    session_token_env: str | None = None
    timeout_seconds: float = 10.0
    max_attempts: int = 3

    def client(self, service: str, region_name: str) -> Any:
        """A boto3 client; secrets are read from the environment here, inside the activity, never earlier."""
        creds: dict[str, str] = {}
        if self.access_key_id_env and self.secret_access_key_env:
            creds["aws_access_key_id"] = resolve_secret(self.access_key_id_env, f"AWS {service}")
            creds["aws_secret_access_key"] = resolve_secret(self.secret_access_key_env, f"AWS {service}")
            if self.session_token_env:
                creds["aws_session_token"] = resolve_secret(self.session_token_env, f"AWS {service}")
        session = boto3.session.Session(profile_name=self.profile)
        config = Config(
            connect_timeout=self.timeout_seconds, read_timeout=self.timeout_seconds,
            retries={"mode": "standard", "max_attempts": self.max_attempts},
        )
        return session.client(service, region_name=region_name, endpoint_url=self.endpoint_url, config=config, **creds)


def lazy_aws_client(factory: Callable[[], Any], service: str, error: type[AdapterError] = TrafficError) -> LazyClient[Any]:
    """An AWS adapter's boto3 client made on first use (activities/adapters/lazy.py); `error` is the adapter's kind."""
    return LazyClient(factory, service, error=error, hint="check the aws section of the targets file",
                      catch=(BotoCoreError,))


CREDENTIAL_CODES = frozenset({
    "UnrecognizedClientException", "InvalidClientTokenId", "InvalidSignatureException", "SignatureDoesNotMatch",
    "ExpiredToken", "ExpiredTokenException", "IncompleteSignature", "MissingAuthenticationToken",
})
PERMISSION_CODES = frozenset({"AccessDenied", "AccessDeniedException", "UnauthorizedOperation", "NotAuthorized"})
THROTTLING_CODES = frozenset({
    "Throttling", "ThrottlingException", "ThrottledException", "RequestThrottled", "RequestLimitExceeded",
    "TooManyRequestsException", "PriorRequestNotComplete", "ServiceUnavailable", "InternalFailure", "InternalError",
})


def aws_error(err: ClientError) -> tuple[str, str, int | None]:
    """(error code, AWS's own message, HTTP status) of a botocore ClientError, never its whole rendering."""
    error = err.response.get("Error", {}) or {}
    status = (err.response.get("ResponseMetadata", {}) or {}).get("HTTPStatusCode")
    message = str(error.get("Message") or "")
    if "<" in message and ">" in message:  # an HTML error page from a proxy or endpoint, not AWS's own words
        message = re.sub(r"<[^>]*>", " ", message)
    return str(error.get("Code") or "error"), message, status if isinstance(status, int) else None


def aws_status(code: str, http: int | None) -> str:
    """'AccessDenied (HTTP 403)': the AWS error code first, as AWS documents and support cases name it.

    When there was no AWS error code (botocore then uses the HTTP status as the code), '500 Internal Server Error'."""
    if http and code == str(http):
        return http_status(http)
    return f"{code} (HTTP {http})" if http else code
