#!/bin/sh
# Container entry point: optionally creates a first account, its enrolled endpoint names and an API key from
# environment variables, then runs `devicehub "$@"`. Idempotent: an account that exists is left as it is, except
# that a key file that is asked for and missing (a start that failed writing it, a volume emptied) gets a new key.
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
write_key() {  # whole or not at all: a temporary file beside the target, then renamed over it
  (umask 077 && printf '%s\n' "$1" >"$DEVICEHUB_BOOTSTRAP_KEY_FILE.tmp") \
    && mv -f "$DEVICEHUB_BOOTSTRAP_KEY_FILE.tmp" "$DEVICEHUB_BOOTSTRAP_KEY_FILE"
}
if [ -n "${DEVICEHUB_BOOTSTRAP_ACCOUNT:-}" ]; then
  account="$DEVICEHUB_BOOTSTRAP_ACCOUNT"
  key_file="${DEVICEHUB_BOOTSTRAP_KEY_FILE:-}"
  if [ -n "$key_file" ]; then  # said before anything is created: a key made and then not written is lost
    key_dir=$(dirname "$key_file")
    if ! { [ -d "$key_dir" ] && [ -w "$key_dir" ] && probe=$(mktemp "$key_dir/.write-test.XXXXXX") \
      && rm -f "$probe"; } 2>/dev/null; then
      echo "devicehub-entrypoint: cannot write the API key file $key_file: $key_dir is not a directory uid $(id -u) can write" >&2
      exit 2
    fi
  fi
  # created first, then looked for: containers starting together on one store (issue 31) all try, the store lets
  # one create it, and the others find it made and bootstrap nothing (a look first would let both create)
  if ! created=$(devicehub accounts create "$account" 2>&1); then
    if ! devicehub accounts list | cut -f2 | grep -qxF "$account"; then
      echo "$created" >&2
      exit 1
    fi
    if [ -n "$key_file" ] && [ ! -s "$key_file" ]; then
      key=$(devicehub keys create --account "$account" --name bootstrap 2>/dev/null | tail -n 1)
      write_key "$key"
      echo "devicehub-entrypoint: account $account exists but $key_file did not; a new API key is in it" >&2
    else
      echo "devicehub-entrypoint: account $account exists; no bootstrap" >&2
    fi
  else
    if [ -n "${DEVICEHUB_BOOTSTRAP_ENDPOINTS:-}" ]; then
      # shellcheck disable=SC2086 # one argument per endpoint name
      devicehub accounts enroll "$account" $DEVICEHUB_BOOTSTRAP_ENDPOINTS >&2
    fi
    key=$(devicehub keys create --account "$account" --name bootstrap 2>/dev/null | tail -n 1)
    if [ -n "$key_file" ]; then
      write_key "$key"
      echo "devicehub-entrypoint: created account $account; its API key is in $key_file" >&2
    else
      echo "devicehub-entrypoint: created account $account; its API key (shown once): $key" >&2
    fi
  fi
fi
exec devicehub "$@"
