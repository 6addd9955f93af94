"""Channel serialization options (wire-format.md "Channel serialization"): validation and the normalised form."""

from __future__ import annotations

from collections.abc import Mapping

import msgspec

from devicehub.domain.events import KIND_FIRMWARE_UPDATE
from devicehub.errors import FieldError, ValidationFailed

DEFAULT_RETENTION_S = 24 * 3600  # spec §8: events are kept 24 hours

MIN_CHUNK_SIZE = 100  # wire-format.md
MAX_CHUNK_SIZE = 20_000  # spec §6 rule 1, §8
DEFAULT_CHUNK_SIZE = 10_000  # spec §8
SERIALIZATION_TYPE = "v2"  # spec §2.5

CFG_FLAGS = (
    "include_timestamp",
    "include_uid",
    "include_original_ep",
    "deregistrations_as_object",
    "use_endpoint_name",
)
# issue 34: opt-in flags beyond the spec's, shown only when set (a Pelion client sees the spec's object)
EXTRA_FLAGS = ("include_cursor", "include_firmware_updates")
MIN_RETENTION_S = 60
MAX_RETENTION_S = 7 * 24 * 3600
_TOP_KEYS = frozenset({"type", "max_chunk_size", "cfg", "retention_s"})


class ChannelOptions(msgspec.Struct, frozen=True, kw_only=True):
    """How one channel serializes its events and how large its batches are."""

    max_chunk_size: int = DEFAULT_CHUNK_SIZE
    include_timestamp: bool = False
    include_uid: bool = False
    include_original_ep: bool = False
    deregistrations_as_object: bool = False
    use_endpoint_name: bool = False
    include_cursor: bool = False  # issue 34 #1, #2: cursors and per-device sequences (cursors.py)
    retention_s: int = DEFAULT_RETENTION_S  # issue 34 #1: how long delivered events stay for a resume
    include_firmware_updates: bool = False  # issue 33: the `firmware-updates` array (campaign and device changes)

    def carries(self, kind: int) -> bool:
        """Whether events of `kind` go to this channel: firmware updates only when it opted in, so a Pelion
        client's NotificationMessage keeps the spec's arrays."""
        return kind != KIND_FIRMWARE_UPDATE or self.include_firmware_updates

    @property
    def encoding(self) -> tuple[bool, bool, bool, bool, bool, bool]:
        """The options that change event bytes (channels with equal tuples share one encoding)."""
        return (
            self.include_timestamp,
            self.include_uid,
            self.include_original_ep,
            self.deregistrations_as_object,
            self.use_endpoint_name,
            self.include_cursor,  # deregistrations become objects, to carry their cursor
        )

    def to_wire(self) -> dict[str, object]:
        """The normalised serialization object, as stored in ChannelConfig and shown by the GETs."""
        cfg: dict[str, object] = {name: getattr(self, name) for name in CFG_FLAGS}
        cfg.update({name: True for name in EXTRA_FLAGS if getattr(self, name)})
        wire: dict[str, object] = {"type": SERIALIZATION_TYPE, "max_chunk_size": self.max_chunk_size, "cfg": cfg}
        if self.retention_s != DEFAULT_RETENTION_S:
            wire["retention_s"] = self.retention_s
        return wire

    @classmethod
    def from_wire(cls, raw: object, field: str = "serialization") -> ChannelOptions:
        """Validate a serialization object from a request body; raises ValidationFailed (400) naming the field."""
        if raw is None:
            return cls()
        if not isinstance(raw, Mapping):
            raise _invalid(field, "must be an object")
        unknown = sorted(set(raw) - _TOP_KEYS)
        if unknown:
            raise _invalid(f"{field}.{unknown[0]}", "unknown field")
        kind = raw.get("type", SERIALIZATION_TYPE)
        if not isinstance(kind, str) or kind.lower() != SERIALIZATION_TYPE:
            raise _invalid(f"{field}.type", f"must be {SERIALIZATION_TYPE!r}")
        chunk = DEFAULT_CHUNK_SIZE
        if raw.get("max_chunk_size") is not None:
            chunk = _int(raw["max_chunk_size"], f"{field}.max_chunk_size")
            if not MIN_CHUNK_SIZE <= chunk <= MAX_CHUNK_SIZE:
                raise _invalid(f"{field}.max_chunk_size", f"must be {MIN_CHUNK_SIZE}…{MAX_CHUNK_SIZE}")
        cfg = raw.get("cfg")
        flags: dict[str, bool] = {}
        if cfg is not None:
            if not isinstance(cfg, Mapping):
                raise _invalid(f"{field}.cfg", "must be an object")
            unknown = sorted(set(cfg) - set(CFG_FLAGS) - set(EXTRA_FLAGS))
            if unknown:
                raise _invalid(f"{field}.cfg.{unknown[0]}", "unknown field")
            flags = {name: _bool(value, f"{field}.cfg.{name}") for name, value in cfg.items() if value is not None}
        retention = DEFAULT_RETENTION_S
        if raw.get("retention_s") is not None:
            retention = _int(raw["retention_s"], f"{field}.retention_s")
            if not MIN_RETENTION_S <= retention <= MAX_RETENTION_S:
                raise _invalid(f"{field}.retention_s", f"must be {MIN_RETENTION_S}…{MAX_RETENTION_S} seconds")
        return cls(max_chunk_size=chunk, retention_s=retention, **flags)

    @classmethod
    def from_stored(cls, stored: Mapping[str, object]) -> ChannelOptions:
        """Options of a stored channel; anything unreadable falls back to the defaults."""
        try:
            return cls.from_wire(dict(stored) or None)
        except ValidationFailed:
            return cls()


def _invalid(name: str, message: str) -> ValidationFailed:
    return ValidationFailed(f"{name}: {message}", fields=(FieldError(name, message),))


def _int(value: object, name: str) -> int:
    # wire-format.md: official examples send numbers as strings ("100")
    if isinstance(value, bool):
        raise _invalid(name, "must be an integer")
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().lstrip("+").isdigit():
        return int(value.strip())
    raise _invalid(name, "must be an integer")


def _bool(value: object, name: str) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise _invalid(name, "must be a boolean")
