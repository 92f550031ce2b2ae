#!/usr/bin/env bash
# npm run test:gvisor-security: the escape and abuse suites (test/security/escape.test.ts,
# escape-files.test.ts, abuse.test.ts) against gVisor sandboxes: every server they start
# makes sandboxes of the `gvisor` tier (SANDBOXD_TEST_ISOLATION=gvisor, read by
# test/e2e/harness.ts). Not part of `npm test`. Needs what `npm test` needs (root, crun, the
# test images: `npm run setup -- --test`) and gVisor's runsc. Extra arguments go to node's
# test runner first (e.g. --test-name-pattern=CVE).
set -uo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/node-env.sh
source scripts/node-env.sh
command -v runsc >/dev/null || { echo "test:gvisor-security: gVisor's runsc is not installed"; exit 1; }
export SANDBOXD_TEST_IMAGE_DIR="${SANDBOXD_TEST_IMAGE_DIR:-$PWD/.sandboxd-test/images}"
export SANDBOXD_E2E_RUNTIME=local SANDBOXD_TEST_ISOLATION=gvisor
exec bash scripts/run-tests.sh "$@" test/security/escape.test.ts test/security/escape-files.test.ts test/security/abuse.test.ts
