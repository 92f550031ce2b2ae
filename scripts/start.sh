#!/usr/bin/env bash
# npm start: set up what serving needs, then serve the API and console (port 8080 by default).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# shellcheck source=scripts/node-env.sh
source scripts/node-env.sh
exec node --import tsx packages/server/src/main.ts
