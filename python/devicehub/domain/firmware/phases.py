"""The moves between a campaign's phases (Pelion's `phase`): draft → starting → active → stopping → stopped →
archived. What an API call may move is `MOVES`; the engine's own moves are `ENGINE_MOVES`. Anything else is 409."""

from __future__ import annotations

from devicehub.domain.firmware_model import ACTIVE, ARCHIVED, DRAFT, STARTING, STOPPED, STOPPING
from devicehub.errors import Conflict

MOVES: dict[str, dict[str, str]] = {
    "start": {DRAFT: STARTING},
    "stop": {STARTING: STOPPING, ACTIVE: STOPPING},
    "archive": {DRAFT: ARCHIVED, STOPPED: ARCHIVED},
}
# the engine: devices chosen (starting → active), done or halted (active → stopping/stopped), in-flight devices
# settled (stopping → stopped); a campaign with no device to update stops at once (starting → stopped)
ENGINE_MOVES = {(STARTING, ACTIVE), (STARTING, STOPPED), (ACTIVE, STOPPING), (ACTIVE, STOPPED), (STOPPING, STOPPED)}
EDITABLE = (DRAFT,)  # PUT may change fields only before the start
DELETABLE = (DRAFT, STOPPED, ARCHIVED)


class PhaseConflict(Conflict):
    """The campaign's phase does not allow this."""


def moved(phase: str, verb: str) -> str:
    """The phase `verb` moves a campaign in `phase` to; PhaseConflict (409) naming both when it may not."""
    target = MOVES[verb].get(phase)
    if target is None:
        allowed = ", ".join(MOVES[verb])
        raise PhaseConflict(f"cannot {verb} a campaign in phase {phase} (only from {allowed})")
    return target


def engine_may(phase: str, target: str) -> bool:
    return (phase, target) in ENGINE_MOVES
