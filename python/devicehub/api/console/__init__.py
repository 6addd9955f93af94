"""The operator console: static HTML/CSS/JS shipped in the package (no build step, no CDN), served at `/`.

The page is a client of the documented API only; it holds no server-side state and needs no key to load.
"""

from __future__ import annotations

from pathlib import Path

from aiohttp import web

HERE = Path(__file__).parent
_ASSETS = ("console.css", "console.js", "channel.js", "node.js", "campaigns.js", "docs.js", "favicon.svg")
_TYPES = {".html": "text/html", ".css": "text/css", ".js": "text/javascript", ".svg": "image/svg+xml"}
# the page loads only its own files; the key never leaves the tab except in the Authorization header
_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; connect-src 'self' ws: wss:; img-src 'self' data:",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}


def _file(name: str) -> web.Response:
    path = HERE / name
    return web.Response(body=path.read_bytes(), content_type=_TYPES[path.suffix], charset="utf-8", headers=_HEADERS)


async def index(request: web.Request) -> web.Response:
    return _file("index.html")


async def asset(request: web.Request) -> web.Response:
    name = request.match_info["name"]
    if name not in _ASSETS:
        raise web.HTTPNotFound()
    return _file(name)


async def docs(request: web.Request) -> web.Response:
    """`/docs`: every operation of /openapi.json rendered in the page (no CDN, no third-party code)."""
    return _file("docs.html")


async def favicon(request: web.Request) -> web.Response:
    """Browsers ask for `/favicon.ico` whatever the page links: the console's icon, not a 404."""
    return _file("favicon.svg")


def add_routes(app: web.Application) -> None:
    app.router.add_get("/", index)
    app.router.add_get("/favicon.ico", favicon)
    app.router.add_get("/console/{name}", asset)
