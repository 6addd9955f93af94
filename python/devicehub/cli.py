"""The `devicehub` command: one subcommand per process kind and the store administration commands."""

from __future__ import annotations

import argparse
import asyncio
import sys
import typing
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

from devicehub import __version__
from devicehub.config import StoreSettings
from devicehub.errors import DevicehubError
from devicehub.settings_flags import add_arguments, build

Runner = Callable[[argparse.Namespace], int]


class _Parser(argparse.ArgumentParser):
    """Argument errors as one line (`devicehub serve: --http-port: invalid int value: 'x'`), exit code 2."""

    def error(self, message: str) -> typing.NoReturn:
        self.exit(2, f"{self.prog}: {message} (see {self.prog} --help)\n")


def _run(coro: Coroutine[Any, Any, int]) -> int:
    try:
        import uvloop

        return uvloop.run(coro)
    except ImportError:  # pragma: no cover - uvloop is a dependency on every supported platform
        return asyncio.run(coro)


async def _with_store(settings: StoreSettings, action: Callable[[Any], Coroutine[Any, Any, int]]) -> int:
    from devicehub.startup import redacted, starting
    from devicehub.store import open_store

    store = open_store(settings.data_dir, settings.redis_url)
    with starting(f"the store {redacted(settings.redis_url) or settings.data_dir}"):
        await store.open()
    try:
        return await action(store)
    finally:
        await store.close()


def _accounts(args: argparse.Namespace) -> int:
    from devicehub.clock import SystemClock
    from devicehub.domain.accounts import AccountService

    settings = build(StoreSettings, args)

    async def action(store: Any) -> int:
        service = AccountService(store, SystemClock())
        if args.action == "create":
            account = await service.create_account(args.name, tier=args.tier)
            print(f"{account.id}\t{account.name}\t{account.tier}")
        elif args.action == "list":
            for account in await store.list_accounts():
                print(f"{account.id}\t{account.name}\t{account.tier}")
        elif args.action == "enroll":
            account = await service.resolve_account(args.account)
            # issue 28 #1: a name is one account's; moving it from another account is said, not done silently
            owners = {name: await store.enrolled_account(name) for name in args.endpoint_names}
            elsewhere = sorted(name for name, owner in owners.items() if owner not in (None, account.id))
            if elsewhere and not args.move:
                print(
                    f"devicehub: {', '.join(elsewhere)} enrolled into another account; nothing enrolled "
                    "(--move takes them over: their devices then join this account)",
                    file=sys.stderr,
                )
                return 2
            for name in args.endpoint_names:
                await store.enroll(account.id, name)
            print(f"enrolled {len(args.endpoint_names)} endpoint name(s) into {account.name}")
        return 0

    return _run(_with_store(settings, action))


def _keys(args: argparse.Namespace) -> int:
    from devicehub.clock import SystemClock
    from devicehub.domain.accounts import AccountService

    settings = build(StoreSettings, args)

    async def action(store: Any) -> int:
        service = AccountService(store, SystemClock())
        if args.action == "create":
            key, secret = await service.create_key(args.account, args.name, admin=args.admin)
            print(f"key id {key.id} for account {key.account_id}; the key is shown once:", file=sys.stderr)
            print(secret)
        elif args.action == "list":
            account = await service.resolve_account(args.account)
            for key in await store.list_keys(account.id):
                state = "revoked" if key.revoked_at is not None else "active"
                print(f"{key.id}\t{key.name}\t{state}" + ("\tadmin" if key.admin else ""))
        elif args.action == "revoke":
            await service.revoke_key(args.key_id)
            print(f"revoked {args.key_id}")
        return 0

    return _run(_with_store(settings, action))


def _store(args: argparse.Namespace) -> int:
    settings = build(StoreSettings, args)
    if not settings.redis_url:
        print("devicehub store migrate: the SQLite store has one layout; nothing to convert")
        return 0
    from devicehub.startup import redacted, starting
    from devicehub.store.redis.migrate import migrate

    with starting(f"the store {redacted(settings.redis_url)}"):
        converted = _run(migrate(settings.redis_url))
    print(f"converted {converted} key(s) to the cluster-ready layout")
    return 0


