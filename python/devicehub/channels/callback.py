"""Callback channels (spec §4.5, §6): target validation, the verification PUT and the retrying deliverer.

The 20 s request time-out (spec §8) is a sleep on the injected clock raced against the request, so tests move a
ManualClock past it instead of waiting; the retry waits (spec §6 rule 7) are clock sleeps too.
"""

from __future__ import annotations

import asyncio
import logging
import re
import ssl
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field

import aiohttp
import yarl

from devicehub.channels import delivery, signing
from devicehub.channels.channel import Channel
from devicehub.channels.delivery import DeliveryOptions
from devicehub.channels.options import ChannelOptions
from devicehub.channels.targets import PolicyResolver, TargetPolicy, TargetRefused
from devicehub.clock import Clock
from devicehub.config import ServeSettings
from devicehub.domain.model import ChannelSecret
from devicehub.errors import BadRequest, Conflict, FieldError, InvalidHeader, ValidationFailed

log = logging.getLogger("devicehub.channels.callback")

REQUEST_TIMEOUT_S = 20.0  # spec §6 rule 7, §8
FIRST_RETRY_S = 1.0  # spec §6 rule 7
MAX_RETRY_S = 120.0  # spec §6 rule 7, §8
FAIL_TIMEOUT_S = 24 * 3600.0  # spec §6: after 24 hours without success the channel is closed
MAX_TARGET_CHARS = 400  # wire-format.md: url + headers
MAX_ANSWER_BYTES = 16 * 1024  # only the status matters; a longer answer body is not read, its connection is closed
# headers an application may not set: they decide the request's framing or routing (smuggling), or are hop-by-hop
FORBIDDEN_HEADERS = frozenset(
    (
        "host",
        "content-length",
        "transfer-encoding",
        "connection",
        "keep-alive",
        "upgrade",
        "te",
        "trailer",
        "expect",
        "proxy-authorization",
        "proxy-authenticate",
        "proxy-connection",
    )
)


_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")  # RFC 9110 §5.6.2 tchar
_CONTROL = re.compile(r"[\r\n\x00]")


def retry_wait(failures: int) -> float:
    """Wait after the `failures`-th failure in a row: 1, 2, 4 … 64, then 120 s each (spec §6 rule 7 table)."""
    return min(FIRST_RETRY_S * (1 << min(max(failures - 1, 0), 16)), MAX_RETRY_S)


@dataclass(frozen=True, slots=True)
class CallbackTarget:
    """A validated callback registration body (spec §2.5)."""

    url: str
    headers: dict[str, str]
    options: ChannelOptions
    secret: str | None = None  # issue 34 #3: sign deliveries (Standard Webhooks); None keeps the channel's secrets
    delivery: DeliveryOptions = field(default_factory=DeliveryOptions)  # issue 34 #4


def parse_registration(raw: object) -> CallbackTarget:
    """`{"url", "headers", "serialization"}`; raises ValidationFailed (400) naming the bad field."""
    if not isinstance(raw, Mapping):
        raise _invalid("body", "must be a JSON object")
    url = raw.get("url")
    if not isinstance(url, str) or not url:
        raise _invalid("url", "is required and must be a string")
    try:
        parsed = yarl.URL(url) if "\n" not in url and " " not in url else None
    except ValueError:  # e.g. a host that is not valid IDNA (UnicodeError is a ValueError)
        parsed = None
    if parsed is None or parsed.scheme not in ("http", "https") or not parsed.host:
        raise _invalid("url", "must be an absolute http or https URL")
    headers = raw.get("headers") or {}
    if not isinstance(headers, Mapping) or not all(
        isinstance(k, str) and k and isinstance(v, str) for k, v in headers.items()
    ):
        raise _invalid("headers", "must be an object of header names to string values")
    unsendable = sorted(k for k, v in headers.items() if not _TOKEN.fullmatch(k) or _CONTROL.search(v))
    if unsendable:  # RFC 9110 §5.1 (a name is a token), §5.5 (no CR, LF or NUL in a value)
        message = (
            f"{', '.join(unsendable)}: a header name must be an RFC 9110 token and a value may not hold CR, LF or NUL"
        )
        raise InvalidHeader(f"headers: {message}", fields=(FieldError("headers", message),))
    forbidden = sorted(k for k in headers if k.lower() in FORBIDDEN_HEADERS)
    if forbidden:
        raise _invalid("headers", f"may not set {', '.join(forbidden)} (framing and hop-by-hop headers)")
    if len(url) + sum(len(k) + len(v) for k, v in headers.items()) > MAX_TARGET_CHARS:
        raise _invalid("url", f"url and headers together exceed {MAX_TARGET_CHARS} characters")
    secret = signing.parse(raw["secret"]) if raw.get("secret") is not None else None
    options = ChannelOptions.from_wire(raw.get("serialization"))
    control = DeliveryOptions.from_wire(raw.get("delivery"))
    return CallbackTarget(url=url, headers=dict(headers), options=options, secret=secret, delivery=control)


