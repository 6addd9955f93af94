"""The DTLS ticket key ring of a node on its data directory (issue 31 #5): one sealed file, so a restarted node
still opens the tickets it gave out (domain/ticket_keys.py)."""

from __future__ import annotations

import logging
from pathlib import Path

from cryptography.exceptions import InvalidTag

from devicehub.domain.credentials import SecretBox
from devicehub.domain.ticket_keys import LABEL, TicketRing, advanced
from devicehub.private_files import write_private

log = logging.getLogger("devicehub.dtls")

FILE = "dtls-ticket-keys"


class FileTicketKeys:
    def __init__(self, path: Path, box: SecretBox) -> None:
        self._path = path
        self._box = box

    async def rotate(self, now: float, interval: float) -> TicketRing:
        ring = self._read()
        new = advanced(ring, now, interval)
        if new is None:
            assert ring is not None
            return ring
        write_private(self._path, self._box.seal(new.encode(), LABEL).hex() + "\n", replace=True)
        return new

    def _read(self) -> TicketRing | None:
        try:
            return TicketRing.decode(self._box.open(bytes.fromhex(self._path.read_text().strip()), LABEL))
        except FileNotFoundError:
            return None
        except (ValueError, KeyError, InvalidTag) as error:  # another sealing key, or a damaged file: start a new ring
            log.warning(
                "%s unreadable (%s): new DTLS ticket keys; devices resume no earlier session", self._path, error
            )
            return None
