"""What the channel GETs show of a key's channel (spec §4.5-§4.7, issue 34 #5), whichever node is asked.

The node that owns the channel builds it from the channel itself. In Redis mode the other nodes ask the owner for
it (ownership.py `ask_view`), so that behind a load balancer every node answers every channel GET alike — the
config, the queue and drops, the state, the dead letters — as the README's "any node takes any REST call" says.
"""

from __future__ import annotations

import msgspec

from devicehub.channels.channel import Channel, ChannelStatus
from devicehub.channels.deadletters import DeadLetter
from devicehub.channels.introspection import ChannelState, channel_state
from devicehub.domain.model import ChannelConfig


class ChannelView(msgspec.Struct, frozen=True, kw_only=True):
    config: ChannelConfig
    status: ChannelStatus
    connected: bool  # a WebSocket channel's socket is open (at the owner)
    state: ChannelState
    dead_letters: list[DeadLetter]


def view_of(channel: Channel, now: float) -> ChannelView:
    return ChannelView(
        config=channel.config,
        status=channel.status(),
        connected=channel.session is not None,
        state=channel_state(channel, now),
        dead_letters=list(channel.dead_letters.letters),
    )


encode_view = msgspec.msgpack.Encoder().encode
decode_view = msgspec.msgpack.Decoder(ChannelView).decode
