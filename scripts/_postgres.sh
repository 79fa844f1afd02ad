#!/usr/bin/env bash
# PostgreSQL for the test suite (tests/support/postgres.py, TEST_POSTGRES_URL): the machine's when
# one answers on 127.0.0.1:5432, else Debian's package and a throwaway cluster of our own there
# (trust authentication on loopback only, no fsync: test data). Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."

port=${TEST_POSTGRES_PORT:-5432}
answers() { (exec 3<>/dev/tcp/127.0.0.1/"$port") 2>/dev/null; }
answers && exit 0

bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1 || true)
if [ -z "$bin" ]; then
  SUDO=""
  [ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null 2>&1 && SUDO="sudo"
  echo "==> installing system package: postgresql"
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends postgresql >/dev/null
  bin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
fi
answers && exit 0  # the package's own cluster started (a machine with an init system)

dir=${TMPDIR:-/tmp}/voiceagent-postgres-$port
as=()
if [ "$(id -u)" -eq 0 ]; then as=(runuser -u postgres --); fi  # PostgreSQL refuses to run as root
mkdir -p "$dir"
[ "$(id -u)" -eq 0 ] && chown postgres "$dir"
if [ ! -f "$dir/data/PG_VERSION" ]; then
  echo "==> creating a PostgreSQL cluster for the tests in $dir"
  "${as[@]}" "$bin/initdb" -D "$dir/data" -U postgres --auth=trust --no-sync >/dev/null
fi
echo "==> starting PostgreSQL on 127.0.0.1:$port"
"${as[@]}" "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 \
  -o "-c listen_addresses=127.0.0.1 -p $port -k $dir -c fsync=off -c max_connections=300" start >/dev/null
