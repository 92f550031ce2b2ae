#!/usr/bin/env bash
# npm run check: type-check everything, and fail when spec/openapi.json drifts from the schemas.
set -euo pipefail
cd "$(dirname "$0")/.."
npx tsc -p .
if [ -f scripts/gen-openapi.ts ]; then node --import tsx scripts/gen-openapi.ts --check; fi
