"""Small DDF XML documents for the object model's tests."""

from __future__ import annotations


def ddf(object_id: int, name: str, *resources: tuple[int, str, str, str, str]) -> bytes:
    """One object; each resource is (id, name, operations, type, units)."""
    items = "".join(
        f'<Item ID="{rid}"><Name>{rname}</Name><Operations>{ops}</Operations>'
        f"<MultipleInstances>Single</MultipleInstances><Mandatory>Optional</Mandatory><Type>{kind}</Type>"
        f"<RangeEnumeration></RangeEnumeration><Units>{units}</Units><Description></Description></Item>"
        for rid, rname, ops, kind, units in resources
    )
    return (
        f'<?xml version="1.0" encoding="UTF-8"?><LWM2M><Object ObjectType="MODefinition"><Name>{name}</Name>'
        f"<Description1>test object</Description1><ObjectID>{object_id}</ObjectID><ObjectURN></ObjectURN>"
        "<MultipleInstances>Multiple</MultipleInstances><Mandatory>Optional</Mandatory>"
        f"<Resources>{items}</Resources></Object></LWM2M>"
    ).encode()
