#!/usr/bin/env bash
# A throwaway PostgreSQL cluster for the history's PostgreSQL tests, as
# .ci/run starts one: Debian's server (installed when missing), a cluster
# in a temporary folder, run as an unprivileged user, listening on
# 127.0.0.1 only, with password authentication.
#
#   eval "$(scripts/postgres-throwaway.sh start)"   # exports OOMGATE_TEST_POSTGRES, PGTHROWAWAY,
#                                                    # OOMGATE_TEST_POSTGRES_TLS (1: the server speaks TLS)
#   scripts/postgres-throwaway.sh stop "$PGTHROWAWAY"
#
# The password is for this cluster alone and dies with it; it is handed
# to the tests through PGPASSWORD, never in the URL.
set -euo pipefail

bin_dir() {
    local dir
    dir=$(find /usr/lib/postgresql -maxdepth 2 -name bin -type d 2>/dev/null | sort -V | tail -n 1)
    if [ -z "$dir" ] || [ ! -x "$dir/initdb" ]; then
        return 1
    fi
    echo "$dir"
}

case "${1:-}" in
start)
    if ! bin=$(bin_dir); then
        echo "postgres-throwaway: installing Debian's postgresql" >&2
        apt-get update -qq >&2
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >&2
        bin=$(bin_dir)
    fi
    user=oomgate-pg
    if ! id "$user" >/dev/null 2>&1; then
        useradd --system --no-create-home --shell /usr/sbin/nologin "$user"
    fi
    dir=$(mktemp -d /tmp/oomgate-pg.XXXXXX)
    chown "$user" "$dir"
    password=$(head -c 18 /dev/urandom | base64 | tr -d '/+=')
    printf '%s\n' "$password" >"$dir/pwfile"
    chown "$user" "$dir/pwfile"
    chmod 600 "$dir/pwfile"
    runuser -u "$user" -- "$bin/initdb" -D "$dir/data" -U oomgate --auth=scram-sha-256 \
        --pwfile="$dir/pwfile" >"$dir/initdb.log" 2>&1
    # TLS with a self-signed certificate, where the openssl command is
    # there: a client that asks sslmode=require connects, one that asks
    # verify-full refuses it.
    tls=0
    if command -v openssl >/dev/null 2>&1; then
        openssl req -new -x509 -days 2 -nodes -subj "/CN=localhost" \
            -keyout "$dir/data/server.key" -out "$dir/data/server.crt" >/dev/null 2>&1
        chown "$user" "$dir/data/server.key" "$dir/data/server.crt"
        chmod 600 "$dir/data/server.key"
        echo "ssl = on" >>"$dir/data/postgresql.conf"
        tls=1
    fi
    port=$((20000 + RANDOM % 20000))
    runuser -u "$user" -- "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 \
        -o "-c listen_addresses=127.0.0.1 -c port=$port -c unix_socket_directories=$dir -c fsync=off" \
        start >&2
    PGPASSWORD=$password "$bin/psql" -h 127.0.0.1 -p "$port" -U oomgate -d postgres -qc "CREATE DATABASE oomgate_test" >&2
    echo "export PGTHROWAWAY='$dir'"
    echo "export OOMGATE_TEST_POSTGRES='postgres://oomgate@127.0.0.1:$port/oomgate_test?sslmode=disable'"
    echo "export PGPASSWORD='$password'"
    echo "export OOMGATE_TEST_POSTGRES_TLS=$tls"
    ;;
stop)
    dir=${2:?the folder start printed}
    bin=$(bin_dir)
    runuser -u oomgate-pg -- "$bin/pg_ctl" -D "$dir/data" -m immediate stop >/dev/null 2>&1 || true
    rm -rf "$dir"
    ;;
*)
    echo "usage: $0 start | stop DIR" >&2
    exit 2
    ;;
esac
