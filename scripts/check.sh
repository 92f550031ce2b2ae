#!/usr/bin/env bash
# npm run check: type-check everything, lint and format-check (Biome), and fail when
# spec/openapi.json drifts from the schemas or docs/api-reference.md from spec/openapi.json.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/node-env.sh
source scripts/node-env.sh
npx tsc -p .
npx biome check --error-on-warnings .
node --import tsx scripts/gen-openapi.ts --check
node --import tsx scripts/gen-api-docs.ts --check
