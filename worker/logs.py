"""Worker logging: one line per event on stderr (JSON, or text for humans), with the process id and the rollout's context.

Every record is redacted as it is made (`secrets.redact`: known secret values, URL userinfo, key/token query
parameters, bearer tokens), whichever handler prints it, and the HTTP clients' per-request lines (which
carry full URLs) are kept below INFO.
"""

from __future__ import annotations

import json
import logging
import sys
import time

from temporalio import activity

from activities.adapters.secrets import redact

# Libraries that log every request with its URL (webhook keys, presigned S3 links, basic-auth userinfo).
CHATTY_LOGGERS = ("httpx", "httpcore", "botocore", "boto3", "urllib3", "kubernetes", "s3transfer")


class JsonFormatter(logging.Formatter):
    """One JSON object per line, with Temporal's workflow/activity context when present."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, object] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "pid": record.process,
            "msg": record.getMessage(),
        }
        for key in ("temporal_workflow", "temporal_activity"):
            if hasattr(record, key):
                out[key] = getattr(record, key)
        out.update(rollout_context(record))
        if record.exc_info:
            out["error"] = redact(self.formatException(record.exc_info))
        return json.dumps(out, default=str)


LOG_FORMATS = ("json", "text")


def rollout_context(record: logging.LogRecord) -> dict[str, object]:
    """The rollout id, stage and activity attempt a record was logged under, from Temporal's context.

    `workflow.logger`/`activity.logger` attach it; any other logger called inside an activity gets it from the
    running activity. Workflow ids name them: `rollout/<service>/<version>[/<region>/<env>[/report/...]]`."""
    act = getattr(record, "temporal_activity", None)
    wf = getattr(record, "temporal_workflow", None)
    if act is None and wf is None and activity.in_activity():
        info = activity.info()
        act = {"workflow_id": info.workflow_id, "attempt": info.attempt, "activity_type": info.activity_type}
    out: dict[str, object] = {}
    workflow_id = (act or wf or {}).get("workflow_id")
    if isinstance(workflow_id, str) and workflow_id.startswith("rollout/"):
        parts = workflow_id.split("/")
        out["rollout_id"] = "/".join(parts[:3])
        if len(parts) >= 5:
            out["stage"] = "/".join(parts[3:5])
    if act is not None:
        out["activity"] = act.get("activity_type")
        out["attempt"] = act.get("attempt")
    return out


class TextFormatter(logging.Formatter):
    """One line per event for humans: time, level, logger, message, then the rollout context as key=value."""

    def format(self, record: logging.LogRecord) -> str:
        ts = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z"
        context = " ".join(f"{k}={v}" for k, v in rollout_context(record).items() if v is not None)
        line = f"{ts} {record.levelname.lower()} {record.name}: {record.getMessage()}" + (f" [{context}]" if context else "")
        if record.exc_info:  # still one event: the traceback's lines are joined
            line += " | " + redact(self.formatException(record.exc_info)).replace("\n", " | ")
        return line


_installed = False


def install_redaction() -> None:
    """Redact every log record of this process when it is made: its message is rendered, redacted and frozen."""
    global _installed
    if _installed:
        return
    make = logging.getLogRecordFactory()

    def factory(*args: object, **kwargs: object) -> logging.LogRecord:
        record = make(*args, **kwargs)
        try:
            message = record.getMessage()
        except Exception:  # a bad format string: leave it to the handler to report
            return record
        clean = redact(message)
        if clean != message or record.args:
            record.msg, record.args = clean, ()
        return record

    logging.setLogRecordFactory(factory)
    _installed = True


def quiet_chatty_loggers(level: int = logging.WARNING) -> None:
    """Keep the HTTP and cloud clients' per-request lines (full URLs, query keys) out of an INFO log."""
    for name in CHATTY_LOGGERS:
        logging.getLogger(name).setLevel(max(level, logging.getLogger(name).level))


def setup_logging(level: int = logging.INFO, *, log_format: str = "json") -> None:
    """Log to stderr, one line per event: a JSON object (`json`, the default) or a line for humans (`text`);
    every record redacted, the HTTP clients' per-request lines kept out below DEBUG."""
    if log_format not in LOG_FORMATS:
        raise ValueError(f"log format must be one of {', '.join(LOG_FORMATS)}, got {log_format!r}")
    install_redaction()
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if log_format == "json" else TextFormatter())
    logging.basicConfig(level=level, handlers=[handler], force=True)
    if level > logging.DEBUG:
        quiet_chatty_loggers()
