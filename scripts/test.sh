#!/usr/bin/env bash
# Installs what the test suite needs (redis-server from Debian, the package with its Rust extension and
# the test dependency group) and runs it. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
# chromium + chromium-driver: the operator console's browser test (tests/e2e/test_console_browser.py)
if ! command -v redis-server >/dev/null 2>&1 || ! command -v chromium >/dev/null 2>&1 \
  || ! command -v chromedriver >/dev/null 2>&1; then
  packages="redis-server chromium chromium-driver"
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $packages >/dev/null
  else
    sudo apt-get update -qq && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $packages >/dev/null
  fi
  # the Debian package starts a system instance; the tests start their own on free ports
  (systemctl stop redis-server 2>/dev/null || service redis-server stop 2>/dev/null || true) >/dev/null
fi
# issue 13: coap-client-openssl for the DTLS tests; autoconf/automake/libtool build PyPI DTLSSocket (aiocoap's DTLS)
# and openssl: s_client offering a previous DTLS session (test_dtls_resumption.py)
if ! command -v coap-client-openssl >/dev/null 2>&1 || ! command -v autoreconf >/dev/null 2>&1 \
  || ! command -v openssl >/dev/null 2>&1; then
  packages="libcoap3-bin autoconf automake libtool openssl"
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $packages >/dev/null
  else
    sudo apt-get update -qq && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $packages >/dev/null
  fi
fi
# libssl-dev + pkg-config: the DTLS server engine (rust/io/src/dtls.rs, the `openssl` crate) links OpenSSL
if ! command -v pkg-config >/dev/null 2>&1 || ! pkg-config --exists openssl; then
  packages="libssl-dev pkg-config"
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $packages >/dev/null
  else
    sudo apt-get update -qq && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $packages >/dev/null
  fi
fi
# issue 31 #3: nginx with its stream module, the front of three nodes (tests/e2e/test_cluster_front.py)
if ! command -v nginx >/dev/null 2>&1 || ! [ -e /usr/lib/nginx/modules/ngx_stream_module.so ]; then
  packages="nginx-light libnginx-mod-stream"
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $packages >/dev/null
  else
    sudo apt-get update -qq && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $packages >/dev/null
  fi
  # the Debian package starts a system instance on port 80; the tests start their own on free ports
  (systemctl stop nginx 2>/dev/null || service nginx stop 2>/dev/null || true) >/dev/null
fi
# issue 32 #5: the tests get an environment of their own (.venv-test), so running them beside a `devicehub serve`
# installed by command 1 does not reinstall that server's package under it (it answered 500 on / afterwards)
venv=.venv-test
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
"$venv/bin/python" -m pip install -q --disable-pip-version-check -U "pip>=25.1"
"$venv/bin/python" -m pip install -q --disable-pip-version-check -e . --group test
exec "$venv/bin/python" -m pytest "$@"
