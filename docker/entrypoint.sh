#!/bin/sh
# Container entry point: optionally creates a first account, its enrolled endpoint names and an API key from
# environment variables (only when that account does not exist yet), then runs `devicehub "$@"`.
#   DEVICEHUB_BOOTSTRAP_ACCOUNT    account name to create on first start (unset: no bootstrap)
#   DEVICEHUB_BOOTSTRAP_ENDPOINTS  endpoint names (space separated) enrolled into it
#   DEVICEHUB_BOOTSTRAP_KEY_FILE   where the new key is written (mode 0600); default: printed once on stderr
#   DEVICEHUB_SECRET_KEY           the key sealing device secrets (64 hex digits), e.g. from an orchestrator's
#                                  secret: written to a file only this user reads, outside the data volume, and
#                                  given to devicehub as DEVICEHUB_SECRET_KEY_FILE (or mount a secret file and set
#                                  DEVICEHUB_SECRET_KEY_FILE to it). Without either the key is made in the data
#                                  directory, where a backup holds it beside the secrets it seals.
# The store comes from DEVICEHUB_DATA_DIR or DEVICEHUB_REDIS_URL, as for every devicehub command.
set -eu
if [ -n "${DEVICEHUB_SECRET_KEY:-}" ]; then
  if [ -n "${DEVICEHUB_SECRET_KEY_FILE:-}" ]; then
    echo "devicehub-entrypoint: set DEVICEHUB_SECRET_KEY or DEVICEHUB_SECRET_KEY_FILE, not both" >&2
    exit 2
  fi
  key_dir=$(mktemp -d)  # under TMPDIR, not the data volume
  (umask 077 && printf '%s\n' "$DEVICEHUB_SECRET_KEY" >"$key_dir/secret.key")
  export DEVICEHUB_SECRET_KEY_FILE="$key_dir/secret.key"
  unset DEVICEHUB_SECRET_KEY  # not inherited by what devicehub starts
fi
if [ -n "${DEVICEHUB_BOOTSTRAP_ACCOUNT:-}" ]; then
  account="$DEVICEHUB_BOOTSTRAP_ACCOUNT"
  # created first, then looked for: containers starting together on one store (issue 31) all try, the store lets
  # one create it, and the others find it made and bootstrap nothing (a look first would let both create)
  if ! created=$(devicehub accounts create "$account" 2>&1); then
    if devicehub accounts list | cut -f2 | grep -qxF "$account"; then
      echo "devicehub-entrypoint: account $account exists; no bootstrap" >&2
    else
      echo "$created" >&2
      exit 1
    fi
  else
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
