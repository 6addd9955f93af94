"""The HTTP edge: aiohttp app, routes, msgspec wire models, auth and error mapping."""
