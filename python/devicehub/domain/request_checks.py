"""What an application's request must satisfy before it reaches a device or the store: an operation the object model
allows the resource, a subscription to a path the device has, presubscription rules within their limits."""

from __future__ import annotations

from collections.abc import Sequence

from devicehub.domain.content_formats import TEXT, cf_for
from devicehub.domain.model import Device, PresubscriptionRule
from devicehub.domain.object_model import ResourceDefinition, value_error
from devicehub.domain.paths import normalise
from devicehub.errors import FieldError, MethodNotAllowed, ValidationFailed

MAX_RULES = 1024  # wire-format.md
MAX_RULE_PATHS = 4096  # resource paths over all of a key's rules: each is matched at every registration


def check_operation(
    resource: ResourceDefinition, method: str, path: str, payload: bytes, content_type: str | None
) -> None:
    """issue 32 #1: what the object model says a resource cannot do is refused and never sent. Core §6.3.3: POST to
    a resource is Execute; PUT with a value is Write, PUT with only a query (no value, no content format) is
    Write-Attributes, which any resource takes."""
    if method == "POST" and not resource.executable:
        raise MethodNotAllowed(f"{path} ({resource.name}) is not executable", token="METHOD_NOT_ALLOWED")
    if method == "PUT" and (payload or content_type is not None):
        if not resource.writable:
            raise MethodNotAllowed(f"{path} ({resource.name}) is not writable", token="METHOD_NOT_ALLOWED")
        if content_type is None or cf_for(content_type) == TEXT:
            problem = value_error(resource, payload.decode("utf-8", "replace"))
            if problem is not None:
                raise ValidationFailed(problem, fields=(FieldError("payload-b64", problem),))


def known_path(device: Device, path: str) -> bool:
    """The device has this resource, or one below or above it."""
    return any(
        r.path == path or path.startswith(r.path + "/") or r.path.startswith(path + "/") for r in device.resources
    )


def checked_rules(rules: Sequence[PresubscriptionRule]) -> list[PresubscriptionRule]:
    """The rules within their limits, with normalised paths (ValidationFailed otherwise)."""
    if len(rules) > MAX_RULES:
        raise ValidationFailed(f"at most {MAX_RULES} presubscription rules", token="LIMITS_EXCEEDED")
    if sum(len(rule.resource_path) for rule in rules) > MAX_RULE_PATHS:
        raise ValidationFailed(
            f"at most {MAX_RULE_PATHS} resource paths over all presubscription rules", token="LIMITS_EXCEEDED"
        )
    clean = []
    for rule in rules:
        for label, value in (("endpoint-name", rule.endpoint_name), ("endpoint-type", rule.endpoint_type)):
            if value is not None and len(value) > 64:
                raise ValidationFailed(f"{label} longer than 64 characters")
        clean.append(
            PresubscriptionRule(
                endpoint_name=rule.endpoint_name,
                endpoint_type=rule.endpoint_type,
                resource_path=tuple(normalise(p, wildcard=True, field="resource-path") for p in rule.resource_path),
            )
        )
    return clean
