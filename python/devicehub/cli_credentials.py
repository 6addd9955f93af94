"""`devicehub psk …` and `devicehub certs …`: device credentials against the store (issue 13 #3).

A running service takes the change up within its credential refresh interval (node.py); the REST API
(`/v2/device-shared-keys`, `/v3/trusted-certificates`) does the same at once on the node that serves it."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

from devicehub.config import StoreSettings
from devicehub.settings_flags import add_arguments, build


def _service(store: Any, settings: StoreSettings) -> Any:
    from devicehub.clock import SystemClock
    from devicehub.domain.credentials import CredentialService, SecretBox, load_secret_key
    from devicehub.serve_hints import secret_key_path

    if not settings.secret_key_file:
        Path(settings.data_dir).mkdir(parents=True, exist_ok=True)
    box = SecretBox(load_secret_key(secret_key_path(settings.data_dir, settings.secret_key_file)))
    return CredentialService(store, SystemClock(), box)


def _command(
    run: Callable[[Coroutine[Any, Any, int]], int],
    with_store: Callable[[StoreSettings, Callable[[Any], Coroutine[Any, Any, int]]], Coroutine[Any, Any, int]],
) -> Callable[[argparse.Namespace], int]:
    def command(args: argparse.Namespace) -> int:
        from devicehub.domain.accounts import AccountService
        from devicehub.domain.timefmt import rfc3339

        settings = build(StoreSettings, args)
        pem = Path(args.pem).read_bytes() if args.kind == "certs" and args.action == "add" else b""

        async def action(store: Any) -> int:
            from devicehub.clock import SystemClock

            account = await AccountService(store, SystemClock()).resolve_account(args.account)
            credentials = _service(store, settings)
            if args.kind == "psk":
                if args.action == "add":
                    secret = sys.stdin.readline().strip() if args.secret_hex == "-" else args.secret_hex
                    await credentials.add_psk(account.id, args.endpoint_name, secret)
                    print(f"pre-shared key of {args.endpoint_name} stored for {account.name}")
                elif args.action == "list":
                    after = None
                    while page := await credentials.list_psks(account.id, after=after, limit=500):
                        for key in page:
                            print(f"{key.endpoint_name}\t{rfc3339(key.created_at)}")
                        after = page[-1].endpoint_name
                else:
                    await credentials.delete_psk(account.id, args.endpoint_name)
                    print(f"removed the pre-shared key of {args.endpoint_name}")
            elif args.action == "add":
                ca = await credentials.add_ca(account.id, args.name or Path(args.pem).stem, pem)
                print(f"{ca.id}\t{ca.subject}")
            elif args.action == "list":
                for ca in await credentials.list_cas(account.id):
                    print(f"{ca.id}\t{ca.name}\t{ca.subject}\tuntil {rfc3339(ca.not_after)}")
            else:
                await credentials.remove_ca(account.id, args.ca_id)
                print(f"removed trusted CA {args.ca_id}")
            return 0

        return run(with_store(settings, action))

    return command


def add_credential_commands(
    sub: argparse._SubParsersAction[argparse.ArgumentParser],
    run: Callable[[Coroutine[Any, Any, int]], int],
    with_store: Callable[[StoreSettings, Callable[[Any], Coroutine[Any, Any, int]]], Coroutine[Any, Any, int]],
) -> None:
    command = _command(run, with_store)
    psk = sub.add_parser("psk", help="device pre-shared keys for DTLS (the identity is the endpoint name)")
    psk_sub = psk.add_subparsers(dest="action", required=True)
    add = psk_sub.add_parser("add", help="store a device's key (sealed with the secret key file)")
    add.add_argument("account", help="account id or name")
    add.add_argument("endpoint_name", help="16-64 printable ASCII characters")
    add.add_argument("secret_hex", help="128-512 bit key in hex (optional 0x); - reads it from stdin")
    listing = psk_sub.add_parser("list", help="list an account's keyed endpoint names (never the keys)")
    listing.add_argument("account", help="account id or name")
    remove = psk_sub.add_parser("remove", help="remove a device's key; its DTLS sessions end")
    remove.add_argument("account", help="account id or name")
    remove.add_argument("endpoint_name")
    for parser in (add, listing, remove):
        add_arguments(parser, StoreSettings)
    psk.set_defaults(run=command, kind="psk")

    certs = sub.add_parser("certs", help="CA certificates an account trusts for its devices' DTLS certificates")
    certs_sub = certs.add_subparsers(dest="action", required=True)
    add = certs_sub.add_parser("add", help="trust a CA: devices with certificates it issued join the account")
    add.add_argument("account", help="account id or name")
    add.add_argument("pem", help="PEM file of the CA certificate")
    add.add_argument("--name", default="", help="a label (default: the file name)")
    listing = certs_sub.add_parser("list", help="list an account's trusted CAs")
    listing.add_argument("account", help="account id or name")
    remove = certs_sub.add_parser("remove", help="stop trusting a CA; its devices' DTLS sessions end")
    remove.add_argument("account", help="account id or name")
    remove.add_argument("ca_id")
    for parser in (add, listing, remove):
        add_arguments(parser, StoreSettings)
    certs.set_defaults(run=command, kind="certs")
