"""The simulator's objects take each resource's type and operations from the OMA registry's definitions (issue 32 #1),
the ones the service checks requests against."""

from __future__ import annotations

import pytest

from devicehub.domain.object_catalog import registry
from devicehub.sim.objects import BOOL, FLOAT, INT, OPAQUE, STRING, TIME, defined, standard_model

KIND_OF_TYPE = {"integer": INT, "float": FLOAT, "boolean": BOOL, "string": STRING, "opaque": OPAQUE, "time": TIME}


def test_every_standard_resource_is_typed_and_permitted_as_its_definition_says() -> None:
    model = standard_model("sim-device-0001", 60, lambda: 0.0)
    checked = 0
    for object_id, instances in model.objects.items():
        for resources in instances.values():
            for resource_id, resource in resources.items():
                definition = registry()[object_id].resource(resource_id)
                assert definition is not None, f"/{object_id}/0/{resource_id} is not in the registry"
                assert resource.writable == definition.writable, definition.name
                assert resource.executable == definition.executable, definition.name
                if definition.type in KIND_OF_TYPE:
                    assert resource.kind == KIND_OF_TYPE[definition.type], definition.name
                checked += 1
    assert checked == 19


def test_a_read_only_resource_refuses_a_write_and_a_writable_one_takes_it() -> None:
    model = standard_model("sim-device-0001", 60, lambda: 0.0)
    manufacturer, dimmer = model.resource("/3/0/0"), model.resource("/3311/0/5851")
    assert manufacturer is not None and not manufacturer.writable  # Manufacturer: R
    assert dimmer is not None and dimmer.writable and dimmer.parse_text(b"40") == 40  # Dimmer: RW integer


def test_a_resource_the_registry_does_not_define_cannot_be_simulated() -> None:
    with pytest.raises(KeyError):
        defined(3303, 9999, 0)
