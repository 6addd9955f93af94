"""The Uri-Query of the registration and bootstrap interfaces: its items as names and values, and the endpoint name."""

from __future__ import annotations

MAX_ENDPOINT_NAME = 64


def parse_query(items: list[str]) -> dict[str, str]:
    """Uri-Query items as a dict; a flag without `=` (`Q`) maps to ''."""
    query: dict[str, str] = {}
    for item in items:
        for part in item.split("&"):  # tolerate clients that send one `&`-joined option
            name, _, value = part.partition("=")
            if name:
                query[name] = value
    return query


def endpoint_name_in(query: dict[str, str]) -> str | None:
    """The `ep` parameter when it is a usable endpoint name (1-64 printable characters), else None."""
    name = query.get("ep", "")
    if not name or len(name) > MAX_ENDPOINT_NAME or not name.isprintable():
        return None
    return name
