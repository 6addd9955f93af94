"""issue 34 #1 in Redis mode: an inbox event a dead owner journaled but did not trim is drained again by the next
owner; the forwarding node's id of it keeps it from being queued a second time under a new cursor."""

from __future__ import annotations

from channel_fakes import START, make_channel

from devicehub.channels.options import ChannelOptions
from devicehub.domain.model import ChannelDrops

NOW_MS = int(START * 1000)
DATA = b'{"ep":"d","path":"/3/0/9","ct":"text/plain","payload":"MQ==","max-age":0}'


def test_a_forwarded_event_drained_again_is_queued_once() -> None:
    owner = make_channel(options=ChannelOptions(include_cursor=True))
    for n in range(3):
        owner.push(1, DATA, NOW_MS, "d", f"node-b.{n}")
    owner.push(1, DATA, NOW_MS, "d", "node-b.1")  # the same inbox event, again
    assert (len(owner.queue), owner.cursors.last if owner.cursors else None) == (3, 3)

    # the next owner restores the journal (what the first one wrote), then drains the untrimmed inbox
    journaled = [event for _, event in owner.cursors.events] if owner.cursors else []
    assert [e.origin for e in journaled] == ["node-b.0", "node-b.1", "node-b.2"]
    successor = make_channel(options=ChannelOptions(include_cursor=True))
    successor.restore(journaled, ChannelDrops(delivered=2))
    for n in (1, 2, 3):
        successor.push(1, DATA, NOW_MS, "d", f"node-b.{n}")
    assert successor.cursors is not None and successor.cursors.last == 4  # only node-b.3 is new
    assert [c for c, _ in successor.cursors.events] == [1, 2, 3, 4]
    assert len(successor.queue) == 2  # cursor 3 (undelivered before) and the new 4
