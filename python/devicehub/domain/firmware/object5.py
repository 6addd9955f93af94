"""LwM2M Firmware Update object 5 (OMA 5.xml, object version 1.1, for LwM2M 1.0-1.2): resource ids, State and
Update Result values, and what each Update Result means for a campaign device.

State /5/0/3 (5.xml "State"): 0 Idle (before downloading or after successful updating), 1 Downloading,
2 Downloaded, 3 Updating. Update Result /5/0/5 (5.xml "Update Result", 0..11) is mapped by `outcome`.
"""

from __future__ import annotations

from dataclasses import dataclass

from devicehub.domain.device_results import DeviceError, DeviceResponse
from devicehub.domain.ports import DeviceGateway

PACKAGE, PACKAGE_URI, UPDATE, STATE, UPDATE_RESULT = "/5/0/0", "/5/0/1", "/5/0/2", "/5/0/3", "/5/0/5"
FIRMWARE_VERSION = "/3/0/3"  # Device object's Firmware Version: the new one after the reboot, where reported

IDLE, DOWNLOADING, DOWNLOADED, UPDATING = 0, 1, 2, 3
STATES = {IDLE: "Idle", DOWNLOADING: "Downloading", DOWNLOADED: "Downloaded", UPDATING: "Updating"}

INITIAL, SUCCESS, DEFERRED = 0, 1, 11
TEXT = 0  # text/plain: how State, Update Result and the Package URI travel (LwM2M Core §7.3.1)

# 5.xml's text for every Update Result: a failed device's reason names its code and this
RESULTS = {
    0: "initial value (update in progress)",
    1: "firmware updated successfully",
    2: "not enough flash memory for the new firmware package",
    3: "out of RAM during downloading process",
    4: "connection lost during downloading process",
    5: "integrity check failure for new downloaded package",
    6: "unsupported package type",
    7: "invalid URI",
    8: "firmware update failed",
    9: "unsupported protocol",
    10: "firmware update cancelled",
    11: "firmware update deferred",
}


@dataclass(frozen=True, slots=True)
class Outcome:
    """What an Update Result means: the device is `done` (succeeded or failed) or not yet, and why in words."""

    done: bool
    success: bool
    reason: str


def outcome(result: int) -> Outcome:
    """0 (in progress) and 11 (deferred by the device's user: it stays Downloaded) are not final; 1 is success;
    2-10 are failures (5.xml); any other value is not defined by object 5 version 1.1 and fails the device with a
    reason that says so, rather than leaving it waiting for a code that will never change."""
    if result in (INITIAL, DEFERRED):
        return Outcome(False, False, RESULTS[result])
    if result == SUCCESS:
        return Outcome(True, True, RESULTS[result])
    if result in RESULTS:
        return Outcome(True, False, f"Update Result {result}: {RESULTS[result]}")
    return Outcome(True, False, f"Update Result {result} is not defined by object 5 (5.xml: 0-11)")


class Failed(Exception):
    """The device's update failed; the message is the reason it keeps."""


def dotted(response: DeviceResponse) -> str:
    return f"{response.code >> 5}.{response.code & 0x1F:02d}"


async def read_int(gateway: DeviceGateway, device_id: str, path: str) -> int:
    """An integer resource (State, Update Result) read as text; Failed naming the answer otherwise."""
    response = await gateway.request(device_id, "GET", path, accept=TEXT)
    if response.code >> 5 != 2:
        raise Failed(f"reading {path} answered {dotted(response)}")
    try:
        return int(response.payload.decode().strip())
    except (UnicodeDecodeError, ValueError):
        raise Failed(f"{path} is not an integer: {response.payload[:32]!r}") from None


async def device_version(gateway: DeviceGateway, device_id: str) -> str:
    """The device's /3/0/3 after its update; empty where it reports none."""
    try:
        response = await gateway.request(device_id, "GET", FIRMWARE_VERSION, accept=TEXT)
    except DeviceError:
        return ""
    return response.payload.decode(errors="replace")[:64] if response.code >> 5 == 2 else ""
