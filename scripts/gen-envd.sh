#!/usr/bin/env bash
# Regenerates packages/server/src/e2b/envd/gen/*_pb.ts from the .proto files beside it
# (buf and protoc-gen-es from the devDependencies; offline). `--check` fails when the
# committed files differ from what the .proto files give.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=packages/server/src/e2b/envd
out="$dir/gen"
if [ "${1:-}" = --check ]; then
  tmp="$(mktemp -d)"; trap 'rm -rf "$tmp"' EXIT
  cp -r "$dir/proto" "$tmp/proto"
  sed -i "s#out: ../gen#out: $tmp/gen#" "$tmp/proto/buf.gen.yaml"
  (cd "$tmp/proto" && PATH="$OLDPWD/node_modules/.bin:$PATH" buf generate)
  diff -r "$tmp/gen" "$out" >/dev/null || { echo "gen-envd: $out is stale; run scripts/gen-envd.sh"; exit 1; }
  exit 0
fi
rm -rf "$out"
(cd "$dir/proto" && PATH="$OLDPWD/node_modules/.bin:$PATH" buf generate)
