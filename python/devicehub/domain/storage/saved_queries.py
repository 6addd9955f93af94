"""Saved device directory filters (issue 32 #3): the records of `domain/saved_queries.py`, one name each per account."""

from __future__ import annotations

from typing import Protocol

from devicehub.domain.saved_queries import Saved, SavedQuery


class SavedQueryStore(Protocol):
    async def put_saved_query(self, query: SavedQuery, *, create: bool) -> Saved:
        """Create (`create`) or replace the query, atomically checking the name and the count."""

    async def get_saved_query(self, account_id: str, query_id: str) -> SavedQuery | None: ...

    async def list_saved_queries(self, account_id: str) -> list[SavedQuery]:
        """Every query of the account (at most MAX_PER_ACCOUNT), by id."""

    async def delete_saved_query(self, account_id: str, query_id: str) -> bool: ...
