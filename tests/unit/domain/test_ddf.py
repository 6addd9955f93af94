"""DDF XML into the object model (issue 32 #1): the shipped OMA registry files, and untrusted documents refused
with a reason — no DTD or entity is ever processed."""

from __future__ import annotations

import pytest

from devicehub.domain.ddf import MAX_DDF_BYTES, InvalidDefinition, parse_ddf
from devicehub.domain.object_catalog import REGISTRY, registry
from devicehub.domain.object_model import value_error
from support.ddf import ddf


def test_every_shipped_registry_file_parses_with_the_core_and_ipso_objects() -> None:
    definitions = registry()
    assert {0, 1, 2, 3, 4, 5, 6, 7, 9, 10} <= set(definitions)
    assert set(range(3300, 3351)) - set(definitions) == {3307, 3309}  # not in the OMA registry
    assert len(list(REGISTRY.glob("*.xml"))) == len(definitions)
    assert (REGISTRY / "LICENSE.txt").exists()
    temperature = definitions[3303]
    assert temperature.name == "Temperature" and temperature.multiple
    sensor = temperature.resource(5700)
    assert sensor is not None and (sensor.name, sensor.operations, sensor.type) == ("Sensor Value", "R", "float")
    reboot = definitions[3].resource(4)
    assert reboot is not None and reboot.executable and not reboot.writable
    dimmer = definitions[3311].resource(5851)
    assert dimmer is not None and dimmer.writable and dimmer.type == "integer" and dimmer.units == "/100"


def test_a_document_with_a_dtd_is_refused_before_any_entity_is_expanded() -> None:
    laughs = (
        b'<?xml version="1.0"?><!DOCTYPE LWM2M [<!ENTITY a "aaaaaaaaaa"><!ENTITY b "&a;&a;&a;&a;&a;&a;&a;&a;">]>'
        b"<LWM2M><Object><Name>&b;</Name></Object></LWM2M>"
    )
    external = b'<?xml version="1.0"?><!DOCTYPE LWM2M SYSTEM "file:///etc/passwd"><LWM2M>&x;</LWM2M>'
    for document in (laughs, external):
        with pytest.raises(InvalidDefinition, match="DTD"):
            parse_ddf(document)


@pytest.mark.parametrize(
    ("document", "reason"),
    [
        (b"<LWM2M><Object>", "not well-formed"),
        (b"", "not well-formed"),
        (b"<Other/>", "root element"),
        (b"<LWM2M/>", "no <Object>"),
        (ddf(70000, "Big"), "ObjectID"),
        (ddf(33000, "Ops", (1, "X", "RWE", "String", "")), "operations"),
        (ddf(33000, "Type", (1, "X", "R", "Decimal", "")), "type"),
        (ddf(33000, "Twice", (1, "X", "R", "String", ""), (1, "Y", "R", "String", "")), "resource id twice"),
        (ddf(33000, ""), "no name"),
        (b" " * (MAX_DDF_BYTES + 1), "larger"),
    ],
)
def test_a_bad_document_is_refused_with_what_is_wrong(document: bytes, reason: str) -> None:
    with pytest.raises(InvalidDefinition, match=reason):
        parse_ddf(document)


def test_a_written_text_value_is_checked_against_the_resource_type() -> None:
    (definition,) = parse_ddf(
        ddf(
            33000,
            "Types",
            (1, "I", "RW", "Integer", ""),
            (2, "U", "RW", "Unsigned Integer", ""),
            (3, "F", "RW", "Float", "Cel"),
            (4, "B", "RW", "Boolean", ""),
            (5, "S", "RW", "String", ""),
            (6, "L", "RW", "Objlnk", ""),
        )
    )
    kinds = {r.id: r for r in definition.resources}
    good = {1: ["-3", "42"], 2: ["0", "7"], 3: ["1.5", "-2", "1e3"], 4: ["0", "1"], 5: ["anything"], 6: ["3:0"]}
    bad = {1: ["1.5", "x", ""], 2: ["-1", "x"], 3: ["x", "nan", "inf"], 4: ["true", "2"], 6: ["3", "3:x", "70000:0"]}
    for rid, values in good.items():
        assert all(value_error(kinds[rid], v) is None for v in values), rid
    for rid, values in bad.items():
        assert all(value_error(kinds[rid], v) is not None for v in values), rid
