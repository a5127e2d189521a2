#!/usr/bin/env bash
# Engine restore benchmark (tools/bench_engines.py,
# docs/benchmarks/engines.md):
# each engine's kvfs backend against its own file backend, cold, on each
# directory given (default: /var/tmp, an ext4 disk here, and /dev/shm).
#
#   tools/bench_engines.sh [DIR ...] [-- bench_engines.py options]
#   tools/bench_engines.sh /var/tmp -- --gib 1 --runs 3 --backends sglang-file,sglang-kvfs
#
#   tools/bench_engines.sh /var/tmp -- --engines vllm,lmcache
#
# Makes (or checks) the engines venvs (tools/engines_venv.sh), uses the kvfs
# build in $BUILD (default build/), and runs as root (it mounts kvfs and
# drops the kernel's caches). Per DIR, one run per venv: SGLang's
# ($KVFS_ENGINES_VENV) for the sglang rows, vLLM's ($KVFS_VLLM_VENV: vLLM
# and LMCache) for the vllm and lmcache rows, each told its engines by
# $KVFS_BENCH_ENGINES; --engines or --backends narrow them. The Python
# script mounts a fresh store under each DIR itself, remounting it before
# every cold restore.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
VENV=${KVFS_ENGINES_VENV:-/var/cache/kvfs/engines-venv}
VLLM_VENV=${KVFS_VLLM_VENV:-/var/cache/kvfs/vllm-venv}
dirs=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do dirs+=("$1"); shift; done
[ $# -gt 0 ] && shift
[ ${#dirs[@]} -gt 0 ] || dirs=(/var/tmp /dev/shm)
[ "$(id -u)" = 0 ] || { echo "bench_engines: run as root (mount, drop_caches)" >&2; exit 1; }
for f in "$BUILD/tools/kvfs" "$BUILD/client/libkvfs.so"; do
	[ -e "$f" ] || { echo "bench_engines: no $f (meson setup $BUILD && ninja -C $BUILD)" >&2; exit 1; }
done
tools/engines_venv.sh
export KVFS=$PWD/$BUILD/tools/kvfs KVFS_LIB=$PWD/$BUILD/client/libkvfs.so
export PYTHONWARNINGS=ignore   # SGLang's and vLLM's imports warn about CUDA-only kernels
echo "bench_engines: $(date -u +%FT%TZ) $(uname -r), $(nproc) CPUs, $(git rev-parse --short HEAD)"
for d in "${dirs[@]}"; do
	KVFS_BENCH_ENGINES=sglang "$VENV/bin/python3" tools/bench_engines.py --dir "$d" "$@"
	KVFS_BENCH_ENGINES=vllm,lmcache "$VLLM_VENV/bin/python3" tools/bench_engines.py --dir "$d" "$@"
done
