"""Ids of accounts, keys, devices and API requests: one source for all of them."""

from __future__ import annotations

import secrets
import threading


class IdSource:
    """Random 32-hex-digit ids (device ids are their registration's CoAP location: they must not be guessable), from
    the operating system's generator read for many ids at once (issue 16 #1: a `getrandom` per Register was 4 % of
    the event loop's samples in a registration storm profile; issue 15: one per API request, 2-4 % of a hot
    endpoint's)."""

    def __init__(self, batch: int = 256) -> None:
        self._batch = batch
        self._hex = ""
        self._at = 0
        self._lock = threading.Lock()  # one id is one slice, whichever thread asks

    def __call__(self) -> str:
        with self._lock:
            if self._at >= len(self._hex):
                self._hex, self._at = secrets.token_hex(16 * self._batch), 0
            self._at += 32
            return self._hex[self._at - 32 : self._at]


new_id = IdSource()
