"""`SqliteStore`: the embedded default, every aggregate's SQLite module on one writer (writer.py).

SQLite files in WAL mode under the data directory: the main file, and `requests.db` for the device-request queue,
written by a thread in Rust that needs no GIL (store/sqlite/request_file.py).

Reported values (the snapshot's hot path: one per device notification) are coalesced in memory per
(device, path) and written in one transaction every `--flush-interval-ms` (`reported_flush_s`); reads of the
snapshot and `close()` flush first, so callers read their own writes and a graceful stop loses nothing. A `kill -9`
can lose at most the values of the last flush interval — the same bound as the channel journal (README,
"Durability").

Every write runs on one dedicated writer thread (style rule 12: the event loop never blocks on disk). Writes are
combined (issue 15): those that arrive while a transaction runs wait and go into the next one together, one hand-off
to the thread and one commit for all of them; each runs inside its own savepoint, so a failing call leaves nothing
half-written and fails alone, and no caller hears its result before the transaction holding it committed. The REST
hot paths' reads (keys, accounts, devices, snapshots, subscriptions) run on a small pool of reader
threads with their own read-only connections (issue 15): WAL lets them read the last committed state while the
writer works, so a read never waits behind queued writes; every write is awaited by its caller, so a later read sees
it. Devices and snapshots once read are served from memory (read_cache.py), kept current by this store's own
writes. Records are kept as msgpack blobs beside the columns that queries filter on; the blobs use the same msgspec
Structs as every other backend.
"""

from __future__ import annotations

from devicehub.domain.model import Device
from devicehub.domain.storage.device_query import DeviceQuery
from devicehub.outages import unavailable
from devicehub.store.sqlite.accounts import SqliteAccounts
from devicehub.store.sqlite.bootstrap import SqliteBootstrapConfigs
from devicehub.store.sqlite.channels import SqliteChannels
from devicehub.store.sqlite.contacts import SqliteContacts
from devicehub.store.sqlite.credentials import SqliteCredentials
from devicehub.store.sqlite.device_log import SqliteDeviceLog
from devicehub.store.sqlite.devices import SqliteDevices
from devicehub.store.sqlite.enrolment import SqliteEnrolment
from devicehub.store.sqlite.firmware import SqliteFirmware
from devicehub.store.sqlite.leases import SqliteLeases
from devicehub.store.sqlite.objects import SqliteAccountObjects
from devicehub.store.sqlite.registrations import SqliteRegistrations
from devicehub.store.sqlite.requests import SqliteRequests
from devicehub.store.sqlite.saved_queries import SqliteSavedQueries
from devicehub.store.sqlite.snapshot import SqliteSnapshot
from devicehub.store.sqlite.subscriptions import SqliteSubscriptions
from devicehub.store.sqlite.usage import SqliteUsage


class SqliteStore(
    SqliteAccounts,
    SqliteEnrolment,
    SqliteDevices,
    SqliteRegistrations,
    SqliteDeviceLog,
    SqliteSavedQueries,
    SqliteUsage,
    SqliteSubscriptions,
    SqliteRequests,
    SqliteChannels,
    SqliteCredentials,
    SqliteBootstrapConfigs,
    SqliteAccountObjects,
    SqliteContacts,
    SqliteLeases,
    SqliteFirmware,
    SqliteSnapshot,  # after the aggregates that write the snapshot too (devices, requests)
):
    """The domain's `Store` on SQLite files one node owns."""

    shared = False  # one node's files: nothing to coordinate with other nodes

    def unavailable(self, error: BaseException) -> bool:
        return unavailable(error)

    async def list_devices_and_contacts(
        self,
        account_id: str,
        *,
        query: DeviceQuery | None = None,
        after: str | None = None,
        limit: int = 50,
        descending: bool = False,
    ) -> tuple[list[Device], dict[str, float]]:
        # the page (often from the read cache, no thread hop), then one query for its contacts
        devices = await self.list_devices(account_id, query=query, after=after, limit=limit, descending=descending)
        return devices, await self.get_contacts(account_id, [d.id for d in devices])