def _invalid(name: str, message: str) -> ValidationFailed:
    return ValidationFailed(f"{name}: {message}", fields=(FieldError(name, message),))


@dataclass(frozen=True, slots=True)
class Answer:
    """How a callback PUT went: the HTTP status, or None when no answer came."""

    status: int | None
    text: str
    timed_out: bool = False
    refused: bool = False  # the target policy refused the address: nothing was sent
    retry_after: str | None = None  # the answer's Retry-After header (issue 34 #4)

    @property
    def ok(self) -> bool:
        return self.status in (200, 204)  # spec §6 rule 2


def tls_context(settings: ServeSettings) -> ssl.SSLContext:
    """Verify callback servers against the system CAs or `callback_ca_file`; present `callback_client_cert`."""
    context = ssl.create_default_context(cafile=settings.callback_ca_file or None)
    if settings.callback_client_cert:
        context.load_cert_chain(settings.callback_client_cert)
    return context


class CallbackClient:
    """The HTTP client of every callback channel: one session, PUTs raced against the clock.

    Tenants are isolated: the connector has no shared connection limit (each channel has one batch in flight,
    each key one verification), so a key whose receiver hangs holds only its own requests.
    """

    def __init__(
        self,
        clock: Clock,
        tls: ssl.SSLContext,
        timeout_s: float = REQUEST_TIMEOUT_S,
        policy: TargetPolicy | None = None,
    ) -> None:
        self._clock = clock
        self._tls = tls
        self.timeout_s = timeout_s
        self._policy = policy or TargetPolicy()
        self._verifying: set[str] = set()
        self._session: aiohttp.ClientSession | None = None
        # metrics hook (devicehub.metrics): seconds, HTTP status or None, timed out
        self.on_answer: Callable[[float, int | None, bool], None] | None = None

    async def start(self) -> None:
        connector = aiohttp.TCPConnector(
            ssl=self._tls, limit=0, resolver=PolicyResolver(self._policy), use_dns_cache=False
        )
        self._session = aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=None))

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def put(self, url: str, headers: Mapping[str, str], body: bytes) -> Answer:
        started = self._clock.now()
        answer = await self._put_in_time(url, headers, body)
        if self.on_answer is not None:
            self.on_answer(self._clock.now() - started, answer.status, answer.timed_out)
        return answer

    async def _put_in_time(self, url: str, headers: Mapping[str, str], body: bytes) -> Answer:
        request = asyncio.ensure_future(self._put(url, headers, body))
        timer = asyncio.ensure_future(self._clock.sleep(self.timeout_s))
        try:
            await asyncio.wait((request, timer), return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (request, timer):
                task.cancel()
            await asyncio.gather(request, timer, return_exceptions=True)
        if request.done() and not request.cancelled():
            return request.result()
        return Answer(None, f"no answer within {self.timeout_s:g} s", timed_out=True)

    async def _put(self, url: str, headers: Mapping[str, str], body: bytes) -> Answer:
        assert self._session is not None, "CallbackClient.start() first"
        try:
            self._policy.check_literal(yarl.URL(url).host or "")
            async with self._session.put(
                url, data=body, allow_redirects=False, headers={"Content-Type": "application/json", **headers}
            ) as response:
                await _skim(response)
                text = f"{response.status} {response.reason or ''}".strip()
                return Answer(response.status, text, retry_after=response.headers.get("Retry-After"))
        except TargetRefused as error:
            return Answer(None, str(error), refused=True)
        except aiohttp.ClientConnectorError as error:
            if isinstance(error.os_error, TargetRefused):
                return Answer(None, str(error.os_error), refused=True)
            return Answer(None, f"unreachable ({type(error).__name__}: {error})")
        except (aiohttp.ClientError, OSError, ValueError) as error:
            return Answer(None, f"unreachable ({type(error).__name__}: {error})")

    async def verify(
        self, url: str, headers: Mapping[str, str], key_id: str = "", secrets: Sequence[ChannelSecret] = ()
    ) -> None:
        """spec §4.5: PUT `{}` with the headers must be answered 200, else 400 naming what the URL answered.

        One verification per key at a time: a second one while the first waits is a 409.
        """
        if key_id in self._verifying:
            raise Conflict("a callback verification for this key is already in progress", token="CONFLICT")
        self._verifying.add(key_id)
        try:
            body = b"{}"
            signed = signing.headers(secrets, f"msg_verify_{uuid.uuid4().hex}", body) if secrets else {}
            answer = await self.put(url, {**headers, **signed}, body)
        finally:
            self._verifying.discard(key_id)
        if answer.status == 200:
            return
        if answer.refused:
            # said before anything is sent, so it tells nothing about what listens at the address
            raise BadRequest(
                "the callback URL's host is not an allowed target: only public addresses are, unless the operator "
                "allows others (serve --callback-allow)",
                token="CALLBACK_URL_NOT_ALLOWED",
            )
        if answer.timed_out:
            token = "CALLBACK_URL_DID_NOT_ANSWER"
        elif answer.status is None:
            token = "CALLBACK_URL_UNREACHABLE"
        else:
            token = f"CALLBACK_URL_ANSWERED_{answer.status}"
        raise BadRequest(f"the verification PUT to {url} got {answer.text}; 200 is required", token=token)


async def _skim(response: aiohttp.ClientResponse) -> None:
    """Read a bounded answer so the connection can be reused; close it rather than read a longer one."""
    remaining = MAX_ANSWER_BYTES
    while remaining > 0:
        chunk = await response.content.read(remaining)
        if not chunk:
            return
        remaining -= len(chunk)
    if not response.content.at_eof():
        response.close()


Remove = Callable[[Channel, str], Awaitable[None]]


async def deliver(channel: Channel, client: CallbackClient, clock: Clock, remove: Remove) -> None:
    """Deliver the channel's queue, one batch in flight (spec §6 rule 2), until the channel goes."""
    while not channel.closed:
        batch = channel.take(int(clock.now() * 1000))
        if batch is None:
            await channel.wait_for_events()
            continue
        try:
            control = channel.delivery
            if control.max_rate:  # issue 34 #4: the channel's events a second
                pause = channel.pace(batch.count, clock.now())
                if pause > 0:
                    channel.retry_at = clock.now() + pause
                    await clock.sleep(pause)
                    channel.retry_at = None
            body = channel.body(batch)
            headers = channel.config.headers
            if channel.config.secrets:  # issue 34 #3: a retry of the same batch keeps its webhook-id
                headers = {**headers, **signing.headers(channel.config.secrets, channel.message_id(batch), body)}
            answer = await client.put(channel.config.url, headers, body)
        except BaseException:
            channel.give_back(batch)
            raise
        now = clock.now()
        if answer.ok:
            channel.delivered(batch, now)
            channel.breaker_open = False
            continue
        channel.failed(now, answer.text)
        if channel.consecutive_failures & (channel.consecutive_failures - 1) == 0:  # 1st, 2nd, 4th, 8th…: bounded
            log.info(
                "callback %s of key %s failed (%s), attempt %d in a row",
                channel.config.url,
                channel.key_id,
                answer.text,
                channel.consecutive_failures,
            )
        if channel.config.free_tier:
            channel.discard(batch)  # spec §8: free tier sends once; the next batch goes
        else:
            channel.give_back(batch)
        if answer.status == 410 and control.remove_on_gone:  # issue 34 #4: the receiver is gone for good
            log.warning("callback %s of key %s answered 410 Gone: channel removed", channel.config.url, channel.key_id)
            channel.removed_gone = True
            await remove(channel, "the callback receiver answered 410 Gone")
            return
        assert channel.failing_since is not None
        if now - channel.failing_since >= FAIL_TIMEOUT_S:
            await remove(channel, "callback delivery failing for 24 hours")
            return
        if channel.config.free_tier:
            continue
        wait = retry_wait(channel.consecutive_failures)
        if control.retry_after and answer.status in (429, 503):  # RFC 9110 §10.2.3, RFC 6585 §4
            asked = delivery.retry_after(answer.retry_after)
            if asked is not None:
                wait = max(wait, min(asked, delivery.MAX_RETRY_AFTER_S))
        if control.circuit_breaker and channel.consecutive_failures >= delivery.BREAKER_FAILURES:
            channel.breaker_open = True  # the next attempt, after the open time, is the probe
            wait = max(wait, delivery.BREAKER_OPEN_S)
        channel.retry_at = now + wait
        await clock.sleep(wait)
        channel.retry_at = None
