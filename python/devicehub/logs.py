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
