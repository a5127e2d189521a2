#!/usr/bin/env bash
# Install dependencies, build, and run the whole test suite: the cmocka
# unit tests and the mount tests (which mount for real: root and /dev/fuse).
set -euo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh
meson test -C build --print-errorlogs "$@"
