"""Which account an endpoint name belongs to, and the one device id of each (account, name)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol


class EnrolmentStore(Protocol):
    """Methods are atomic: a failing call leaves nothing half-written."""

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
