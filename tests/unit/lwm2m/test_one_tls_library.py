"""Issue 29 #7, one TLS library: every (D)TLS session runs on OpenSSL from Rust, so no devicehub module imports
python-mbedtls (the TLS/TCP listener, the coaps+tcp client and the DTLS client used it until then)."""

from __future__ import annotations

import subprocess
import sys

IMPORT_EVERY_MODULE_WITHOUT_MBEDTLS = """
import importlib, importlib.abc, pkgutil, sys

class Refuse(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "mbedtls":
            raise ImportError(f"{name} imported by a devicehub module")
        return None

sys.meta_path.insert(0, Refuse())
import devicehub
for module in pkgutil.walk_packages(devicehub.__path__, "devicehub."):
    if not module.name.endswith("__main__"):  # runs the CLI
        importlib.import_module(module.name)
"""


def test_no_devicehub_module_imports_python_mbedtls() -> None:
    # a process of its own: the import hook and the modules it loads stay out of the test run's
    done = subprocess.run(
        [sys.executable, "-c", IMPORT_EVERY_MODULE_WITHOUT_MBEDTLS], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr[-2000:]
