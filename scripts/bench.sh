#!/usr/bin/env bash
# npm run bench: every benchmark in bench/, each printing a table and a JSON line.
set -euo pipefail
cd "$(dirname "$0")/.."
export SANDBOXD_TEST_IMAGE_DIR="${SANDBOXD_TEST_IMAGE_DIR:-$PWD/.sandboxd-test/images}"
bash scripts/setup.sh --image-dir "$SANDBOXD_TEST_IMAGE_DIR"
for b in bench/runtime.ts "$@"; do
  [ -f "$b" ] && node --import tsx "$b"
done
