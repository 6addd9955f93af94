"""Reading object definitions from DDF XML (the OMA registry's format, schema LWM2M-v1_1.xsd), untrusted input.

The XML is parsed by expat with every DTD refused (no entity, internal or external, is ever declared or expanded:
the defusedxml rule) and the input is size-bounded before parsing.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from xml.parsers import expat

from devicehub.domain.object_model import OPERATIONS, TYPES, ObjectDefinition, ResourceDefinition
from devicehub.errors import FieldError, ValidationFailed

MAX_DDF_BYTES = 256 * 1024  # the registry's largest file is 22 KiB
MAX_OBJECTS_PER_FILE = 64
MAX_ID = 65534  # Core §7.1: 65535 is reserved


class InvalidDefinition(ValidationFailed):
    """The object definition is not well-formed DDF XML, or not a valid definition."""

    token = "INVALID_OBJECT_DEFINITION"
    type = "validation_error"


def parse_ddf(data: bytes) -> list[ObjectDefinition]:
    """Every `<Object>` of one DDF document; InvalidDefinition names what is wrong."""
    if len(data) > MAX_DDF_BYTES:
        raise InvalidDefinition(f"the definition is larger than {MAX_DDF_BYTES} bytes")
    root = _tree(data)
    if root.tag != "LWM2M":
        raise InvalidDefinition(f"the root element is <{root.tag}>, not <LWM2M>")
    objects = root.findall("Object")
    if not objects:
        raise InvalidDefinition("no <Object> element")
    if len(objects) > MAX_OBJECTS_PER_FILE:
        raise InvalidDefinition(f"more than {MAX_OBJECTS_PER_FILE} objects in one document")
    definitions = [_object(element) for element in objects]
    ids = [d.id for d in definitions]
    if len(set(ids)) != len(ids):
        raise InvalidDefinition("an object id appears twice")
    return definitions


def _tree(data: bytes) -> ET.Element:
    builder = ET.TreeBuilder()
    parser = expat.ParserCreate()

    def refuse(*_: object) -> None:
        raise InvalidDefinition("a DTD (<!DOCTYPE> or an entity declaration) is not allowed")

    parser.StartDoctypeDeclHandler = refuse
    parser.EntityDeclHandler = refuse
    parser.ExternalEntityRefHandler = refuse  # type: ignore[assignment]
    parser.StartElementHandler = builder.start
    parser.EndElementHandler = builder.end
    parser.CharacterDataHandler = builder.data
    try:
        parser.Parse(data, True)
        return builder.close()
    except expat.ExpatError as error:
        raise InvalidDefinition(
            f"not well-formed XML: {expat.errors.messages[error.code]} at line {error.lineno}"
        ) from None
    except AssertionError:  # TreeBuilder.close() with nothing built
        raise InvalidDefinition("not well-formed XML: no element") from None


def _text(element: ET.Element, tag: str, *, required: bool = True) -> str:
    child = element.find(tag)
    if child is None:
        if required:
            raise InvalidDefinition(f"<{element.tag}> has no <{tag}>", fields=(FieldError(tag, "missing"),))
        return ""
    return (child.text or "").strip()


def _id(text: str, what: str) -> int:
    if not text.isdigit() or int(text) > MAX_ID:
        raise InvalidDefinition(f"{what} {text!r} is not a number from 0 to {MAX_ID}")
    return int(text)


def _choice(text: str, yes: str, no: str, what: str) -> bool:
    if text not in (yes, no):
        raise InvalidDefinition(f"{what} is {text!r}, not {yes} or {no}")
    return text == yes


def _object(element: ET.Element) -> ObjectDefinition:
    object_id = _id(_text(element, "ObjectID"), "ObjectID")
    name = _text(element, "Name")
    if not name:
        raise InvalidDefinition(f"object {object_id} has no name")
    items = element.find("Resources")
    resources = tuple(_resource(object_id, item) for item in (items.findall("Item") if items is not None else ()))
    ids = [r.id for r in resources]
    if len(set(ids)) != len(ids):
        raise InvalidDefinition(f"object {object_id} has a resource id twice")
    return ObjectDefinition(
        id=object_id,
        name=name,
        version=_text(element, "ObjectVersion", required=False) or "1.0",
        multiple=_choice(_text(element, "MultipleInstances"), "Multiple", "Single", f"object {object_id} instances"),
        mandatory=_choice(_text(element, "Mandatory"), "Mandatory", "Optional", f"object {object_id} Mandatory"),
        description=_text(element, "Description1", required=False),
        resources=resources,
    )


def _resource(object_id: int, item: ET.Element) -> ResourceDefinition:
    resource_id = _id(item.get("ID", ""), f"object {object_id} resource ID")
    where = f"resource /{object_id}/x/{resource_id}"
    operations = _text(item, "Operations").upper()
    if operations not in OPERATIONS:
        raise InvalidDefinition(f"{where} has operations {operations!r}, not one of R, W, RW, E or none")
    kind = _text(item, "Type", required=False).lower()
    if kind not in TYPES:
        raise InvalidDefinition(f"{where} has type {kind!r}, not an LwM2M data type")
    return ResourceDefinition(
        id=resource_id,
        name=_text(item, "Name") or f"Resource {resource_id}",
        operations=operations,
        type=kind,
        multiple=_choice(_text(item, "MultipleInstances"), "Multiple", "Single", f"{where} instances"),
        mandatory=_choice(_text(item, "Mandatory"), "Mandatory", "Optional", f"{where} Mandatory"),
        units=_text(item, "Units", required=False),
        range=_text(item, "RangeEnumeration", required=False),
        description=_text(item, "Description", required=False),
    )