def _bootstrap(args: argparse.Namespace) -> int:
    from devicehub.clock import SystemClock
    from devicehub.domain.accounts import AccountService
    from devicehub.domain.bootstrap import MODE_NAMES, BootstrapConfigs, ConfigInput

    settings = build(StoreSettings, args)

    def show(config: Any) -> None:
        mode = MODE_NAMES.get(config.security_mode, str(config.security_mode))
        print(
            f"{config.endpoint_name}\t{config.server_uri}\t{mode}\tssid={config.short_server_id}"
            f"\tlt={config.lifetime}\tb={config.binding}"
        )

    async def action(store: Any) -> int:
        clock = SystemClock()
        account = await AccountService(store, clock).resolve_account(args.account)
        configs = BootstrapConfigs(store, clock)
        if args.action == "set":
            identity = args.identity_hex if args.identity_hex is not None else args.identity.encode()
            given = ConfigInput(
                server_uri=args.server_uri,
                security_mode=args.security_mode,
                public_identity=identity,
                server_public_key=args.server_public_key_hex,
                secret_key=args.secret_key_hex,
                short_server_id=args.short_server_id,
                lifetime=args.lifetime,
                binding=args.binding,
            )
            config, _ = await configs.put(account.id, args.endpoint_name, given)
            show(config)
        elif args.action == "get":
            show(await configs.get(account.id, args.endpoint_name))
        elif args.action == "list":
            after: str | None = None
            while batch := await configs.list(account.id, after=after, limit=500):
                for config in batch:
                    show(config)
                after = batch[-1].endpoint_name
        elif args.action == "delete":
            await configs.delete(account.id, args.endpoint_name)
            print(f"deleted the bootstrap configuration of {args.endpoint_name}")
        return 0

    return _run(_with_store(settings, action))


