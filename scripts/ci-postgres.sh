#!/usr/bin/env bash
# Start a throw-away PostgreSQL server on 127.0.0.1 and print its postgresql:// URL.
#
#   url=$(scripts/ci-postgres.sh [PORT] [DIR])   # default port 5433, default dir: a new mktemp -d
#   export DISSENSUS_TEST_PG="$url"
#   ...
#   scripts/ci-postgres.sh --stop DIR            # stop it and remove DIR
#
# Uses the distribution's PostgreSQL binaries (/usr/lib/postgresql/*/bin). When run as
# root, the server runs as the 'postgres' system user. Trust authentication, loopback
# only: for tests, never for data that matters. Logs go to DIR/server.log; the data
# directory is DIR/data. Everything but the URL goes to stderr.
set -euo pipefail

bindir=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
if [ -z "$bindir" ] || [ ! -x "$bindir/initdb" ]; then
    echo "ci-postgres: no PostgreSQL binaries under /usr/lib/postgresql/*/bin" >&2
    exit 2
fi

as_owner() {
    if [ "$(id -u)" = 0 ]; then
        runuser -u postgres -- "$@"
    else
        "$@"
    fi
}

if [ "${1:-}" = "--stop" ]; then
    dir=${2:?usage: ci-postgres.sh --stop DIR}
    as_owner "$bindir/pg_ctl" -D "$dir/data" -m immediate stop >&2 || true
    rm -rf "$dir"
    exit 0
fi

port=${1:-5433}
dir=${2:-$(mktemp -d /tmp/dissensus-pg.XXXXXX)}
mkdir -p "$dir"
if [ "$(id -u)" = 0 ]; then
    chown postgres: "$dir"
fi
if [ ! -f "$dir/data/PG_VERSION" ]; then
    as_owner "$bindir/initdb" -D "$dir/data" -U postgres -A trust -E UTF8 --no-locale >"$dir/initdb.log" 2>&1 || {
        cat "$dir/initdb.log" >&2
        exit 1
    }
fi
as_owner "$bindir/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 30 \
    -o "-h 127.0.0.1 -p $port -k $dir -c fsync=off -c max_connections=200" start >&2
as_owner "$bindir/psql" -h 127.0.0.1 -p "$port" -U postgres -d postgres -v ON_ERROR_STOP=1 -qtAc \
    "SELECT 1 FROM pg_database WHERE datname = 'dissensus_test'" | grep -q 1 ||
    as_owner "$bindir/createdb" -h 127.0.0.1 -p "$port" -U postgres dissensus_test
echo "ci-postgres: server in $dir (stop: scripts/ci-postgres.sh --stop $dir)" >&2
echo "postgresql://postgres@127.0.0.1:$port/dissensus_test"
