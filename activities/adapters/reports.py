"""Where canary reports are stored and the URL people open them by: a local folder (optionally served over
HTTP by the worker) or an S3 bucket.

A report's URL depends only on its rollout and analysis ids (plus the store's settings), so the verdict can
carry the link before the report is rendered; `put` then stores the page under that same key, overwriting
any earlier copy, which makes a retried render harmless.
"""

from __future__ import annotations

import asyncio
import errno
import os
import re
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import quote

from activities.adapters.aws import lazy_aws_client
from activities.adapters.base import ReportError as ReportError  # the tree lives in base.py; importers of it here keep working

CONTENT_TYPE = "text/html; charset=utf-8"
_PERMANENT = {errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOTDIR, errno.EISDIR}  # retrying cannot help


def _escape(match: re.Match[str]) -> str:
    return "".join(f"~{b:02x}" for b in match.group().encode("utf-8"))


def _safe(name: str) -> str:
    """One path segment, injective: `/` becomes `_`; every other character outside [A-Za-z0-9.-] (`_` and `~`
    included), and a dot at either end, becomes `~` and its UTF-8 bytes in hex. Common ids stay as they read."""
    out = re.sub(r"[^A-Za-z0-9./-]", _escape, name).replace("/", "_")
    out = re.sub(r"^\.|\.$", _escape, out)
    return out or "~"


def report_key(rollout_id: str, analysis_id: str) -> str:
    """`<rollout id>/<analysis id>.html`, each made a safe path segment by `_safe`: two different rollouts or
    analyses never share a key (`1.0.0.` is `1.0.0~2e`, not `1.0.0`), so one report never overwrites another's."""
    return f"{_safe(rollout_id)}/{_safe(analysis_id)}.html"


class ReportStore(Protocol):
    """Stores rendered reports and names the URL each one is (or will be) reachable at."""

    def url_for(self, rollout_id: str, analysis_id: str) -> str | None:
        """The URL of the report of this analysis; cheap, no I/O, known before the report exists. None: this
        store keeps no reports, so none is drawn."""

    async def put(self, key: str, html: str) -> str:
        """Store `html` under `key` (from `report_key`), replacing any earlier copy; return its URL."""


class NoReports:
    """A store that names no URL, so stages draw no reports (a verdict never depends on one): for
    `bifrost worker --no-reports` on hosts short of CPU, benchmarks of orchestration alone, and tests with
    many failing stages whose charts would take most of a core."""

    def url_for(self, rollout_id: str, analysis_id: str) -> str | None:
        return None

    async def put(self, key: str, html: str) -> str:
        raise ReportError("reports are off for this worker")


class LocalReportStore:
    """A folder on the worker's disk; URLs are file:// unless `public_base_url` says where the folder is served."""

    def __init__(self, root: str | Path = ".bifrost/reports", public_base_url: str | None = None) -> None:
        self.root = Path(root).expanduser().resolve()
        self.public_base_url = public_base_url.rstrip("/") if public_base_url else None

    @property
    def base_url(self) -> str:
        """What every report URL of this store starts with."""
        return self.public_base_url or self.root.as_uri()

    def _url(self, key: str) -> str:
        return f"{self.base_url}/{quote(key)}"

    def url_for(self, rollout_id: str, analysis_id: str) -> str:
        return self._url(report_key(rollout_id, analysis_id))

    def path_of(self, key: str) -> Path:
        """The file a key is stored in; refuses keys that would leave the folder."""
        path = (self.root / key).resolve()
        if not path.is_relative_to(self.root) or path == self.root:
            raise ReportError(f"report key {key!r} points outside {self.root}", retryable=False)
        return path

    async def put(self, key: str, html: str) -> str:
        await asyncio.to_thread(self._write, self.path_of(key), html)
        return self._url(key)

    def _write(self, path: Path, html: str) -> None:
        """Write to a temporary file and rename it into place: readers never see half a report."""
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".html")
            try:
                with os.fdopen(fd, "w", encoding="utf-8") as f:
                    f.write(html)
                os.chmod(tmp, 0o644)
                os.replace(tmp, path)
            except BaseException:
                Path(tmp).unlink(missing_ok=True)
                raise
        except OSError as err:
            raise ReportError(f"cannot write report {path}: {err.strerror}; check that the worker may write to "
                              f"{self.root} (worker --reports, or reports.dir in the targets file)",
                              retryable=err.errno not in _PERMANENT) from err


