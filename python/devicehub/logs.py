"""Logging set-up: text for people or one JSON object a line for machines, with the API request id on each line."""

from __future__ import annotations

import argparse
import contextvars
import json
import logging
import os
import sys
import time
from typing import Any

from devicehub.config import ENV_PREFIX, LOG_FORMATS, LOG_LEVELS
from devicehub.errors import BadSetting
from devicehub.ids import new_id

# set by the API's request-id middleware for the duration of one request; "-" outside any request
request_id: contextvars.ContextVar[str] = contextvars.ContextVar("devicehub_request_id", default="-")

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class _RequestId(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        if not hasattr(record, "request_id"):
            record.request_id = request_id.get()
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object a line: time, level, logger, message, request_id, and the exception text if any."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        rid = getattr(record, "request_id", "-")
        if rid != "-":
            entry["request_id"] = rid
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False)


class _TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        rid = getattr(record, "request_id", "-")
        return line if rid == "-" else f"{line} [request {rid}]"


def _value(args: argparse.Namespace, name: str, default: str, choices: tuple[str, ...]) -> str:
    given = getattr(args, name, None)
    source = "--" + name.replace("_", "-")
    if given is None:
        source = ENV_PREFIX + name.upper()
        given = os.environ.get(source, default)
    value = str(given).lower()
    if value not in choices:
        raise BadSetting(f"{source} must be one of {', '.join(choices)}, got {given!r}")
    return value


def setup_logging(args: argparse.Namespace) -> None:
    """The root handler on stderr, at `--log-level`, in `--log-format` (flag, then `DEVICEHUB_*`, then default)."""
    level = _value(args, "log_level", "info", LOG_LEVELS)
    fmt = _value(args, "log_format", "text", LOG_FORMATS)
    handler = logging.StreamHandler(sys.stderr)
    handler.addFilter(_RequestId())
    handler.setFormatter(JsonFormatter() if fmt == "json" else _TextFormatter(TEXT_FORMAT))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())


def request_id_for(request: Any) -> str:
    """The API request's id: the caller's `X-Request-Id` if sane, else a new one. It is on the request's log lines
    (`request_id` in JSON, `[request …]` in text) and in the `X-Request-Id` response header (api/edge.py)."""
    given = request.headers.get("X-Request-Id", "")
    return given if 0 < len(given) <= 64 and given.isascii() and given.isprintable() else new_id()


class _BadClientInput(logging.Filter):
    """aiohttp logs a malformed request (BadHttpMessage: the client's fault) as ERROR with a traceback; make it
    one INFO line. The client already got its 400."""

    def filter(self, record: logging.LogRecord) -> bool:
        from aiohttp.http_exceptions import HttpProcessingError

        error = record.exc_info[1] if record.exc_info else None
        if isinstance(error, HttpProcessingError) and 400 <= (error.code or 0) < 500:
            record.levelno, record.levelname = logging.INFO, "INFO"
            first = str(error.message).strip().splitlines()[0] if error.message else type(error).__name__
            record.msg, record.args = "bad request from a client (%s): %s", (type(error).__name__, first)
            record.exc_info, record.exc_text = None, None
        return True


def quiet_bad_requests() -> None:
    """Install `_BadClientInput` on aiohttp's server logger, once per process."""
    server = logging.getLogger("aiohttp.server")
    if not any(isinstance(f, _BadClientInput) for f in server.filters):
        server.addFilter(_BadClientInput())
