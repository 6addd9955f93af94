#!/bin/sh
# Container entry point: optionally creates a first account, its enrolled endpoint names and an API key from
# environment variables (only when that account does not exist yet), then runs `devicehub "$@"`.
#   DEVICEHUB_BOOTSTRAP_ACCOUNT    account name to create on first start (unset: no bootstrap)
#   DEVICEHUB_BOOTSTRAP_ENDPOINTS  endpoint names (space separated) enrolled into it
#   DEVICEHUB_BOOTSTRAP_KEY_FILE   where the new key is written (mode 0600); default: printed once on stderr
# The store comes from DEVICEHUB_DATA_DIR or DEVICEHUB_REDIS_URL, as for every devicehub command.
set -eu
if [ -n "${DEVICEHUB_BOOTSTRAP_ACCOUNT:-}" ]; then
  account="$DEVICEHUB_BOOTSTRAP_ACCOUNT"
  if devicehub accounts list | cut -f2 | grep -qxF "$account"; then
    echo "devicehub-entrypoint: account $account exists; no bootstrap" >&2
  else
    devicehub accounts create "$account" >/dev/null
    if [ -n "${DEVICEHUB_BOOTSTRAP_ENDPOINTS:-}" ]; then
      # shellcheck disable=SC2086 # one argument per endpoint name
      devicehub accounts enroll "$account" $DEVICEHUB_BOOTSTRAP_ENDPOINTS >&2
    fi
    key=$(devicehub keys create --account "$account" --name bootstrap 2>/dev/null | tail -n 1)
    if [ -n "${DEVICEHUB_BOOTSTRAP_KEY_FILE:-}" ]; then
      (umask 077 && printf '%s\n' "$key" >"$DEVICEHUB_BOOTSTRAP_KEY_FILE")
      echo "devicehub-entrypoint: created account $account; its API key is in $DEVICEHUB_BOOTSTRAP_KEY_FILE" >&2
    else
      echo "devicehub-entrypoint: created account $account; its API key (shown once): $key" >&2
    fi
  fi
fi
exec devicehub "$@"
