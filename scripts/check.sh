#!/usr/bin/env bash
# npm run check: type-check everything, lint and format-check (Biome), fail when
# spec/openapi.json drifts from the schemas or docs/api-reference.md from spec/openapi.json,
# and lint the OpenAPI document with Redocly (redocly.yaml).
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/node-env.sh
source scripts/node-env.sh
npx tsc -p .
bash scripts/gen-envd.sh --check
npx biome check --error-on-warnings .
node --import tsx scripts/gen-openapi.ts --check
node --import tsx scripts/gen-api-docs.ts --check
node --import tsx scripts/gen-k8s-schemas.ts --check
# Offline: no usage data, no update check (see redocly.yaml).
REDOCLY_TELEMETRY=off REDOCLY_SUPPRESS_NOTIFICATIONS=true npx redocly lint --format=summary spec/openapi.json
