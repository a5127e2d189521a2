#!/usr/bin/env bash
# Install what kvfs needs on Debian (bookworm or newer) and build it into
# ./build. Safe to run again: installs only what is missing, rebuilds only
# what changed.
set -euo pipefail
cd "$(dirname "$0")/.."

PKGS="meson ninja-build pkg-config gcc libfuse3-dev fuse3 liburing-dev
      libsqlite3-dev sqlite3 libxxhash-dev xxhash libcmocka-dev attr python3 python3-numpy python3-venv
      clang libclang-rt-dev xfsprogs e2fsprogs mount util-linux man-db
      rsync tar coreutils findutils"

missing=$(for p in $PKGS; do dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null |
	grep -q "install ok installed" || echo "$p"; done)
if [ -n "$missing" ]; then
	if [ "$(id -u)" != 0 ]; then
		echo "kvfs setup: missing packages: $missing; run as root" >&2
		exit 1
	fi
	echo "kvfs setup: installing $(echo $missing)"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	apt-get install -y -qq $missing >/dev/null
fi
[ -f build/build.ninja ] || meson setup build >/dev/null
ninja -C build >/dev/null
echo "kvfs setup: built ./build/tools/kvfs"
