#!/usr/bin/env bash
# Time from exec of `metnos up` to its fifth address line (all five SERVING).
# Usage: scripts/bench-up.sh [path/to/metnos] [runs] [first|later]
#   first (default): a fresh data directory and HOME each run, so every run creates the
#                    stores, the CA and the six certificates, the owner's signing key and
#                    the signed built-in executors (when metnos-exec is beside metnos);
#   later:           one data directory and HOME, prepared by an unmeasured run, so every
#                    measured run finds all that (what a person restarting sees).
# HOME is always a temporary one: the first-run setup writes ~/.config/metnos.
# Build first: cargo build --release --bin metnos
bin=${1:-target/release/metnos}
runs=${2:-20}
which=${3:-first}
case $which in first | later) ;; *) echo "bench-up: first or later, not $which" >&2; exit 2 ;; esac

# `once DIR`: one `metnos up` on DIR, its start-up time in ms on stdout.
once() {
  local start end
  start=$(date +%s%N)
  coproc UP { HOME=$1/home METNOS_DATA_DIR=$1/data METNOS_TELEMETRY__LOG=warn exec "$bin" up 2>/dev/null; }
  for _ in 1 2 3 4 5; do read -r _ <&"${UP[0]}"; done
  end=$(date +%s%N)
  kill -INT "$UP_PID"; wait "$UP_PID"
  echo $(( (end - start) / 1000000 ))
}

shared=$(mktemp -d)
trap 'rm -rf "$shared"' EXIT
[ "$which" = later ] && once "$shared" >/dev/null
for _ in $(seq "$runs"); do
  if [ "$which" = later ]; then
    once "$shared"
  else
    d=$(mktemp -d)
    once "$d"
    rm -rf "$d"
  fi
done | sort -n | awk -v which="$which" '{a[NR]=$1} END {print which, "runs", NR, "min", a[1], "p50", a[int(NR/2)+1], "max", a[NR], "ms"}'
