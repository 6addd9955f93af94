"""What a registration writes to the embedded store (issue 16 #1): a known device registering again as it was, and an
Update that changes nothing, leave its device record, snapshot, subscriptions and id claim as they are on disk; only
its registration record (the new expiry) is written. A Register that changes something still rewrites the record."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from devicehub.clock import ManualClock
from devicehub.lwm2m import codes
from devicehub.node import Node
from devicehub.sim.device import OMA, SimDevice
from devicehub.store.sqlite.writer import DB_FILE
from support.node import run, running_node

TABLES = ("devices", "device_ids", "snapshot", "subscriptions")


def _rows(data_dir: Path) -> dict[str, list[tuple[object, ...]]]:
    """What the database file holds (read by a connection of its own: committed state only)."""
    db = sqlite3.connect(data_dir / DB_FILE)
    try:
        tables = {t: db.execute(f"SELECT * FROM {t} ORDER BY 1, 2").fetchall() for t in (*TABLES, "registrations")}
    finally:
        db.close()
    return tables


def test_a_known_device_registering_again_as_it_was_writes_only_its_registration_record(tmp_path: Path) -> None:
    async def scenario() -> None:
        clock = ManualClock()
        async with running_node(tmp_path, clock=clock) as node:
            sim = SimDevice(clock, ("127.0.0.1", node.coap_port), "again-1", flavor=OMA, lifetime=600)
            await sim.start(lifecycle=False)  # this test sends each Register and Update itself
            try:
                await _steps(node, sim, clock, tmp_path)
            finally:
                await sim.stop(deregister=False)

    run(scenario(), timeout=30)


async def _steps(node: Node, sim: SimDevice, clock: ManualClock, tmp_path: Path) -> None:
    await sim.register()
    await node.lwm2m.flush()
    first = _rows(tmp_path)
    assert len(first["devices"]) == 1 and len(first["snapshot"]) > 1

    await clock.advance(60)  # a record written again would carry the new time
    assert await sim.update() == codes.CHANGED  # nothing changed
    await node.lwm2m.flush()
    updated = _rows(tmp_path)
    assert {t: updated[t] for t in TABLES} == {t: first[t] for t in TABLES}
    assert updated["registrations"] != first["registrations"]  # its new expiry

    await clock.advance(60)
    await sim.register()  # the device restarted: the same name, lifetime and objects
    await node.lwm2m.flush()
    again = _rows(tmp_path)
    assert {t: again[t] for t in TABLES} == {t: first[t] for t in TABLES}
    assert again["registrations"] != updated["registrations"]

    await clock.advance(60)
    sim.lifetime = 900  # a Register that changes the record writes it
    await sim.register()
    await node.lwm2m.flush()
    changed = _rows(tmp_path)
    assert changed["devices"] != first["devices"] and changed["device_ids"] == first["device_ids"]
    stored = await node.store.get_device(sim.device_id or "")
    assert stored is not None and stored.lifetime == 900 and stored.updated_at == clock.now()


def test_registers_arriving_one_after_another_are_stored_in_shared_batches(tmp_path: Path) -> None:
    """issue 16 #1: a batch waits a moment (BATCH_WINDOW_S) for company before it is written, so Registers that
    arrive one after another share store round trips and a commit."""

    async def scenario() -> None:
        clock = ManualClock()
        async with running_node(tmp_path, clock=clock) as node:
            sims = [SimDevice(clock, ("127.0.0.1", node.coap_port), f"seq-{n}", flavor=OMA) for n in range(12)]
            try:
                for sim in sims:
                    await sim.start(lifecycle=False)
                    await sim.register()  # answered before the next one is sent
                await node.lwm2m.flush()
                metrics = node.lwm2m.metrics()
                assert metrics["lwm2m_registrations"] == 12
                assert metrics["lwm2m_registration_batches"] <= 4, metrics["lwm2m_registration_batches"]
            finally:
                for sim in sims:
                    await sim.stop(deregister=False)

    run(scenario(), timeout=30)
