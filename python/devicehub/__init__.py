"""devicehub: a self-hostable LwM2M device management service with a Pelion-compatible API."""

from devicehub._core import __version__

__all__ = ["__version__"]
