"""The `Store` protocol: every stateful feature goes through it; backends pass one contract suite."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Literal, Protocol

from devicehub.domain.model import (
    Account,
    ApiKey,
    BootstrapConfig,
    ChannelConfig,
    ChannelDrops,
    DesiredValue,
    Device,
    DeviceRequest,
    DeviceSharedKey,
    ObservationRecord,
    PresubscriptionRule,
    RegistrationRecord,
    ReportedValue,
    SnapshotResource,
    StoredEvent,
    TrustedCa,
)
from devicehub.store.device_query import DeviceQuery

# What creating a device's pre-shared key did (issue 28 #1): `created` (the key written and its name enrolled into
# the key's account), `exists` (this account holds a key for the name), `taken` (the name belongs to another account)
KeyClaim = Literal["created", "exists", "taken"]


class Store(Protocol):
    """Async persistence. Methods are atomic: a failing call leaves nothing half-written."""

    async def open(self) -> None: ...
    async def close(self) -> None:
        """Flush everything pending and release resources (graceful stop loses nothing)."""

    # accounts and keys -------------------------------------------------------------------
    async def create_account(self, account: Account) -> None: ...
    async def ensure_account(self, account: Account) -> Account:
        """`account`, created, unless an account of its name exists: then that one. One step, so that callers
        creating one name at once (nodes started together, issue 31) all get the same account and no error."""

    async def get_account(self, account_id: str) -> Account | None: ...
    async def find_account_by_name(self, name: str) -> Account | None: ...
    async def list_accounts(self) -> list[Account]: ...
    async def create_key(self, key: ApiKey) -> None: ...
    async def find_key_by_hash(self, key_hash: str) -> ApiKey | None:
        """The key with this hash, revoked or not (callers check `revoked_at`)."""

    async def list_keys(self, account_id: str) -> list[ApiKey]: ...
    async def revoke_key(self, key_id: str, at: float) -> bool:
        """False when no such key."""

    # enrollment and devices ----------------------------------------------------------------
    async def enroll(self, account_id: str, endpoint_name: str) -> None: ...
    async def enrolled_account(self, endpoint_name: str) -> str | None: ...
    async def claim_device_id(self, account_id: str, endpoint_name: str, mint: Callable[[], str]) -> str:
        """The one device id of (account, endpoint name): the existing one, else a new one from `mint`, atomically —
        two concurrent first registrations of a name get the same id (issue 14 #1). `mint` is called only when the
        name may need an id (a storm re-registers known names: no id is made for them, issue 16)."""

    async def admit_authenticated(self, account_id: str, endpoint_name: str, mint: Callable[[], str]) -> str | None:
        """The device id of an endpoint that proved a credential of `account_id` (a PSK, a trusted CA's certificate):
        None, and nothing written, when the name is enrolled into another account (issue 28 #1); a name enrolled
        nowhere is enrolled into `account_id` first, so the first authenticated Register claims it. Then as
        `claim_device_id`."""

    async def admit_endpoint(
        self, endpoint_name: str, default_account_id: str | None, mint: Callable[[], str]
    ) -> tuple[str, str] | None:
        """(account id, device id) of a registering endpoint: its enrolment's account, else `default_account_id`,
        and `claim_device_id` there; None when neither names an account. One store round trip (issue 16 #1)."""

    async def put_device(self, device: Device) -> None:
        """Insert or replace by id; (account_id, endpoint_name) stays unique."""

    async def get_device(self, device_id: str) -> Device | None: ...
    async def get_devices(self, device_ids: Sequence[str]) -> list[Device]:
        """The stored devices among `device_ids` (unknown ids are left out), in no particular order."""

    async def put_registered_devices(
        self,
        devices: Sequence[Device],
        unchanged: Sequence[str] = (),
        reported: Sequence[tuple[str, str, ReportedValue]] = (),
    ) -> None:
        """Full registrations of many devices at once (issue 16 #1): each device inserted or replaced, a snapshot
        entry added for each of its resources (existing ones kept), and every resource subscription on it dropped
        with the snapshot's subscribed marks (spec §2.1). `unchanged`: ids of devices registered again whose stored
        record stays as it is: only their subscriptions and marks are dropped (nothing is written when they have
        none). `reported`: (device id, path, value) the registrations announced (spec §2.4), stored as
        `set_reported` after this call would store them, but with the entries in the same write."""

    async def find_device(self, account_id: str, endpoint_name: str) -> Device | None: ...
    async def list_devices(
        self,
        account_id: str,
        *,
        state: str | None = None,
        query: DeviceQuery | None = None,
        after: str | None = None,
        limit: int = 50,
        descending: bool = False,
    ) -> list[Device]:
        """Devices matching `query` (and `state`), ordered by device id (descending on request); `after` is an
        exclusive device id cursor in that order."""

    async def count_devices(
        self, account_id: str, *, state: str | None = None, query: DeviceQuery | None = None
    ) -> int:
        """Exactly how many devices `list_devices` would page through with the same filters."""

    async def delete_device(self, device_id: str) -> None:
        """Removes the device, its snapshot, its subscriptions and its pending requests."""

    async def devices_last_seen_before(self, cutoff: float, limit: int = 1000) -> list[str]: ...

    # live LwM2M registrations and observations (issue 12 #5) -----------------------------------
    async def put_registration(self, registration: RegistrationRecord) -> None: ...
    async def put_registrations(
        self,
        registrations: Sequence[RegistrationRecord],
        observations: Sequence[ObservationRecord] = (),
        fresh: Sequence[str] = (),
    ) -> None:
        """A batch in one transaction (issue 16 #1): first drop every stored observation of the `fresh` device ids
        (a Register ends them), then insert or replace the registrations and the observations."""

    async def get_registration(self, device_id: str) -> RegistrationRecord | None: ...
    async def list_registrations(self) -> list[RegistrationRecord]: ...
    async def registrations_expiring(self, now: float, limit: int = 1000) -> list[RegistrationRecord]:
        """Registrations whose `expires_at` is before `now`, soonest first."""

    async def remove_registration(self, device_id: str, updated_at: float | None = None) -> bool:
        """Remove it and its observations; with `updated_at`, only if it was not updated meanwhile (so of several
        nodes expiring one registration exactly one wins and announces it). False when nothing was removed."""

    async def put_observation(self, observation: ObservationRecord) -> None: ...
    async def get_observation(self, token: bytes) -> ObservationRecord | None: ...
    async def device_observations(self, device_id: str) -> list[ObservationRecord]: ...
    async def remove_observation(self, token: bytes) -> None: ...

    # resource subscriptions (per key) ---------------------------------------------------------
    async def add_subscription(self, key_id: str, device_id: str, path: str) -> None: ...
    async def remove_subscription(self, key_id: str, device_id: str, path: str) -> bool: ...
    async def list_subscriptions(self, key_id: str, device_id: str) -> list[str]: ...
    async def remove_device_subscriptions(self, device_id: str, key_id: str | None = None) -> int:
        """Every key's when key_id is None (a full registration drops them all, spec §2.1)."""

    async def subscribers(self, device_id: str) -> list[tuple[str, str]]:
        """(key_id, path) pairs of every resource subscription on the device."""

    # presubscriptions (per key) ---------------------------------------------------------------
    async def set_presubscriptions(
        self, key_id: str, account_id: str, rules: Sequence[PresubscriptionRule]
    ) -> None: ...
    async def get_presubscriptions(self, key_id: str) -> list[PresubscriptionRule]: ...
    async def account_presubscriptions(self, account_id: str) -> list[tuple[str, list[PresubscriptionRule]]]:
        """(key_id, rules) for every key of the account that has rules."""

    # notification channels ----------------------------------------------------------------------
    async def put_channel(self, channel: ChannelConfig) -> None:
        """Insert or replace the key's one channel (spec §2.5: the last one set wins)."""

    async def get_channel(self, key_id: str) -> ChannelConfig | None: ...
    async def delete_channel(self, key_id: str) -> bool:
        """Also deletes the channel's queued events."""

    async def list_channels(self, account_id: str | None = None) -> list[ChannelConfig]: ...

    # channel event journal: events leave only from the head (delivery, overflow, expiry) ---------
    async def add_channel_drops(self, key_id: str, drops: ChannelDrops) -> None:
        """Add to the key's lost-event counters (removed with the channel)."""

    async def get_channel_drops(self, key_id: str) -> ChannelDrops: ...
    async def append_events(self, key_id: str, events: Sequence[StoredEvent]) -> None: ...
    async def load_events(self, key_id: str) -> list[StoredEvent]: ...
    async def drop_head_events(self, key_id: str, count: int) -> None: ...

    # device-request queue (guaranteed delivery, survives restarts) ----------------------------
    async def enqueue_request(self, request: DeviceRequest, max_pending: int = 0) -> None:
        """Queued in one step, or refused: DuplicateAsyncId while the key's async-id is pending, QueueFull when the
        device has `max_pending` requests waiting already (0: no bound)."""

    async def pending_requests(self, device_id: str) -> list[DeviceRequest]:
        """In enqueue order."""

    async def devices_with_pending_requests(self, device_ids: Sequence[str]) -> set[str]:
        """Those of `device_ids` with at least one queued request: one read for a batch of registrations."""

    async def all_pending_requests(self) -> list[DeviceRequest]: ...
    async def count_pending_requests(self) -> int:
        """How many requests wait, without reading them (the metrics gauge, scraped every few seconds)."""

    async def find_request(self, key_id: str, async_id: str) -> DeviceRequest | None: ...
    async def update_request(self, request: DeviceRequest) -> None: ...
    async def remove_request(self, key_id: str, async_id: str) -> bool: ...

    # device state snapshot (spec §2.4) ---------------------------------------------------------
    async def set_reported(self, device_id: str, path: str, reported: ReportedValue) -> None: ...
    async def set_reported_many(self, values: Sequence[tuple[str, str, ReportedValue]]) -> None:
        """`set_reported` for each (device id, path, value), in order (a later one of a path replaces an earlier)."""

    async def set_desired(self, device_id: str, path: str, desired: DesiredValue) -> None: ...
    async def set_subscribed(self, device_id: str, path: str, subscribed: bool) -> None: ...
    async def clear_subscribed(self, device_id: str) -> None: ...
    async def ensure_resources(self, device_id: str, paths: Sequence[str]) -> None:
        """Add snapshot entries (no values) for new paths; existing ones are kept (spec §2.4 rule 3)."""

    async def get_snapshot(self, device_id: str) -> list[SnapshotResource]:
        """Ordered by path."""

    async def get_desired(self, device_id: str, path: str) -> DesiredValue | None:
        """One resource's desired value (what a write request updates), without reading the whole snapshot."""

    # cluster coordination ------------------------------------------------------------------------
    async def acquire_lease(self, name: str, owner: str, ttl_seconds: float, now: float) -> bool:
        """Take or renew a named lease; False while another owner holds an unexpired one."""

    async def release_lease(self, name: str, owner: str) -> None: ...

    # bootstrap configurations (LwM2M bootstrap server) ---------------------------------------------
    async def put_bootstrap_config(self, config: BootstrapConfig) -> bool:
        """Insert or replace; False (nothing written) when the endpoint name is configured by, or enrolled
        into, another account."""

    async def get_bootstrap_config(self, endpoint_name: str) -> BootstrapConfig | None: ...
    async def list_bootstrap_configs(
        self, account_id: str, *, after: str | None = None, limit: int = 50
    ) -> list[BootstrapConfig]:
        """The account's configurations ordered by endpoint name; `after` is an exclusive name cursor."""

    async def delete_bootstrap_config(self, account_id: str, endpoint_name: str) -> bool:
        """False when the account has no configuration for this endpoint name."""

    # device credentials (issue 13 #3) ---------------------------------------------------------
    async def create_shared_key(self, key: DeviceSharedKey) -> KeyClaim:
        """Insert the key and enrol its endpoint name into the key's account, in one step. Nothing is written unless
        `created`: `exists` when this account holds a key for the name; `taken` when the name belongs to another
        account — enrolled there, configured for bootstrap there, or holding a key there (issue 28 #1)."""
        ...

    async def get_shared_key(self, endpoint_name: str) -> DeviceSharedKey | None: ...
    async def list_shared_keys(
        self, account_id: str | None, *, after: str | None = None, limit: int = 1000
    ) -> list[DeviceSharedKey]:
        """By endpoint name, those after `after`; account None lists every account's."""
        ...

    async def delete_shared_key(self, endpoint_name: str) -> bool: ...
    async def put_trusted_ca(self, ca: TrustedCa) -> None: ...
    async def list_trusted_cas(self, account_id: str | None = None) -> list[TrustedCa]: ...
    async def delete_trusted_ca(self, ca_id: str) -> bool: ...
