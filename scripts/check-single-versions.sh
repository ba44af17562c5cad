#!/usr/bin/env bash
# Fails when the dependency tree holds two versions of a crate that must be unique.
set -euo pipefail
cd "$(dirname "$0")/.."
must_be_unique='tonic|tonic-prost|prost|prost-types|hyper|h2|sqlx|reqwest|tokio|opentelemetry|opentelemetry_sdk'
dupes=$(cargo tree --workspace --locked --duplicates --edges normal,build --prefix none \
  | awk -v re="^($must_be_unique)\$" '$1 ~ re { print $1, $2 }' \
  | sort -u \
  | awk '{ n[$1]++; v[$1] = v[$1] " " $2 } END { for (c in n) if (n[c] > 1) print c ":" v[c] }')
if [ -n "$dupes" ]; then
  echo "two versions of a crate that must be unique:" >&2
  echo "$dupes" >&2
  exit 1
fi
echo "one version each of: ${must_be_unique//|/, }"
