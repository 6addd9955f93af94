"""Why a key's channel went (issue 34 #4): what was removed, when and why, kept for REMEMBER_S and said to an
observer (the console's feed) as it happens.

A channel the service removes on its own — its callback receiver answered 410 Gone (`remove_on_gone`), delivery
failed for 24 hours, its socket did not come back or nothing polled it — leaves an application that reconnects
with nothing but a 404. The record answers `GET /v2/notification/channel?include=status` (a 404 whose JSON says
`removed`) until the key registers a channel again or REMEMBER_S passes; at most MAX_REMEMBERED keys are kept (the
oldest go first). Records live on the node that removed the channel.
"""

from __future__ import annotations

from collections.abc import Callable

import msgspec

from devicehub.domain.timefmt import rfc3339

REMEMBER_S = 24 * 3600.0
MAX_REMEMBERED = 10_000
GONE = "gone"  # the callback receiver answered 410 Gone
FAILING = "failing"  # spec §6: callback delivery failed for 24 hours
DELETED = "deleted"  # a REST call (on this node or another) deleted it
INACTIVE = "inactive"  # spec §3.3, §8: the sweeper's time rules


class ChannelRemoval(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    kind: str  # callback | websocket | pull
    url: str | None = None  # a callback channel's URL
    removed_at: str  # RFC 3339
    cause: str  # GONE | FAILING | DELETED | INACTIVE
    reason: str  # as the log line says it


def cause_of(reason: str, gone: bool) -> str:
    if gone:
        return GONE
    if reason.startswith("callback delivery failing"):
        return FAILING
    return DELETED if "deleted" in reason else INACTIVE


class Removals:
    def __init__(self) -> None:
        self._records: dict[str, tuple[float, str, ChannelRemoval]] = {}  # key → (when, account, record)
        self.observer: Callable[[str, str, ChannelRemoval], None] | None = None  # (account, key, record)

    def record(self, key_id: str, account_id: str, removal: ChannelRemoval, now: float) -> None:
        records = self._records
        records.pop(key_id, None)
        records[key_id] = (now, account_id, removal)
        while len(records) > MAX_REMEMBERED or now - next(iter(records.values()))[0] > REMEMBER_S:
            del records[next(iter(records))]
        if self.observer is not None:
            self.observer(account_id, key_id, removal)

    def get(self, key_id: str, now: float) -> ChannelRemoval | None:
        entry = self._records.get(key_id)
        if entry is None or now - entry[0] > REMEMBER_S:
            return None
        return entry[2]

    def forget(self, key_id: str) -> None:
        """The key has a channel again."""
        self._records.pop(key_id, None)


def removal(kind: str, url: str, reason: str, gone: bool, now: float) -> ChannelRemoval:
    return ChannelRemoval(
        kind=kind, url=url or None, removed_at=rfc3339(now), cause=cause_of(reason, gone), reason=reason
    )
