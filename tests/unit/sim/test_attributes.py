"""Notification attributes as the simulator applies them (LwM2M 1.0 §5.1.2)."""

from __future__ import annotations

import pytest

from devicehub.sim.attributes import Attributes, BadAttribute, effective, parse_query


def test_resource_level_wins_over_instance_and_object_levels() -> None:
    stored = {"/3303": {"pmin": 10.0, "pmax": 60.0}, "/3303/0": {"pmin": 5.0}, "/3303/0/5700": {"st": 0.5}}
    assert effective(stored, "/3303/0/5700") == Attributes(pmin=5.0, pmax=60.0, st=0.5)
    assert effective(stored, "/3303/1/5700") == Attributes(pmin=10.0, pmax=60.0)


def test_attribute_without_value_is_removed() -> None:
    assert parse_query(["pmin"], {"pmin": 5.0, "pmax": 9.0}) == {"pmax": 9.0}


@pytest.mark.parametrize("query", [["foo=1"], ["pmin=x"], ["gt=10", "lt=9", "st=1"]])
def test_bad_attributes_are_rejected(query: list[str]) -> None:
    with pytest.raises(BadAttribute):
        parse_query(query, {})


def test_step_and_thresholds_decide_whether_a_change_is_reported() -> None:
    step = Attributes(st=1.0)
    assert not step.should_notify(20.0, 20.5, 100)
    assert step.should_notify(20.0, 21.0, 100)
    above = Attributes(gt=25.0)
    assert above.should_notify(24.0, 26.0, 100) and not above.should_notify(26.0, 27.0, 100)
    below = Attributes(lt=10.0)
    assert below.should_notify(11.0, 9.0, 100) and not below.should_notify(9.0, 8.0, 100)
    assert Attributes().should_notify(1.0, 1.0, 100)
