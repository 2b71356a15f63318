# Sourced by .ci/run: install (Debian package), start and prepare a PostgreSQL server for the store tests.
set -euo pipefail
# The image may ship the client (psql, postgresql-common) without a server: look for the server binary.
if ! ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
fi
version=$(ls -d /usr/lib/postgresql/*/bin/postgres | sed 's#/usr/lib/postgresql/\([^/]*\)/bin/postgres#\1#' | sort -V | tail -n 1)
if ! pg_lsclusters -h | grep -q "^$version main"; then
    pg_createcluster "$version" main >/dev/null
fi
pg_ctlcluster "$version" main start 2>/dev/null || true
port=$(pg_lsclusters -h | awk -v v="$version" '$1 == v && $2 == "main" {print $3}')
for _ in $(seq 1 30); do
    pg_isready -q -h 127.0.0.1 -p "$port" && break
    sleep 1
done
su postgres -c "psql -q -p $port -c \"ALTER USER postgres PASSWORD 'postgres'\""
if ! su postgres -c "psql -p $port -tAc \"SELECT 1 FROM pg_database WHERE datname = 'compaction_test'\"" | grep -q 1; then
    su postgres -c "createdb -p $port compaction_test"
fi
export PAC_POSTGRES_DSN="postgresql://postgres:postgres@127.0.0.1:$port/compaction_test"
export PAC_REQUIRE_POSTGRES=1
echo "PostgreSQL $version ready on port $port"