S3_SCHEME = "s3://"


class S3ReportStore:
    """An S3 bucket (or prefix). A report's link is `public_base_url` + key when the bucket is published, else
    its object address `s3://bucket/key`: never a presigned URL, which carries the worker's access key id (and
    session token) into histories, chat and terminals. `presign` makes a fresh GET link when a person asks
    (`bifrost report-link`)."""

    def __init__(
        self,
        bucket: str,
        client_factory: Callable[[], Any],
        *,
        prefix: str = "",
        public_base_url: str | None = None,
        presign_expires_seconds: int = 7 * 24 * 3600,
    ) -> None:
        self.bucket = bucket
        self.prefix = prefix.strip("/") + "/" if prefix.strip("/") else ""
        self.public_base_url = public_base_url.rstrip("/") if public_base_url else None
        self.presign_expires_seconds = presign_expires_seconds
        self._client = lazy_aws_client(client_factory, "S3", ReportError)

    def _s3(self) -> Any:
        """One boto3 client per store, made on first use inside an activity (that is when secrets are read)."""
        return self._client.get()

    def object_key(self, key: str) -> str:
        return self.prefix + key

    def _url(self, key: str) -> str:
        if self.public_base_url:
            return f"{self.public_base_url}/{quote(self.object_key(key))}"
        return f"{S3_SCHEME}{self.bucket}/{self.object_key(key)}"

    def url_for(self, rollout_id: str, analysis_id: str) -> str:
        """With a public base URL a plain URL; otherwise the object's `s3://` address (no credential in either)."""
        return self._url(report_key(rollout_id, analysis_id))

    def presign(self, link: str, expires_seconds: int | None = None) -> str:
        """A fresh presigned GET for a report link of this store (`s3://bucket/key`, or a bare object key)."""
        from botocore.exceptions import BotoCoreError

        object_key = link
        if link.startswith(S3_SCHEME):
            bucket, _, object_key = link[len(S3_SCHEME):].partition("/")
            if bucket != self.bucket:
                raise ReportError(f"{link} is not in this store's bucket {self.bucket}; check reports.bucket in the "
                                  "targets file", retryable=False)
        if not object_key or not object_key.startswith(self.prefix):
            raise ReportError(f"{link} is not a report of this store (keys start with {self.prefix or 'anything'})",
                              retryable=False)
        try:
            return str(self._s3().generate_presigned_url(
                "get_object", Params={"Bucket": self.bucket, "Key": object_key},
                ExpiresIn=expires_seconds or self.presign_expires_seconds,
            ))
        except BotoCoreError as err:  # no credentials to sign with, ...
            raise ReportError(f"cannot presign a link to s3://{self.bucket}/{object_key} ({err}); check the aws "
                              "section of the targets file, or set reports.public_base_url", retryable=False) from err

    async def put(self, key: str, html: str) -> str:
        from botocore.exceptions import BotoCoreError, ClientError

        s3 = self._s3()
        try:
            await asyncio.to_thread(
                s3.put_object, Bucket=self.bucket, Key=self.object_key(key), Body=html.encode("utf-8"),
                ContentType=CONTENT_TYPE, CacheControl="no-cache",
            )
        except ClientError as err:
            code = err.response.get("Error", {}).get("Code", "")
            msg = err.response.get("Error", {}).get("Message", str(err))
            retryable = code not in ("NoSuchBucket", "AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch",
                                     "AllAccessDisabled", "InvalidBucketName")
            hint = ("the activity will be retried" if retryable else
                    "check reports.bucket in the targets file and the worker's s3:PutObject permission")
            raise ReportError(f"storing report s3://{self.bucket}/{self.object_key(key)}: S3 {code}: {msg}; {hint}",
                              retryable=retryable) from err
        except BotoCoreError as err:
            raise ReportError(f"storing report s3://{self.bucket}/{self.object_key(key)}: cannot reach S3 "
                              f"({type(err).__name__}: {err}); the activity will be retried") from err
        return self._url(key)
