"""`Store`: every aggregate's port in one object, as the node opens it and passes it around."""

from __future__ import annotations

from typing import Protocol

from devicehub.domain.storage.accounts import AccountStore
from devicehub.domain.storage.bootstrap import BootstrapConfigStore
from devicehub.domain.storage.channels import ChannelStore
from devicehub.domain.storage.contacts import ContactStore
from devicehub.domain.storage.credentials import CredentialStore
from devicehub.domain.storage.device_log import DeviceLogStore
from devicehub.domain.storage.devices import DeviceStore
from devicehub.domain.storage.enrolment import EnrolmentStore
from devicehub.domain.storage.firmware import FirmwareStore
from devicehub.domain.storage.leases import LeaseStore
from devicehub.domain.storage.objects import AccountObjectStore
from devicehub.domain.storage.registrations import RegistrationStore
from devicehub.domain.storage.requests import RequestQueueStore
from devicehub.domain.storage.saved_queries import SavedQueryStore
from devicehub.domain.storage.snapshot import SnapshotStore
from devicehub.domain.storage.subscriptions import SubscriptionStore
from devicehub.domain.storage.usage import UsageStore


class Store(
    AccountStore,
    EnrolmentStore,
    DeviceStore,
    RegistrationStore,
    DeviceLogStore,
    SavedQueryStore,
    UsageStore,
    SnapshotStore,
    SubscriptionStore,
    RequestQueueStore,
    ChannelStore,
    CredentialStore,
    BootstrapConfigStore,
    AccountObjectStore,
    ContactStore,
    LeaseStore,
    FirmwareStore,
    Protocol,
):
    """Async persistence of every aggregate; backends pass one contract suite (tests/integration/store)."""

    # Several nodes share this store (Redis): API-key revocations, channel ownership and held devices are then
    # coordinated across nodes; False for the embedded SQLite store, which one node owns.
    shared: bool

    async def open(self) -> None: ...
    async def close(self) -> None:
        """Flush everything pending and release resources (graceful stop loses nothing)."""

    def unavailable(self, error: BaseException) -> bool:
        """This store cannot serve this now: it cannot write (`Unavailable`: full disk, I/O error) or its server
        does not answer. Background work that meets it retries later and says so once; not the caller's fault."""
        ...
