"""Start-up failures as one sentence: what was being started, and why it could not be (exit code 2 in cli.py)."""

from __future__ import annotations

import contextlib
import errno
import os
import sqlite3
import uuid
from collections.abc import Iterator
from pathlib import Path

from devicehub.errors import StartupFailed

_REASONS = {
    errno.EADDRINUSE: "the port is already in use (another devicehub, or another program, holds it)",
    errno.EADDRNOTAVAIL: "that address is not one of this machine's",
    errno.EACCES: "permission denied (ports below 1024 need privileges)",
    errno.ECONNREFUSED: "connection refused (is the server running there?)",
}


def _reason(error: BaseException) -> str:
    if isinstance(error, OSError) and error.errno is None and isinstance(error.__cause__, OSError):
        error = error.__cause__  # uvloop: "could not bind to local_addr" caused by the errno that says why
    if isinstance(error, OSError) and error.errno in _REASONS:
        return _REASONS[error.errno]
    if isinstance(error, OSError) and error.strerror:
        return error.strerror[0].lower() + error.strerror[1:]
    text = str(error).strip().rstrip(".")
    return text or type(error).__name__


@contextlib.contextmanager
def starting(what: str) -> Iterator[None]:
    """Turn the errors of binding a port or reaching a store into `StartupFailed("cannot start <what>: why")`."""
    try:
        yield
    except StartupFailed:
        raise
    except (OSError, OverflowError, ValueError) as error:
        raise StartupFailed(f"cannot start {what}: {_reason(error)}") from error
    except sqlite3.DatabaseError as error:  # "file is not a database", "database disk image is malformed"
        raise StartupFailed(f"cannot start {what}: {error} (a damaged or foreign SQLite file there?)") from error
    except Exception as error:
        # redis-py's errors (ConnectionError, AuthenticationError, ResponseError) derive from RedisError only
        if type(error).__module__.startswith("redis"):
            raise StartupFailed(f"cannot start {what}: {_reason(error)}") from error
        raise


def check_data_dir(path: Path) -> None:
    """The data directory exists (or is made) and takes a file: said at start-up, not at the first write."""
    if path.exists() and not path.is_dir():
        raise StartupFailed(f"data directory {path} is a file, not a directory")
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / f".write-test-{uuid.uuid4().hex}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as error:
        raise StartupFailed(f"data directory {path} is not writable: {_reason(error)}") from error
    if not os.access(path, os.W_OK | os.X_OK):
        raise StartupFailed(f"data directory {path} is not writable")


def redacted(url: str) -> str:
    """A store URL fit for a log line: scheme, host and port, never the password."""
    if not url:
        return ""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(url)
        return f"{parts.scheme}://{parts.hostname or ''}{f':{parts.port}' if parts.port else ''}"
    except ValueError:
        return "(malformed URL)"
