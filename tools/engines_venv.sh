#!/usr/bin/env bash
# Make (or check) the engines virtual environments the engine backend tests
# run in, one per file tools/engines/NAME-requirements.txt, each with its
# engines and what they need on CPU pinned and installed with --no-deps:
#
#   sglang  SGLang (tests/python/test_sglang.py)
#   vllm    vLLM and LMCache (test_vllm.py, test_lmcache.py): apart from
#           SGLang's because they pin another torch and numpy
#
#   tools/engines_venv.sh [NAME...]   install if missing or out of date
#                                     (no NAME: all of them)
#
# Where: sglang's in $KVFS_ENGINES_VENV (default
# /var/cache/kvfs/engines-venv), NAME's in $KVFS_<NAME>_VENV (default
# /var/cache/kvfs/NAME-venv): outside the source tree, so fresh checkouts
# and CI runs on the same machine reuse them; pip's download cache in
# $KVFS_PIP_CACHE (default /var/cache/kvfs/pip). A venv whose .kvfs-ready
# stamp matches its requirements is left alone (seconds). On failure the
# reason goes to VENV.failed, which the tests print when they skip (exit
# 77), and this script exits 1 (after trying the others).
set -euo pipefail
cd "$(dirname "$0")/.."
CACHE=${KVFS_PIP_CACHE:-/var/cache/kvfs/pip}
PY=${KVFS_ENGINES_PYTHON:-/usr/bin/python3}

venv_of() {
	local var
	if [ "$1" = sglang ]; then
		echo "${KVFS_ENGINES_VENV:-/var/cache/kvfs/engines-venv}"
		return
	fi
	var="KVFS_$(echo "$1" | tr '[:lower:]-' '[:upper:]_')_VENV"
	echo "${!var:-/var/cache/kvfs/$1-venv}"
}

# What must import for the backends and their tests to work.
check_of() {
	case "$1" in
	sglang) echo "
import torch
from sglang.srt.mem_cache.storage.backend_factory import StorageBackendFactory
from sglang.srt.mem_cache.pool_host.mha import MHATokenToKVPoolHost" ;;
	vllm) echo "
import torch
from vllm.v1.kv_offload.tiering.spec import TieringOffloadingSpec
from vllm.v1.kv_offload.tiering.factory import SecondaryTierFactory
from lmcache.v1.distributed.l2_adapters.factory import create_l2_adapter_from_registry
from lmcache.v1.distributed.l2_adapters.native_plugin_l2_adapter import NativePluginL2AdapterConfig" ;;
	*) echo "import torch" ;;
	esac
}

install() {
	local name=$1 reqs=tools/engines/$1-requirements.txt venv want start engine
	venv=$(venv_of "$name")
	want=$(cat "$reqs" "$0" | sha256sum | cut -c1-16)
	if [ "$(cat "$venv/.kvfs-ready" 2>/dev/null)" = "$want" ]; then
		echo "kvfs engines: $venv is up to date"
		return 0
	fi
	fail() {
		echo "kvfs engines: $*" >&2
		mkdir -p "$(dirname "$venv")"
		echo "$*" >"$venv.failed"
		return 1
	}
	start=$(date +%s)
	rm -f "$venv.failed" "$venv/.kvfs-ready"
	mkdir -p "$(dirname "$venv")" "$CACHE"
	[ -x "$venv/bin/python3" ] ||
		"$PY" -m venv "$venv" >/dev/null 2>"$venv.log" ||
		{ fail "$PY -m venv $venv failed (apt-get install python3-venv): $(tail -3 "$venv.log")"; return 1; }
	engine=$(grep -v '^#' "$reqs" | head -1)
	echo "kvfs engines: installing $engine and $(grep -c '==' "$reqs") pinned packages into $venv"
	# --no-deps: the file pins the whole set, so pip resolves nothing and
	# never pulls a newer release in; --only-binary: no source builds on a
	# CI machine.
	"$venv/bin/pip" install --quiet --disable-pip-version-check --no-deps --only-binary :all: \
		--cache-dir "$CACHE" -r "$reqs" >"$venv.log" 2>&1 ||
		{ fail "pip install failed: $(grep -v '^ ' "$venv.log" | tail -5)"; return 1; }
	"$venv/bin/python3" -c "$(check_of "$name")" >"$venv.log" 2>&1 ||
		{ fail "the installed $engine does not import: $(grep -v '^W[0-9]' "$venv.log" | tail -3)"; return 1; }
	echo "$want" >"$venv/.kvfs-ready"
	echo "kvfs engines: $venv ready in $(($(date +%s) - start)) s"
}

names=("$@")
if [ ${#names[@]} -eq 0 ]; then
	for f in tools/engines/*-requirements.txt; do
		f=${f##*/}
		names+=("${f%-requirements.txt}")
	done
fi
rc=0
for n in "${names[@]}"; do
	if [ ! -f "tools/engines/$n-requirements.txt" ]; then
		echo "kvfs engines: no tools/engines/$n-requirements.txt" >&2
		rc=1
		continue
	fi
	install "$n" || rc=1
done
exit $rc
