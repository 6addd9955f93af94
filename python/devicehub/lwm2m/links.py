"""CoRE link format (RFC 6690) as LwM2M clients send it in Register and Update, parsed tolerantly.

Plain clients send object/instance links (`</3/0>,</3303>;ver=1.1`); the Pelion client sends one link per resource
with attributes `rt`, `if`, `obs`, `v` (value, base64 when opaque), `aobs` (auto-observe token) and `d` (deleted,
updates only) — lwm2m-device-side.md §2, §8. Quoted values may contain commas and semicolons.

A quoted value is RFC 6690 §2's quoted-string (RFC 2616 §2.2): a backslash quotes the next character (`\"`, `\\`),
both when splitting and when reading the value; `quoted_string` writes what the parsers read back to the same text.
A `"` inside a ptoken (where §2 allows none) still opens a quoted part, as before: tolerated, not refused.

`parse_links` is the Rust parser (`devicehub._core.parse_links`, issue 16 #1: it was a third of the service's
Python time per Pelion registration); `parse_links_py` is its pure twin, tested to give the same links and the
same errors on any input.
"""

from __future__ import annotations

import base64
import binascii
import re

from devicehub import _core
from devicehub.domain.content_formats import OCTET_STREAM
from devicehub.domain.model import ResourceLink

MAX_LINKS = 20_000

LinkFormatError = _core.LinkFormatError  # the payload is not link format devicehub can read (both parsers)


def _split(text: str, separator: str) -> list[str]:
    """Split on `separator` outside double quotes and angle brackets; inside quotes `\\x` is one quoted-pair."""
    parts: list[str] = []
    start = 0
    quoted = bracketed = escaped = False
    for index, char in enumerate(text):
        if escaped:
            escaped = False
        elif char == "\\" and quoted:
            escaped = True
        elif char == '"' and not bracketed:
            quoted = not quoted
        elif char == "<" and not quoted:
            bracketed = True
        elif char == ">" and not quoted:
            bracketed = False
        elif char == separator and not quoted and not bracketed:
            parts.append(text[start:index])
            start = index + 1
    if quoted or bracketed:
        raise LinkFormatError("unterminated quote or bracket")
    parts.append(text[start:])
    return parts


def _unquote(value: str) -> str:
    """A quoted-string's text: the quotes removed, each quoted-pair `\\x` read as `x` (RFC 2616 §2.2); anything
    else as it is."""
    if not (len(value) >= 2 and value[0] == value[-1] == '"'):
        return value
    inner = value[1:-1]
    if "\\" not in inner:
        return inner
    return _PAIR.sub(r"\1", inner)


_PAIR = re.compile(r"\\(.)", re.DOTALL)


def quoted_string(text: str) -> str:
    """`text` as a quoted-string that both parsers read back to `text`: `"` and `\\` escaped (RFC 2616 §2.2)."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def ascii_digits(text: str, most: int) -> bool:
    """Issue 14 #2: `str.isdigit` takes '²' (int() then raises) and '١' (int() reads 1); ids are ASCII digits."""
    return 0 < len(text) <= most and text.isascii() and text.isdigit()


def _valid_path(path: str) -> bool:
    if path == "/":
        return True
    segments = path.split("/")
    return (
        path.startswith("/")
        and 2 <= len(segments) <= 5
        and all(ascii_digits(s, 5) and int(s) <= 65535 for s in segments[1:])
    )


# equal links of many devices are one object, looked up in Rust by the parsed link (issue 16: building each link's
# field tuple and looking it up in a Python table was half of parsing a Pelion registration)
_LINKS = _core.LinkTable(ResourceLink)


def parse_links(payload: bytes) -> list[ResourceLink]:
    """Every object, instance or resource link; the root link (`</>`) and non-LwM2M paths are skipped."""
    links: list[ResourceLink] = _LINKS.parse(payload)
    return links


def shared_link(
    path: str, rt: str | None, ct: int | None, obs: bool, iface: str | None, aobs: int | None
) -> ResourceLink:
    """The link of a stored registration (no value, not deleted), shared as parsed links are."""
    link: ResourceLink = _LINKS.get(path, rt, ct, obs, iface, None, aobs, False)
    return link


