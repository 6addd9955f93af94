"""`GET /v3/metrics` (issue 32 #3): the account's usage over time as Pelion's statistics API shapes it — an interval
(`1h`, `2d`, `1w`) over a range (`start` and `end`, or the `period` up to now), one entry per interval with the
counters asked for in `include`: every metric of Pelion's statistics API (domain/usage.py says how each is taken);
an unknown one is 400. A count is the sum of the interval's hours; registered_devices, a gauge, the last sample of
its hours (the caller's account is sampled at each read). Also the recorder that counts each REST call by the
caller's account."""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import UTC, datetime

from aiohttp import web

from devicehub.api.body import json_reply, page_query
from devicehub.api.context import authenticated_account, principal, services
from devicehub.api.directory_filter import parse_time
from devicehub.api.models import MetricList, MetricModel
from devicehub.domain.timefmt import rfc3339
from devicehub.domain.usage import COUNTED, GAUGES, HOUR, REGISTERED_DEVICES, REST_ERROR, REST_SUCCESS, UsageMeter
from devicehub.errors import FieldError, ValidationFailed
from devicehub.store.usage_writer import flush_usage, sample_registered

ALIASES = {"device_server_rest_api_success": REST_SUCCESS, "device_server_rest_api_error": REST_ERROR}
MAX_INTERVALS = 10_000  # entries one range may span
_SPAN = re.compile(r"^([1-9][0-9]{0,4})([hdw])$")
_UNIT = {"h": HOUR, "d": 24 * HOUR, "w": 7 * 24 * HOUR}
_DATE = re.compile(r"^[0-9]{8}$")

Recorder = Callable[[web.Request, int, float], None]


def usage_recorder(record: Recorder, usage: UsageMeter | None) -> Recorder:
    """`record`, and each call made with an account's key counted as that account's success (< 400) or error."""
    if usage is None:
        return record

    def counted(request: web.Request, status: int, started: float) -> None:
        record(request, status, started)
        account = authenticated_account(request)
        if account is not None:
            usage.count(account, REST_SUCCESS if status < 400 else REST_ERROR)

    return counted


def _bad(name: str, message: str) -> ValidationFailed:
    return ValidationFailed(f"{name}: {message}", fields=(FieldError(name, message),))


def _span(name: str, text: str | None) -> int | None:
    if text is None:
        return None
    match = _SPAN.match(text)
    if match is None:
        raise _bad(name, "a number and h, d or w (1h, 2d, 1w)")
    return int(match[1]) * _UNIT[match[2]]


def _moment(name: str, text: str) -> float:
    if _DATE.match(text):  # Pelion's examples give days as yyyymmdd
        try:
            return datetime.strptime(text, "%Y%m%d").replace(tzinfo=UTC).timestamp()
        except ValueError:
            raise _bad(name, "not a date") from None
    return parse_time(name, text)


def _includes(text: str | None) -> tuple[list[str], bool]:
    """The metrics asked for, as their wire names, and whether total_count is."""
    if not text:
        raise _bad("include", "required: a comma-separated list of metrics")
    names = [part.strip() for part in text.split(",") if part.strip()]
    for name in names:
        if name not in COUNTED and name not in ALIASES and name != "total_count":
            raise _bad("include", f"unknown metric {name!r}; counted: {', '.join(COUNTED)}")
    return [n for n in dict.fromkeys(names) if n != "total_count"], "total_count" in names


def _range(request: web.Request, now: float) -> tuple[float, float]:
    start, end = request.query.get("start"), request.query.get("end")
    period = _span("period", request.query.get("period"))
    if start is not None or end is not None:
        if start is None or end is None:
            raise _bad("start" if start is None else "end", "start and end go together")
        low, high = _moment("start", start), _moment("end", end)
        if high <= low:
            raise _bad("end", "not after start")
        return low // HOUR * HOUR, high
    if period is None:
        raise _bad("period", "required without start and end")
    high = (now // HOUR + 1) * HOUR  # up to the end of this hour
    return high - period, high


async def get_metrics(request: web.Request) -> web.Response:
    caller = await principal(request)
    page = page_query(request, 2)
    order = request.query.get("order", "ASC").upper()
    if order not in ("ASC", "DESC"):
        raise _bad("order", "ASC or DESC")
    wanted, total = _includes(request.query.get("include"))
    interval = _span("interval", request.query.get("interval"))
    if interval is None:
        raise _bad("interval", "required (1h, 1d, 1w)")
    low, high = _range(request, services(request).clock.now())
    if (high - low) / interval > MAX_INTERVALS:
        raise _bad("interval", f"the range spans more than {MAX_INTERVALS} intervals")
    usage = services(request).usage
    if usage is not None:  # this node's counts not yet written are read too
        await flush_usage(services(request).store, usage)
    if REGISTERED_DEVICES in wanted:
        await sample_registered(services(request).store, services(request).clock, [caller.account_id])
    hours = await services(request).store.get_usage(caller.account_id, low, high)
    starts = [low + n * interval for n in range(int((high - low + interval - 1) // interval))]
    if order == "DESC":
        starts.reverse()
    entries: list[MetricModel] = []
    for at in starts:
        sums = dict.fromkeys(wanted, 0)
        for hour, counts in sorted(hours.items()):  # by hour: a gauge's last sample is the latest hour's
            if at <= hour < at + interval:
                for name in wanted:
                    metric = ALIASES.get(name, name)
                    if metric in GAUGES:
                        sums[name] = counts.get(metric, sums[name])
                    else:
                        sums[name] += counts.get(metric, 0)
        entries.append(MetricModel(id=f"{int(at):012x}", timestamp=rfc3339(at), **sums))
    cursor = page.after
    if cursor is not None:
        entries = [e for e in entries if (e.id < cursor if order == "DESC" else e.id > cursor)]
    shown, more = page.split(entries[: page.fetch])
    return json_reply(
        MetricList(
            object="list",
            data=shown,
            has_more=more,
            limit=page.limit,
            after=page.after,
            total_count=len(starts) if total else None,
        )
    )
