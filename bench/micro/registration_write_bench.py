"""The embedded store's registration write, random device ids against time-ordered ones (issue 16 #1).

`SqliteStore.put_registered_devices` + `put_registrations` for N first registrations of a Pelion-like device
(19 resources, 4 announcing a value, one auto-observation), B devices a batch as `LwM2MServer` writes them, into
a fresh data directory per variant: once with random 32-hex ids (devicehub before issue 16's ordered ids), once
with `IdSource.ordered` ids (milliseconds first). The figure is the process CPU per device (`time.process_time`:
the writer thread and the event loop), so it holds on a loaded machine; the random-id run is the same-run
baseline. Random keys scatter each batch's rows over the B-trees keyed by device id and the commit writes a page
per row; ordered keys append. Prints one summary line and writes bench/results/registration_write.json.
Reproduce: `python bench/micro/registration_write_bench.py --devices 50000` (`--smoke`: 2 000 devices).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from devicehub.domain.model import (
    Device,
    ObservationRecord,
    Registration,
    ReportedValue,
    ResourceLink,
)
from devicehub.ids import IdSource
from devicehub.store.sqlite.store import SqliteStore

RESULTS = Path(__file__).resolve().parents[1] / "results" / "registration_write.json"
ACCOUNT = "0" * 32
PATHS = [
    *(f"/3/0/{r}" for r in (0, 1, 2, 3, 9, 13, 14, 15, 17, 18, 19)),
    *(f"/1/0/{r}" for r in (1, 7)),
    "/3303/0/5700",
    "/3303/0/5701",
    "/5/0/1",
    "/5/0/3",
    "/10255/0/1",
    "/10255/0/2",
]
VALUED = PATHS[:4]  # Pelion announces manufacturer, model, serial, firmware with `v=`
RESOURCES = tuple(ResourceLink(path=p, obs=True) for p in PATHS)
LINKS = tuple(ResourceLink(path=p, obs=True) for p in PATHS)


def records(device_id: str, now: float) -> tuple[Device, Registration, ObservationRecord]:
    name = f"bench-{device_id[-12:]}"
    device = Device(
        id=device_id,
        account_id=ACCOUNT,
        endpoint_name=name,
        lifetime=300,
        resources=RESOURCES,
        created_at=now,
        updated_at=now,
        last_seen_at=now,
    )
    registration = Registration(
        device_id=device_id,
        account_id=ACCOUNT,
        endpoint_name=name,
        lifetime=300,
        links=LINKS,
        host="127.0.0.1",
        port=40000,
        registered_at=now,
        updated_at=now,
        expires_at=now + 330,
    )
    observation = ObservationRecord(token=device_id[-8:].encode(), device_id=device_id, path="/3/0/9", auto=True)
    return device, registration, observation


async def write(data_dir: Path, new_id: Callable[[], str], devices: int, batch: int) -> float:
    """CPU-seconds per device of writing `devices` first registrations, `batch` a transaction."""
    store = SqliteStore(data_dir)
    await store.open()
    try:
        cpu = 0.0
        for _ in range(devices // batch):
            now = time.time()
            written = [records(new_id(), now) for _ in range(batch)]
            reported = [
                (d.id, path, ReportedValue(value=b"devicehub-bench", content_type="text/plain", reported_at=now))
                for d, _, _ in written
                for path in VALUED
            ]
            start = time.process_time()
            await store.put_registered_devices([d for d, _, _ in written], [], reported)
            await store.put_registrations([r for _, r, _ in written], [o for _, _, o in written], [])
            cpu += time.process_time() - start
        return cpu / (devices // batch * batch)
    finally:
        await store.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--devices", type=int, default=50_000)
    parser.add_argument("--batch", type=int, default=200)
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args()
    if args.smoke:
        args.devices = 2_000
    ids = IdSource()
    variants: dict[str, Callable[[], str]] = {"random": ids, "ordered": ids.ordered}
    result: dict[str, object] = {"devices": args.devices, "batch": args.batch, "machine": platform.machine()}
    for name, new_id in variants.items():
        with tempfile.TemporaryDirectory() as data_dir:
            result[f"{name}_us_per_device"] = round(
                1e6 * asyncio.run(write(Path(data_dir), new_id, args.devices, args.batch)), 1
            )
    timings = {name: float(str(result[f"{name}_us_per_device"])) for name in variants}
    ratio = timings["random"] / timings["ordered"]
    result["ratio"] = round(ratio, 2)
    if not args.smoke:
        RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(
        f"registration write: {result['ordered_us_per_device']} µs CPU a device with ordered ids, "
        f"{result['random_us_per_device']} µs with random ids (same run), {ratio:.2f}× "
        f"({args.devices} first registrations, {args.batch} a transaction)"
    )


if __name__ == "__main__":
    main()
