"""A campaign's counts and the rules that stop it by itself: Pelion's autostop (a success percentage reached) and
devicehub's opt-in halt rule (hawkBit's error threshold, AWS IoT Jobs' abort criteria: failures above X % of at
least N finished devices)."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from devicehub.domain.firmware_model import DEPLOYED, DEREGISTERED, FAILED_CHANNEL, Campaign, CampaignDevice

SKIPPED_STEP = "skipped"


@dataclass(frozen=True, slots=True)
class Tally:
    total: int = 0
    success: int = 0
    failed: int = 0
    skipped: int = 0  # deregistered, or never started before the campaign stopped
    pending: int = 0  # not started, or under way

    @property
    def finished(self) -> int:
        return self.success + self.failed


def kind(device: CampaignDevice) -> str:
    """success, fail, skipped or pending: how a device counts (Pelion's statistics' summary statuses)."""
    if device.deployment_state == DEPLOYED:
        return "success"
    if device.deployment_state == FAILED_CHANNEL:
        return "fail"
    if device.deployment_state == DEREGISTERED or device.step == SKIPPED_STEP:
        return "skipped"
    return "pending"


def tally(devices: Iterable[CampaignDevice]) -> Tally:
    counts = {"success": 0, "fail": 0, "skipped": 0, "pending": 0}
    for device in devices:
        counts[kind(device)] += 1
    return Tally(
        total=sum(counts.values()),
        success=counts["success"],
        failed=counts["fail"],
        skipped=counts["skipped"],
        pending=counts["pending"],
    )


def stop_reason(campaign: Campaign, counts: Tally) -> str | None:
    """Why the campaign stops by itself now, or None. The halt rule first: a failing rollout must stop even when
    the success percentage would be reached too."""
    limit = campaign.halt_failure_percent
    if limit is not None and counts.finished >= max(campaign.halt_min_finished, 1):
        share = 100.0 * counts.failed / counts.finished
        if share > limit:
            return (
                f"halted: {counts.failed} of {counts.finished} finished devices failed ({share:.1f} % > {limit:g} %, "
                f"rule checked from {campaign.halt_min_finished} finished devices)"
            )
    if campaign.autostop and counts.total:
        share = 100.0 * counts.success / counts.total
        if share >= campaign.autostop_success_percent:
            return (
                f"autostopped: {counts.success} of {counts.total} devices updated "
                f"({share:.1f} % >= {campaign.autostop_success_percent:g} %)"
            )
    return None


def wave_room(waves: tuple[float, ...], devices: list[CampaignDevice], handed: set[str]) -> int:
    """How many more devices may start now under the campaign's waves (e.g. 1, 10, 100 %: hawkBit's groups, Azure
    Device Update's staged rollouts): wave k holds the first ceil(p_k % of the devices registered at the start) (at
    least one); the next wave opens only when none of those started is still under way, so the halt rule has seen
    every result of a wave before the next one starts. `handed`: devices given to their holder node, not yet started
    in the store. Without waves, every device may start (the pace and concurrency apply)."""
    started = [d for d in devices if d.started_at is not None or d.device_id in handed]
    total = sum(1 for d in devices if d.deployment_state != DEREGISTERED or d.started_at is not None)
    if not waves:
        return total - len(started)
    busy = any(d.finished_at is None for d in started)
    for percent in waves:
        cap = max(1, math.ceil(total * percent / 100))
        if len(started) < cap:
            return cap - len(started)
        if busy:
            return 0
    return total - len(started)
