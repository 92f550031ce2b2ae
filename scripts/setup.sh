#!/usr/bin/env bash
# Idempotent set-up of the host and the project: Debian packages, npm dependencies, the
# native helpers and the default images. `npm start` and `npm test` call it; it is quick
# when everything is already there. Usage: scripts/setup.sh [--image-dir DIR] [--no-images]
set -euo pipefail
cd "$(dirname "$0")/.."

fail() { echo "sandboxd set-up: $*" >&2; exit 1; }

[ "$(uname -s)" = Linux ] || fail "sandboxd runs sandboxes with Linux namespaces; this is $(uname -s)."
[ "$(id -u)" = 0 ] || fail "run as root: the local runtime creates namespaces, cgroups, mounts and network devices (try: sudo npm start)."
command -v node >/dev/null || fail "node is missing: install Node.js 20 or newer."
node -e 'process.exit(Number(process.versions.node.split(".")[0]) >= 20 ? 0 : 1)' || fail "Node.js 20 or newer is needed; this is $(node --version)."

PKGS="crun runc catatonit skopeo umoci mmdebstrap busybox-static docker-registry e2fsprogs iproute2 nftables golang-github-containers-common util-linux ca-certificates chromium libseccomp-dev"
missing=""
for p in $PKGS; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
  command -v apt-get >/dev/null || fail "these Debian packages are missing and there is no apt-get to install them:$missing"
  echo "sandboxd set-up: installing Debian packages:$missing"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing >/dev/null
fi

grep -qw overlay /proc/filesystems || modprobe overlay 2>/dev/null || fail "the kernel has no overlayfs (modprobe overlay failed); sandboxes need it for their copy-on-write root."
grep -qw ext4 /proc/filesystems || modprobe ext4 2>/dev/null || fail "the kernel has no ext4; volumes and root disks need it."
[ -e /dev/loop-control ] || modprobe loop 2>/dev/null || fail "no loop device support (/dev/loop-control); volumes need it."

# The first `ip netns add` on a host turns /run/netns into a mount point; do it here, once,
# so that it is part of the host as set up rather than something a test run seems to leak.
mountpoint -q /run/netns 2>/dev/null || { ip netns add sbxd-setup-probe && ip netns delete sbxd-setup-probe; }

# Native addons compile from source against the system's Node headers.
export npm_config_nodedir=/usr
if [ ! -f node_modules/.package-lock.json ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
  echo "sandboxd set-up: installing npm dependencies"
  npm ci --no-audit --no-fund --loglevel=error
fi

exec node --import tsx scripts/prepare-host.ts "$@"
