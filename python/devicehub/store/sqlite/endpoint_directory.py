"""The SQLite store's endpoint directory (issue 16 #1): which device id each (account, endpoint name) has, and which
account each enrolled name belongs to, held in memory so that admitting a Register costs no round trip to the
writer thread.

It is complete, not a cache: loaded from the database at open, then changed only after the write that changes the
tables committed. That holds because this process is the database's one writer (as `read_cache.py` assumes).
An id claimed for a new name is *reserved* until the device's record, written with the next registration batch,
committed; a reserved id is known not to be in the tables, so reading it back needs no query either.
Loop thread only: a claim runs without an await, so one name gets one id whatever the interleaving.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

Key = tuple[str, str]  # (account id, endpoint name)


class EndpointDirectory:
    def __init__(self) -> None:
        self._stored: dict[Key, str] = {}  # committed rows of devices and device_ids
        self._reserved: dict[Key, str] = {}  # claimed, not committed yet
        self._reserved_ids: set[str] = set()
        self._enrolled: dict[str, str] = {}  # endpoint name → account id

    def load(self, enrollments: Iterable[tuple[str, str]], ids: Iterable[tuple[str, str, str]]) -> None:
        """`enrollments`: (endpoint name, account id); `ids`: (account id, endpoint name, device id)."""
        self._enrolled = dict(enrollments)
        self._stored = {(account_id, name): device_id for account_id, name, device_id in ids}

    def __len__(self) -> int:
        return len(self._stored) + len(self._reserved)

    # ---- enrolments ---------------------------------------------------------------------------------
    def enrolled(self, endpoint_name: str) -> str | None:
        return self._enrolled.get(endpoint_name)

    def enrolled_committed(self, endpoint_name: str, account_id: str) -> None:
        self._enrolled[endpoint_name] = account_id

    # ---- device ids ---------------------------------------------------------------------------------
    def known(self, account_id: str, endpoint_name: str) -> str | None:
        """The name's id, stored or reserved."""
        key = (account_id, endpoint_name)
        return self._stored.get(key) or self._reserved.get(key)

    def reserve(self, account_id: str, endpoint_name: str, mint: Callable[[], str]) -> str:
        """The name's id, else a new one from `mint`, reserved for it now."""
        known = self.known(account_id, endpoint_name)
        if known is not None:
            return known
        candidate = mint()
        self._reserved[(account_id, endpoint_name)] = candidate
        self._reserved_ids.add(candidate)
        return candidate

    def is_reserved(self, device_id: str) -> bool:
        """Claimed and not committed: the tables do not hold it."""
        return device_id in self._reserved_ids

    def stored(self, account_id: str, endpoint_name: str, device_id: str) -> None:
        """The device's row committed: its claim is in the tables from here on."""
        key = (account_id, endpoint_name)
        if self._reserved.get(key) == device_id:
            del self._reserved[key]
            self._reserved_ids.discard(device_id)
        self._stored.setdefault(key, device_id)  # a row already there keeps its id (INSERT OR IGNORE)

    def deleted(self, device_id: str, names: Iterable[Key]) -> None:
        """The device's rows, stored under `names`, were deleted: its name may mint a new id."""
        for key in names:
            if self._stored.get(key) == device_id:
                del self._stored[key]
        for key in [key for key, held in self._reserved.items() if held == device_id]:  # reserved: a few at most
            del self._reserved[key]
        self._reserved_ids.discard(device_id)
