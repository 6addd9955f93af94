"""`devicehub objects …`: an account's own LwM2M object definitions (DDF XML files) against the store (issue 32 #1).

A running service sees a change within its object cache's lifetime (domain/object_catalog.py CACHE_S); the REST API
(`/v3/lwm2m-objects`) does the same at once on the node that serves it."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

from devicehub.config import StoreSettings
from devicehub.settings_flags import add_arguments, build


def _command(
    run: Callable[[Coroutine[Any, Any, int]], int],
    with_store: Callable[[StoreSettings, Callable[[Any], Coroutine[Any, Any, int]]], Coroutine[Any, Any, int]],
) -> Callable[[argparse.Namespace], int]:
    def command(args: argparse.Namespace) -> int:
        from devicehub.clock import SystemClock
        from devicehub.domain.accounts import AccountService
        from devicehub.domain.object_catalog import ObjectCatalog

        settings = build(StoreSettings, args)
        document = Path(args.file).read_bytes() if args.action == "add" else b""

        async def action(store: Any) -> int:
            clock = SystemClock()
            account = await AccountService(store, clock).resolve_account(args.account)
            catalog = ObjectCatalog(store, clock)
            if args.action == "add":
                for definition in await catalog.add(account.id, document, replace=args.replace):
                    print(f"{definition.id}\t{definition.name}\t{len(definition.resources)} resources")
            elif args.action == "list":
                for definition, source in await catalog.definitions(account.id):
                    if source == "account" or args.all:
                        print(f"{definition.id}\t{definition.name}\t{source}")
            else:
                await catalog.delete(account.id, args.object_id)
                print(f"removed the account's definition of object {args.object_id}")
            return 0

        return run(with_store(settings, action))

    return command


def add_object_commands(
    sub: argparse._SubParsersAction[argparse.ArgumentParser],
    run: Callable[[Coroutine[Any, Any, int]], int],
    with_store: Callable[[StoreSettings, Callable[[Any], Coroutine[Any, Any, int]]], Coroutine[Any, Any, int]],
) -> None:
    objects = sub.add_parser("objects", help="the account's own LwM2M object definitions (DDF XML)")
    actions = objects.add_subparsers(dest="action", required=True)
    add = actions.add_parser("add", help="add the objects of a DDF XML file (all or none)")
    add.add_argument("file", help="DDF XML file, the OMA LwM2M registry's format")
    add.add_argument("--replace", action="store_true", help="replace definitions the account already has")
    listing = actions.add_parser("list", help="list the account's definitions")
    listing.add_argument("--all", action="store_true", help="the shipped OMA registry's definitions too")
    actions.add_parser("delete", help="delete the account's definition of an object").add_argument(
        "object_id", type=int
    )
    for action in actions.choices.values():
        action.add_argument("--account", required=True, help="account id or name")
        add_arguments(action, StoreSettings)
    objects.set_defaults(run=_command(run, with_store))
