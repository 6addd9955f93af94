"""Files only this user may read (keys), written whole before anyone can open them: nodes that share a data
directory and start together read a whole file or none, never a torn one."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def write_private(path: Path, text: str, *, replace: bool) -> bool:
    """Write `text` to `path`, mode 0600 from its first byte, under a temporary name first. With `replace` it goes
    over whatever is there (a rename); without, only if nothing is: False, nothing written, when `path` exists (a
    hard link, which fails rather than replaces, so of several writers exactly one wins)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")  # mkstemp makes it 0600
    try:
        with os.fdopen(fd, "w") as file:
            file.write(text)
        if replace:
            os.replace(temporary, path)
            return True
        try:
            os.link(temporary, path)
        except FileExistsError:
            return False
        return True
    finally:
        if os.path.exists(temporary):
            os.unlink(temporary)