def parse_links_py(payload: bytes) -> list[ResourceLink]:
    """`parse_links` in Python: the twin the Rust parser is tested against."""
    try:
        text = payload.decode("utf-8")
    except UnicodeDecodeError as error:
        raise LinkFormatError("link format is not UTF-8") from error
    links: list[ResourceLink] = []
    for raw in _split(text.strip(), ","):
        raw = raw.strip()
        if not raw:
            continue
        fields = _split(raw, ";")
        target = fields[0].strip()
        if not (target.startswith("<") and target.endswith(">")):
            raise LinkFormatError(f"link target must be <…>: {target[:40]!r}")
        path = target[1:-1].rstrip("/") or "/"
        if path == "/" or not _valid_path(path):
            continue  # alternate root path `</>;rt="oma.lwm2m"`, or something that is not an LwM2M path
        links.append(_link(path, fields[1:]))
        if len(links) > MAX_LINKS:
            raise LinkFormatError(f"more than {MAX_LINKS} links")
    return links


def _link(path: str, fields: list[str]) -> ResourceLink:
    attrs: dict[str, str | None] = {}
    for field in fields:
        name, eq, value = field.strip().partition("=")
        value = _unquote(value.strip())
        attrs[name.strip()] = value if eq else None
    ct = _int(attrs.get("ct"))
    raw_value = attrs.get("v")
    data: bytes | None = None
    if raw_value is not None:
        data = raw_value.encode()
        if ct == OCTET_STREAM:
            try:
                data = base64.b64decode(raw_value, validate=True)
            except (binascii.Error, ValueError):
                data = raw_value.encode()
    aobs = _int(attrs.get("aobs"))
    return ResourceLink(
        path=path,
        rt=attrs.get("rt"),
        ct=ct,
        obs="obs" in attrs,
        iface=attrs.get("if"),
        value=data,
        aobs=aobs if aobs is not None and 0 <= aobs <= 0xFFFF else None,
        deleted="d" in attrs,
    )


def _int(text: str | None) -> int | None:
    if text is None or not ascii_digits(text, 10):
        return None
    return int(text)


def format_links(links: list[ResourceLink]) -> bytes:
    """The inverse, as the simulator sends it (Pelion attribute spelling)."""
    parts = []
    for link in links:
        part = f"<{link.path}>"
        if link.rt is not None:
            part += f";rt={quoted_string(link.rt)}"
        if link.ct is not None:
            part += f";ct={link.ct}"
        if link.iface is not None:
            part += f";if={quoted_string(link.iface)}"
        if link.obs:
            part += ";obs"
        if link.value is not None:
            shown = base64.b64encode(link.value).decode() if link.ct == OCTET_STREAM else link.value.decode()
            part += f";v={quoted_string(shown)}"
        if link.aobs is not None:
            part += f';aobs="{link.aobs}"'
        if link.deleted:
            part += ";d"
        parts.append(part)
    return ",".join(parts).encode()


def link_attributes(payload: bytes) -> list[tuple[str, dict[str, str | None]]]:
    """Every link target with all its attributes as text (quotes removed), `</>` included: what a
    Bootstrap-Discover answer says (`</>;lwm2m=1.1,</0/0>,</0/1>;ssid=101;uri="coap://…"`, LwM2M 1.1 §5.2.7.1)."""
    try:
        text = payload.decode("utf-8")
    except UnicodeDecodeError as error:
        raise LinkFormatError("link format is not UTF-8") from error
    links: list[tuple[str, dict[str, str | None]]] = []
    for raw in _split(text.strip(), ","):
        fields = _split(raw.strip(), ";")
        target = fields[0].strip()
        if not target:
            continue
        if not (target.startswith("<") and target.endswith(">")):
            raise LinkFormatError(f"link target must be <…>: {target[:40]!r}")
        attrs: dict[str, str | None] = {}
        for field in fields[1:]:
            name, eq, value = field.strip().partition("=")
            value = _unquote(value.strip())
            attrs[name.strip()] = value if eq else None
        links.append((target[1:-1], attrs))
        if len(links) > MAX_LINKS:
            raise LinkFormatError(f"more than {MAX_LINKS} links")
    return links
