"""Settings from the command line and the environment: each field of a settings class (config.py) is a flag and a
`DEVICEHUB_<FIELD>` env var; a flag wins over the variable, which wins over the field's default, and every value is
checked against the limits its field states (BadSetting)."""

from __future__ import annotations

import argparse
import dataclasses
import os
import typing
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit

from devicehub.config import ENV_PREFIX
from devicehub.errors import BadSetting

S = TypeVar("S")


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _field_type(cls: type, f: dataclasses.Field[Any]) -> Any:
    hints = typing.get_type_hints(cls)
    return hints[f.name]


def add_arguments(parser: argparse.ArgumentParser, cls: type) -> None:
    """One flag per settings field; defaults stay None so env and field defaults can fill in."""
    for f in dataclasses.fields(cls):
        kind = _field_type(cls, f)
        names = [_flag(f.name)]
        if "short" in f.metadata:
            names.insert(0, f.metadata["short"])
        env = ENV_PREFIX + f.name.upper()
        help_text = f"{f.metadata.get('help', '')} (env {env}, default {f.default!s})"
        if kind is bool:
            parser.add_argument(*names, dest=f.name, action="store_true", default=None, help=help_text)
        else:
            conv = kind if kind in (int, float, str, Path) else str
            parser.add_argument(*names, dest=f.name, type=conv, default=None, help=help_text)


def _parse_env(kind: Any, raw: str, name: str) -> Any:
    if kind is bool:
        if raw.lower() in ("1", "true", "yes", "on"):
            return True
        if raw.lower() in ("0", "false", "no", "off", ""):
            return False
        raise BadSetting(f"{name}: expected a boolean, got {raw!r}")
    try:
        return kind(raw)
    except ValueError:
        raise BadSetting(f"{name}: expected {_kind_name(kind)}, got {raw!r}") from None


def _kind_name(kind: Any) -> str:
    return {int: "an integer", float: "a number"}.get(kind, "a string")


def _check(f: dataclasses.Field[Any], value: Any, source: str) -> None:
    """The limits a field's metadata states; `source` names the flag or variable the value came from."""
    if "range" in f.metadata:
        low, high = f.metadata["range"]
        if not low <= value <= high:
            raise BadSetting(f"{source} must be between {low} and {high}, got {value}")
    if "choices" in f.metadata and value not in f.metadata["choices"]:
        raise BadSetting(f"{source} must be one of {', '.join(f.metadata['choices'])}, got {value!r}")
    if "url" in f.metadata and value:
        schemes = f.metadata["url"]
        example = f"{schemes[0]}://127.0.0.1:{5683 if schemes[0] == 'coap' else 6379}"
        try:
            parts = urlsplit(value)
            port = parts.port  # raises ValueError when out of range or not a number
        except ValueError as exc:
            raise BadSetting(f"{source}: {exc} in {value!r} (expected {example})") from None
        if parts.scheme not in schemes or (parts.scheme != "unix" and not parts.hostname):
            raise BadSetting(f"{source} must look like {example}, got {value!r}")
        del port


def build(cls: type[S], args: argparse.Namespace | None = None, environ: Mapping[str, str] | None = None) -> S:
    """Flag wins over `DEVICEHUB_*` env var, which wins over the field default; values are checked (BadSetting)."""
    env = os.environ if environ is None else environ
    values: dict[str, Any] = {}
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        given = getattr(args, f.name, None) if args is not None else None
        env_name = ENV_PREFIX + f.name.upper()
        if given is not None and given is not False:
            values[f.name] = given
            _check(f, given, _flag(f.name))
            continue
        if env_name in env:
            values[f.name] = _parse_env(_field_type(cls, f), env[env_name], env_name)
            _check(f, values[f.name], env_name)
    return cls(**values)


def parse(cls: type[S], argv: Sequence[str], environ: Mapping[str, str] | None = None) -> S:
    """Settings of `cls` from an argument list alone (used by tests and embedding code)."""
    parser = argparse.ArgumentParser()
    add_arguments(parser, cls)
    return build(cls, parser.parse_args(list(argv)), environ)
