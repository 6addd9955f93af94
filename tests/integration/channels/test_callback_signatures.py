"""issue 34 #3: callback deliveries signed per Standard Webhooks, checked with the `standardwebhooks` package from
PyPI (the receivers' library, not the project's code): a signature verifies, a tampered body does not, and during a
rotation's overlap both the old and the new secret verify."""

from __future__ import annotations

import base64
import os
from pathlib import Path

import msgspec
import pytest
from channel_harness import LOOPBACK, Harness, Receiver, note, payloads, run, serving
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from devicehub.config import ServeSettings
from support.waiting import eventually


def whsec() -> str:
    return "whsec_" + base64.b64encode(os.urandom(32)).decode()


async def register(h: Harness, receiver: Receiver, **body: object) -> None:
    status, text = await h.call("PUT", "/v2/notification/callback", json={"url": receiver.url, **body})
    assert status == 204, text


def test_a_delivery_is_signed_and_verifies_with_the_standardwebhooks_package(tmp_path: Path) -> None:
    secret = whsec()

    async def main() -> None:
        async with Receiver(answers=[200, 503]) as receiver, serving(tmp_path) as h:
            await register(h, receiver, secret=secret)
            verification = await receiver.next()
            Webhook(secret).verify(verification.body, verification.headers)  # the verification PUT is signed too

            await h.hub.publish([h.key_id], note(7))
            first = await receiver.next()
            Webhook(secret).verify(first.body, first.headers)
            assert payloads(first.body) == [7]
            channel = h.hub.channel(h.key_id)
            assert channel is not None
            await eventually(lambda: channel.retry_at is not None)
            await h.clock.advance(1.0)  # spec §6 rule 7: the first retry after 1 s
            retry = await receiver.next()
            Webhook(secret).verify(retry.body, retry.headers)
            assert retry.headers["webhook-id"] == first.headers["webhook-id"]  # a retry is the same message

            tampered = first.body.replace(b'"ep"', b'"EP"')
            with pytest.raises(WebhookVerificationError):
                Webhook(secret).verify(tampered, first.headers)
            with pytest.raises(WebhookVerificationError):
                Webhook(whsec()).verify(first.body, first.headers)  # another secret

            await h.hub.publish([h.key_id], note(8))
            other = await receiver.next()
            Webhook(secret).verify(other.body, other.headers)
            assert other.headers["webhook-id"] != first.headers["webhook-id"]

    run(main())


def test_without_a_secret_deliveries_carry_no_signature_headers(tmp_path: Path) -> None:
    async def main() -> None:
        async with Receiver() as receiver, serving(tmp_path) as h:
            await register(h, receiver)
            await receiver.next()
            await h.hub.publish([h.key_id], note(1))
            delivery = await receiver.next()
            assert not any(name.lower().startswith("webhook-") for name in delivery.headers)
            status, body = await h.call("GET", "/v2/notification/callback")
            assert status == 200 and b"secret" not in body

    run(main())


def test_rotation_signs_with_both_secrets_during_the_overlap(tmp_path: Path) -> None:
    old = whsec()

    async def main() -> None:
        async with Receiver() as receiver, serving(tmp_path) as h:
            await register(h, receiver, secret=old)
            await receiver.next()
            status, body = await h.call("POST", "/v2/notification/callback/secret")
            assert status == 200, body
            new = msgspec.json.decode(body)["secret"]
            assert new.startswith("whsec_") and new != old

            await h.hub.publish([h.key_id], note(2))
            delivery = await receiver.next()
            assert len(delivery.headers["webhook-signature"].split(" ")) == 2
            Webhook(old).verify(delivery.body, delivery.headers)  # receivers not yet switched over
            Webhook(new).verify(delivery.body, delivery.headers)

            # a re-registration without a secret keeps the channel's secrets (applications re-register at start)
            await register(h, receiver)
            again = await receiver.next()
            Webhook(new).verify(again.body, again.headers)
            Webhook(old).verify(again.body, again.headers)

            chosen = whsec()
            assert (await h.call("POST", "/v2/notification/callback/secret", json={"secret": chosen}))[0] == 200
            await h.hub.publish([h.key_id], note(3))
            third = await receiver.next()
            for secret in (old, new, chosen):
                Webhook(secret).verify(third.body, third.headers)

    run(main())


def test_a_zero_overlap_rotation_stops_the_old_secret_at_once(tmp_path: Path) -> None:
    old = whsec()
    settings = ServeSettings(
        data_dir=tmp_path / "data", flush_interval_ms=20, callback_allow=LOOPBACK, callback_secret_overlap=0.0
    )

    async def main() -> None:
        async with Receiver() as receiver, serving(tmp_path, settings=settings) as h:
            await register(h, receiver, secret=old)
            await receiver.next()
            new = msgspec.json.decode((await h.call("POST", "/v2/notification/callback/secret"))[1])["secret"]
            await h.hub.publish([h.key_id], note(4))
            delivery = await receiver.next()
            Webhook(new).verify(delivery.body, delivery.headers)
            with pytest.raises(WebhookVerificationError):
                Webhook(old).verify(delivery.body, delivery.headers)

    run(main())


def test_bad_secrets_and_a_rotation_without_a_callback_channel_are_refused(tmp_path: Path) -> None:
    async def main() -> None:
        async with Receiver() as receiver, serving(tmp_path) as h:
            assert (await h.call("POST", "/v2/notification/callback/secret"))[0] == 404
            for bad in ("nope", "whsec_!!!", "whsec_" + base64.b64encode(b"short").decode(), 7):
                status, _ = await h.call("PUT", "/v2/notification/callback", json={"url": receiver.url, "secret": bad})
                assert status == 400, bad
            assert receiver.count == 0  # refused before any verification PUT
            await register(h, receiver)
            status, _ = await h.call("POST", "/v2/notification/callback/secret", json={"secret": "whsec_x"})
            assert status == 400

    run(main())
