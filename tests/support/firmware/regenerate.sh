#!/bin/sh
# Remakes manifest-1.2.3.bin with ARM's manifest-tool (PyPI). It pins cryptography, jsonschema and requests to
# versions the test group's other packages refuse, so it runs from a virtualenv of its own:
#   python3 -m venv /tmp/mtool && /tmp/mtool/bin/pip install manifest-tool==2.6.2
set -eu
cd "$(dirname "$0")"
MTOOL=${MTOOL:-/tmp/mtool/bin/manifest-tool}
key=$(mktemp)
openssl ecparam -genkey -name prime256v1 -noout -out "$key"
"$MTOOL" create -c manifest.yaml -k "$key" -v 1.2.3 -o manifest-1.2.3.bin
rm -f "$key"
