#!/usr/bin/env bash
# Install dependencies, build, and run the whole test suite: the cmocka
# unit tests and the mount tests (which mount for real: root and /dev/fuse),
# then the suite again under ASan+UBSan and the concurrency tests under
# TSan (tools/sanitize.sh). Arguments (test names, meson test options) run
# just those, in the plain build only.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh
meson test -C build --print-errorlogs "$@"
[ $# -gt 0 ] || tools/sanitize.sh