def _add_bootstrap_command(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from devicehub.domain.bootstrap import DEFAULT_LIFETIME, SECURITY_MODES

    bootstrap = sub.add_parser("bootstrap", help="per-endpoint configurations of the LwM2M bootstrap server")
    actions = bootstrap.add_subparsers(dest="action", required=True)
    set_ = actions.add_parser("set", help="create or replace an endpoint's configuration")
    set_.add_argument("endpoint_name")
    set_.add_argument("--server-uri", required=True, help="LwM2M server to install, coap://host:5683")
    set_.add_argument("--security-mode", choices=tuple(SECURITY_MODES), default="no_sec")
    set_.add_argument("--identity", default="", help="PSK identity (text), or the client's public key/certificate")
    set_.add_argument("--identity-hex", type=bytes.fromhex, default=None, help="the same as hex bytes")
    set_.add_argument("--secret-key-hex", type=bytes.fromhex, default=b"", help="PSK or private key, hex")
    set_.add_argument("--server-public-key-hex", type=bytes.fromhex, default=b"", help="server public key, hex")
    set_.add_argument("--short-server-id", type=int, default=1)
    set_.add_argument("--lifetime", type=int, default=DEFAULT_LIFETIME)
    set_.add_argument("--binding", default="U")
    actions.add_parser("get", help="show an endpoint's configuration").add_argument("endpoint_name")
    actions.add_parser("list", help="list the account's configurations")
    actions.add_parser("delete", help="delete an endpoint's configuration").add_argument("endpoint_name")
    for action in actions.choices.values():
        action.add_argument("--account", required=True, help="account id or name")
        add_arguments(action, StoreSettings)
    bootstrap.set_defaults(run=_bootstrap)


def _add_admin_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    accounts = sub.add_parser("accounts", help="create and list accounts, enroll endpoint names")
    accounts_sub = accounts.add_subparsers(dest="action", required=True)
    create = accounts_sub.add_parser("create", help="create an account")
    create.add_argument("name")
    create.add_argument("--tier", choices=("commercial", "free"), default="commercial")
    add_arguments(create, StoreSettings)
    listing = accounts_sub.add_parser("list", help="list accounts")
    add_arguments(listing, StoreSettings)
    enroll = accounts_sub.add_parser("enroll", help="let these endpoint names join the account")
    enroll.add_argument("account", help="account id or name")
    enroll.add_argument("endpoint_names", nargs="+")
    enroll.add_argument(
        "--move", action="store_true", help="take over names enrolled into another account (else: refused, exit 2)"
    )
    add_arguments(enroll, StoreSettings)
    accounts.set_defaults(run=_accounts)

    store = sub.add_parser("store", help="store administration")
    store_actions = store.add_subparsers(dest="action", required=True)
    migrate = store_actions.add_parser(
        "migrate", help="convert Redis data of the key layout before Redis Cluster support (all nodes stopped)"
    )
    add_arguments(migrate, StoreSettings)
    store.set_defaults(run=_store)

    keys = sub.add_parser("keys", help="create, list and revoke API keys")
    keys_sub = keys.add_subparsers(dest="action", required=True)
    create = keys_sub.add_parser("create", help="create a key; prints it alone on the last line")
    create.add_argument("--account", required=True, help="account id or name")
    create.add_argument("--name", default="", help="a label for the key")
    create.add_argument(
        "--admin", action="store_true", help="an administrator key: may manage the account's keys over /v3/api-keys"
    )
    add_arguments(create, StoreSettings)
    listing = keys_sub.add_parser("list", help="list an account's keys (never the secrets)")
    listing.add_argument("--account", required=True, help="account id or name")
    add_arguments(listing, StoreSettings)
    revoke = keys_sub.add_parser("revoke", help="revoke a key by its id")
    revoke.add_argument("key_id")
    add_arguments(revoke, StoreSettings)
    keys.set_defaults(run=_keys)
    _add_bootstrap_command(sub)

    from devicehub.cli_credentials import add_credential_commands

    add_credential_commands(sub, _run, _with_store)
    from devicehub.cli_objects import add_object_commands

    add_object_commands(sub, _run, _with_store)


def parser() -> argparse.ArgumentParser:
    top = _Parser(prog="devicehub", description="LwM2M device management service")
    top.add_argument("--version", action="version", version=f"devicehub {__version__}")
    sub = typing.cast(
        "argparse._SubParsersAction[argparse.ArgumentParser]", top.add_subparsers(dest="command", required=True)
    )
    for register in _COMMANDS:
        register(sub)
    _add_admin_commands(sub)
    return top


def _serve(args: argparse.Namespace) -> int:
    from devicehub.config import ServeSettings
    from devicehub.node import serve

    return _run(serve(build(ServeSettings, args)))


def _add_serve(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from devicehub.config import ServeSettings

    serve = sub.add_parser("serve", help="run the service: REST/WebSocket API, LwM2M server, channel delivery")
    add_arguments(serve, ServeSettings)
    serve.set_defaults(run=_serve)


def _simulate(args: argparse.Namespace) -> int:
    from devicehub.config import SimulateSettings
    from devicehub.sim.run import simulate

    return _run(simulate(build(SimulateSettings, args)))


def _add_simulate(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from devicehub.config import SimulateSettings

    simulate = sub.add_parser("simulate", help="run N simulated LwM2M devices against a server")
    add_arguments(simulate, SimulateSettings)
    simulate.set_defaults(run=_simulate)


def _edge(args: argparse.Namespace) -> int:
    from devicehub.config import EdgeSettings
    from devicehub.edge.runner import edge

    return _run(edge(build(EdgeSettings, args)))


def _add_edge(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from devicehub.edge.runner import add_edge_command

    add_edge_command(sub, _edge)


def _channels(args: argparse.Namespace) -> int:
    from devicehub.channels.inspect import show
    from devicehub.config import ChannelsSettings

    return _run(show(build(ChannelsSettings, args)))


def _add_channels(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from devicehub.config import ChannelsSettings

    channels = sub.add_parser("channels", help="a key's notification channel: state, queue, rate, errors, drops")
    add_arguments(channels, ChannelsSettings)
    channels.set_defaults(run=_channels)


_COMMANDS: list[Callable[[argparse._SubParsersAction[argparse.ArgumentParser]], None]] = [
    _add_serve,
    _add_simulate,
    _add_edge,
    _add_channels,
]


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        from devicehub.logs import setup_logging

        setup_logging(args)
        run: Runner = args.run
        return run(args)
    except DevicehubError as error:
        print(f"devicehub {args.command}: {error.message}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
