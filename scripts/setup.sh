#!/usr/bin/env bash
# Idempotent set-up of the host and the project: a supported Node.js, Debian packages, npm
# dependencies, the native helpers and the default images. `npm start` and `npm test` call
# it; it is quick when everything is already there.
# Usage: scripts/setup.sh [--test] [--image-dir DIR] [--no-images]
#   --test   also what the tests need: Chromium, a local OCI registry, PostgreSQL and the Python SDK's
#            Python packages (Debian), and the npm devDependencies (linters, playwright-core, ...).
#            Without it, only what serving needs.
set -euo pipefail
cd "$(dirname "$0")/.."

for_tests=0
if [ "${1:-}" = --test ]; then for_tests=1; shift; fi

fail() { echo "sandboxd set-up: $*" >&2; exit 1; }

[ "$(uname -s)" = Linux ] || fail "sandboxd runs sandboxes with Linux namespaces; this is $(uname -s)."
[ "$(id -u)" = 0 ] || fail "run as root: the local runtime creates namespaces, cgroups, mounts and network devices (try: sudo npm start)."

# musl-tools: the native helpers that start per sandbox link statically against musl (native.ts).
PKGS="crun runc catatonit skopeo umoci mmdebstrap busybox-static e2fsprogs iproute2 nftables golang-github-containers-common util-linux ca-certificates libseccomp-dev musl-tools"
# Tests only: a real browser for the console suite, a real registry for the pull tests, and
# PostgreSQL for the store suite on PostgreSQL (the tests start their own server in a temp dir),
# openssl for the self-signed certificates of the egress suite's fake internet, and Debian's
# Python stack for the Python SDK's suite (its dependencies at the versions Debian ships, pytest,
# mypy, and venv + pip to install the wheel the server hands out).
[ "$for_tests" = 1 ] && PKGS="$PKGS chromium docker-registry postgresql openssl"
# systemd-analyze, for the verify of deploy/systemd/sandboxd.service (the installer's tests).
[ "$for_tests" = 1 ] && PKGS="$PKGS systemd"
[ "$for_tests" = 1 ] && PKGS="$PKGS python3-httpx python3-websockets python3-pytest python3-pytest-asyncio mypy python3-venv python3-pip"
missing=""
for p in $PKGS; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
  command -v apt-get >/dev/null || fail "these Debian packages are missing and there is no apt-get to install them:$missing"
  echo "sandboxd set-up: installing Debian packages:$missing"
  # PostgreSQL for the tests only: no system cluster (the tests make their own in a temp dir).
  case " $missing " in *" postgresql "*)
    mkdir -p /etc/postgresql-common/createcluster.d
    echo 'create_main_cluster = false' > /etc/postgresql-common/createcluster.d/sandboxd-no-main-cluster.conf ;;
  esac
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing >/dev/null
fi

# gVisor's runsc for the gvisor tier: a build recent enough (scripts/install-runsc.sh).
bash scripts/install-runsc.sh

grep -qw overlay /proc/filesystems || modprobe overlay 2>/dev/null || fail "the kernel has no overlayfs (modprobe overlay failed); sandboxes need it for their copy-on-write root."
grep -qw ext4 /proc/filesystems || modprobe ext4 2>/dev/null || fail "the kernel has no ext4; volumes and root disks need it."
[ -e /dev/loop-control ] || modprobe loop 2>/dev/null || fail "no loop device support (/dev/loop-control); volumes need it."

# The first `ip netns add` on a host turns /run/netns into a mount point; do it here, once,
# so that it is part of the host as set up rather than something a test run seems to leak.
mountpoint -q /run/netns 2>/dev/null || { ip netns add sbxd-setup-probe && ip netns delete sbxd-setup-probe; }

# Node.js 24+ first on PATH (fetched from the npm registry when the machine's is older);
# native addons compile from source against its headers.
# shellcheck source=scripts/node-env.sh
source scripts/node-env.sh

# npm dependencies: serving needs the production ones only; tests the devDependencies too.
bash scripts/npm-deps.sh "$([ "$for_tests" = 1 ] && echo full || echo prod)"

exec node --import tsx scripts/prepare-host.ts "$@"
