"""Test-suite root: makes `support` importable for every test directory, and makes uvloop the event loop of every
test, as the CLI runs the service (support/loops.py says why)."""

from support.loops import use_uvloop

use_uvloop()
