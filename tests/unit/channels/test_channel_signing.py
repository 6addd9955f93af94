"""issue 34 #3: which secrets sign across rotations (wall-clock times given, so the overlap's end is exact)."""

from __future__ import annotations

from devicehub.channels import signing
from devicehub.domain.model import ChannelSecret


def test_an_overlapping_secret_stops_signing_when_its_overlap_ends() -> None:
    secrets = signing.rotate([ChannelSecret("whsec_a")], "whsec_b", now=1000.0, overlap_s=60.0)
    assert secrets == [ChannelSecret("whsec_b"), ChannelSecret("whsec_a", 1060.0)]
    assert [s.value for s in signing.in_force(secrets, 1059.0)] == ["whsec_b", "whsec_a"]
    assert [s.value for s in signing.in_force(secrets, 1060.0)] == ["whsec_b"]
    # a second rotation inside the overlap does not extend the oldest secret's end
    again = signing.rotate(secrets, "whsec_c", now=1030.0, overlap_s=60.0)
    assert again == [ChannelSecret("whsec_c"), ChannelSecret("whsec_b", 1090.0), ChannelSecret("whsec_a", 1060.0)]
