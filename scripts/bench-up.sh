#!/usr/bin/env bash
# Time from exec of `metnos up` to its fifth address line (all five SERVING), fresh data dir each run.
# Usage: scripts/bench-up.sh [path/to/metnos] [runs]   (build first: cargo build --release --bin metnos)
bin=${1:-target/release/metnos}
runs=${2:-20}
for i in $(seq "$runs"); do
  d=$(mktemp -d)
  start=$(date +%s%N)
  coproc UP { METNOS_DATA_DIR=$d METNOS_TELEMETRY__LOG=warn exec "$bin" up 2>/dev/null; }
  for j in 1 2 3 4 5; do read -r _ <&"${UP[0]}"; done
  end=$(date +%s%N)
  kill -INT "$UP_PID"; wait "$UP_PID"
  echo $(( (end - start) / 1000000 ))
  rm -rf "$d"
done | sort -n | awk '{a[NR]=$1} END {print "runs", NR, "min", a[1], "p50", a[int(NR/2)+1], "max", a[NR], "ms"}'
