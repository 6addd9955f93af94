"""Commands packed into the Redis protocol by hiredis, in C, on redis-py's asyncio connections (issue 30 #5).

redis-py's synchronous connections pack with `hiredis.pack_command` when hiredis is installed; its asyncio ones do
not yet (redis/redis-py#4176, pull request #4191 open) and pack each argument in Python, re-joining a growing
buffer per argument: 0.69 ms for a directory page's MGET of 1 001 keys against 0.08 ms in C, and about 5 us for a
registration's script call against 1 us. The packer is redis-py's own (`HiredisRespSerializer`, the one its
synchronous client uses), so the bytes on the wire are the same (tests/unit/store/test_redis_packing.py); what
hiredis does not take (a bool, None) raises the same `DataError`.

The command goes to `hiredis.pack_command` as it is unless redis-py's packer would rewrite it (a command name of two
words, `CONFIG GET`; a bytearray or memoryview argument, which hiredis refuses): its per-argument pass in Python was
half of a 1 001-key MGET's packing (issue 30 #5: 0.35 ms against 0.63 ms at load ~10).
"""

from __future__ import annotations

from typing import Any, cast

from redis.asyncio.connection import AbstractConnection, Connection, SSLConnection, UnixDomainSocketConnection
from redis.connection import HiredisRespSerializer
from redis.typing import EncodableT
from redis.utils import HIREDIS_AVAILABLE

if HIREDIS_AVAILABLE:
    from hiredis import pack_command as _pack_command

_PACKER = HiredisRespSerializer()


class _HiredisPacking(AbstractConnection):
    def pack_command(self, *args: EncodableT) -> list[bytes]:
        name = args[0]
        if (" " if isinstance(name, str) else b" ") not in name:  # type: ignore[operator]
            try:
                return [_pack_command(cast(Any, args))]
            except TypeError:
                pass  # a bytearray or memoryview (converted below), or what no packer sends (DataError below)
        return cast(list[bytes], _PACKER.pack(*cast(tuple[Any, ...], args)))


class HiredisConnection(_HiredisPacking, Connection):
    """A TCP connection (redis://) packing with hiredis."""


class HiredisSSLConnection(_HiredisPacking, SSLConnection):
    """A TLS connection (rediss://) packing with hiredis."""


class HiredisUnixConnection(_HiredisPacking, UnixDomainSocketConnection):
    """A Unix socket connection (unix://) packing with hiredis."""


_PACKING: dict[type[Any], type[AbstractConnection]] = {
    Connection: HiredisConnection,
    SSLConnection: HiredisSSLConnection,
    UnixDomainSocketConnection: HiredisUnixConnection,
}


def packing(connection_class: type[Any]) -> type[Any]:
    """The class to connect with in place of redis-py's `connection_class`: its hiredis-packing twin when hiredis is
    installed, else the class itself (its Python packer, the same bytes)."""
    return _PACKING.get(connection_class, connection_class) if HIREDIS_AVAILABLE else connection_class
