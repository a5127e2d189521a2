#!/usr/bin/env bash
# Install dependencies, build, and run the whole test suite: the cmocka
# unit tests and the mount tests (which mount for real: root and /dev/fuse),
# then the suite again under ASan+UBSan and the concurrency tests under
# TSan (tools/sanitize.sh). Arguments (test names, meson test options) run
# just those, in the plain build only.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh
# The engines (pinned) in cached venvs for the engine backend tests: SGLang
# in one, vLLM and LMCache in another (tools/engines/*-requirements.txt);
# without one (no network, say) its tests skip and say why.
tools/engines_venv.sh || echo "kvfs test: an engines venv is missing: its engine tests will skip" >&2
meson test -C build --print-errorlogs "$@"
[ $# -gt 0 ] || tools/sanitize.sh
