#!/usr/bin/env bash
# Make (or check) the engines virtual environment the engine backend tests
# run in: SGLang and what it needs on CPU, pinned in
# tools/engines/*-requirements.txt, installed with --no-deps.
#
#   tools/engines_venv.sh          install if missing or out of date
#
# Where: $KVFS_ENGINES_VENV (default /var/cache/kvfs/engines-venv, outside
# the source tree so fresh checkouts and CI runs on the same machine reuse
# it); pip's download cache in $KVFS_PIP_CACHE (default /var/cache/kvfs/pip).
# A venv whose .kvfs-ready stamp matches the requirements is left alone
# (seconds). On failure the reason goes to $KVFS_ENGINES_VENV.failed, which
# the tests print when they skip (exit 77), and this script exits 1.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${KVFS_ENGINES_VENV:-/var/cache/kvfs/engines-venv}
CACHE=${KVFS_PIP_CACHE:-/var/cache/kvfs/pip}
PY=${KVFS_ENGINES_PYTHON:-/usr/bin/python3}
REQS=$(ls tools/engines/*-requirements.txt)
want=$(cat $REQS "$0" | sha256sum | cut -c1-16)

if [ "$(cat "$VENV/.kvfs-ready" 2>/dev/null)" = "$want" ]; then
	echo "kvfs engines: $VENV is up to date"
	exit 0
fi
fail() {
	echo "kvfs engines: $*" >&2
	mkdir -p "$(dirname "$VENV")"
	echo "$*" >"$VENV.failed"
	exit 1
}
start=$(date +%s)
rm -f "$VENV.failed" "$VENV/.kvfs-ready"
mkdir -p "$(dirname "$VENV")" "$CACHE"
[ -x "$VENV/bin/python3" ] ||
	"$PY" -m venv "$VENV" >/dev/null 2>"$VENV.log" ||
	fail "$PY -m venv $VENV failed (apt-get install python3-venv): $(tail -3 "$VENV.log")"
echo "kvfs engines: installing $(grep -h '^sglang' $REQS) and $(cat $REQS | grep -c '==') pinned packages into $VENV"
# --no-deps: the files pin the whole set, so pip resolves nothing and never
# pulls a newer release in; --only-binary: no source builds on a CI machine.
"$VENV/bin/pip" install --quiet --disable-pip-version-check --no-deps --only-binary :all: \
	--cache-dir "$CACHE" $(printf -- '-r %s ' $REQS) >"$VENV.log" 2>&1 ||
	fail "pip install failed: $(grep -v '^ ' "$VENV.log" | tail -5)"
"$VENV/bin/python3" -c "
import torch
from sglang.srt.mem_cache.storage.backend_factory import StorageBackendFactory
from sglang.srt.mem_cache.pool_host.mha import MHATokenToKVPoolHost
" >"$VENV.log" 2>&1 || fail "the installed SGLang does not import: $(tail -3 "$VENV.log")"
echo "$want" >"$VENV/.kvfs-ready"
echo "kvfs engines: $VENV ready in $(( $(date +%s) - start )) s"
