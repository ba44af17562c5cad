#!/usr/bin/env bash
# The vaglio's guard and full rule-based verdict, Rust (criterion) beside the faithful
# Python port of the seed's guard and judge (services/vaglio/benches/reference/), on the
# same typical cases (benches/reference/cases.json), and the ratio.
set -euo pipefail
cd "$(dirname "$0")/.."
py=$(python3 services/vaglio/benches/reference/vaglio_reference.py 50000)
echo "$py"
rust=$(cargo bench -p metnos-vaglio --bench verdict -- --warm-up-time 1 --measurement-time 3 2>/dev/null \
  | awk '/^(guard|verdict)\// { name = $1 } /time:/ { for (i = 1; i <= NF; i++) if ($i ~ /^\[/) { v = $(i + 2); u = $(i + 3); break } ; print name, v, u }')
echo "$rust" | sed 's/^/rust /'
to_ns() { awk -v v="$1" -v u="$2" 'BEGIN { f = (u == "ns") ? 1 : (u == "ms") ? 1000000 : 1000; print v * f }'; }
for what in guard verdict; do
  p=$(echo "$py" | awk -v w="$what" '$2 == w { print $3 }')
  # The first Rust line of each kind is the typical case (the tainted variant follows).
  line=$(echo "$rust" | grep "^$what/" | head -1)
  r=$(to_ns "$(echo "$line" | awk '{print $2}')" "$(echo "$line" | awk '{print $3}')")
  awk -v w="$what" -v p="$p" -v r="$r" 'BEGIN { printf "%s: python %s ns, rust %.1f ns, %.1fx faster\n", w, p, r, p / r }'
done
