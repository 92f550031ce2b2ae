#!/usr/bin/env bash
# npm run bench: every benchmark in bench/, each printing a table and a JSON line.
set -euo pipefail
cd "$(dirname "$0")/.."
export SANDBOXD_TEST_IMAGE_DIR="${SANDBOXD_TEST_IMAGE_DIR:-$PWD/.sandboxd-test/images}"
export SANDBOXD_E2E_RUNTIME=local
bash scripts/setup.sh --test --image-dir "$SANDBOXD_TEST_IMAGE_DIR"
# shellcheck source=scripts/node-env.sh
source scripts/node-env.sh
# Default: every benchmark; or name some: npm run bench -- bench/api.ts
if [ $# -eq 0 ]; then set -- bench/runtime.ts bench/api.ts bench/pty.ts bench/terminal.ts bench/proxy.ts bench/rate-limit.ts bench/files.ts bench/e2b.ts bench/density.ts bench/tti.ts bench/lifecycle.ts bench/snapshot.ts bench/gvisor.ts bench/runner.ts bench/scale.ts bench/egress.ts bench/secrets.ts bench/code-interpreter.ts bench/templates.ts bench/python-sdk.ts; fi
loops=$(mktemp)
bash scripts/loop-devices.sh list > "$loops"
# The loop devices the benchmarks made go again afterwards, even when one fails.
trap 'bash scripts/loop-devices.sh remove-new "$loops" > /dev/null; rm -f "$loops"' EXIT
for b in "$@"; do
  [ -f "$b" ] && node --import tsx "$b"
done
