#!/usr/bin/env bash
# Start a throwaway PostgreSQL on 127.0.0.1 for the journal and service tests and print
# `export DISSENSUS_TEST_PG=...`. Uses Debian's postgresql package (installed by .ci/run).
# The server runs as the `postgres` user (PostgreSQL refuses to run as root) from a data
# directory under /tmp and stops with the machine; nothing outside /tmp is changed.
set -euo pipefail
PORT="${DISSENSUS_PG_PORT:-$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')}"
BIN="$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)"
if [ -z "$BIN" ] || [ ! -x "$BIN/initdb" ]; then
  echo "echo 'PostgreSQL server binaries not found: PostgreSQL tests will be skipped' >&2"
  exit 0
fi
DATA="$(mktemp -d /tmp/dissensus-pg.XXXXXX)"
RUNAS=()
if [ "$(id -u)" = 0 ]; then
  chown postgres:postgres "$DATA"
  RUNAS=(runuser -u postgres --)
fi
"${RUNAS[@]}" "$BIN/initdb" -D "$DATA" -U postgres -A trust --no-sync >/dev/null
"${RUNAS[@]}" "$BIN/pg_ctl" -D "$DATA" -l "$DATA/server.log" -w \
  -o "-c listen_addresses=127.0.0.1 -p $PORT -k $DATA -c fsync=off -c max_connections=200" start >/dev/null
"${RUNAS[@]}" "$BIN/createdb" -h 127.0.0.1 -p "$PORT" -U postgres dissensus_test
echo "export DISSENSUS_TEST_PG=postgresql://postgres@127.0.0.1:$PORT/dissensus_test"
