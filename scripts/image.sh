#!/usr/bin/env bash
# npm run image: the release image as an OCI archive, artifacts/sandboxd-<version>.oci.tar
# (docs/kubernetes.md#the-image). Needs root (mmdebstrap's bootstrap of the base layer) and
# what scripts/setup.sh installs (the native helpers and npm dependencies it packs).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --no-images
# shellcheck source=scripts/node-env.sh
source scripts/node-env.sh
exec node --import tsx scripts/image.ts "$@"
