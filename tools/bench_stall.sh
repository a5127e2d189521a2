#!/usr/bin/env bash
# Lookups and listings while the index loads (docs/benchmarks/scale.md,
# "The loader reads without the index's lock"): on a store kept by the
# meta case (kvfs bench --cases meta --keep --dir DIR), with one daemon
# binary, (1) the mount's background walk, caches dropped, probed by
# listings of the model; (2) with -o index_pages=1, the loads of three
# layers by `ls -f`, each probed by lookups in a layer loaded already.
# usage: tools/bench_stall.sh KVFS_BINARY STORE_DIR MNT [LABEL]
set -euo pipefail
KVFS=$1 STORE=$2 MNT=$3 LABEL=${4:-}
HERE=$(cd "$(dirname "$0")" && pwd)
LOG=$(mktemp)
trap 'fusermount3 -u "$MNT" 2>/dev/null || true; rm -f "$LOG"' EXIT
mkdir -p "$MNT"
mount_wait() {   # mount_wait OPTS LOG_LINE: mount, wait for LOG_LINE (or for the root)
	: > "$LOG"
	"$KVFS" mount "$STORE" "$MNT" -f -o "$1" > "$LOG" 2>&1 &
	for _ in $(seq 600); do
		if [ -n "$2" ]; then grep -q "$2" "$LOG" && return 0
		else mountpoint -q "$MNT" && return 0; fi
		sleep 0.05
	done
	echo "bench_stall: the mount did not come up: $(tail -3 "$LOG")" >&2
	exit 1
}
sync; echo 3 > /proc/sys/vm/drop_caches
mount_wait ram_cache=0 ""
model=$(ls "$MNT" | grep -v '^\.' | sort | tail -1)
python3 "$HERE/bench_stall.py" "$MNT" "$MNT/$model" 60 --list --until-loaded \
	--label "$LABEL walk: "
grep -o 'loaded in the background: .* in [0-9.]* s' "$LOG" || true
fusermount3 -u "$MNT"; sleep 0.5
mount_wait ram_cache=0,index_pages=1 "left RAM"
layers=($(ls "$MNT/$model" | sort))
ls -f "$MNT/$model/${layers[0]}" > /dev/null
for l in 3 5 7; do
	python3 "$HERE/bench_stall.py" "$MNT" "$MNT/$model/${layers[0]}" 2.5 \
		--label "$LABEL layer ${layers[$l]} loading: " &
	probe=$!
	sleep 0.5
	t0=$(date +%s.%N)
	n=$(ls -f "$MNT/$model/${layers[$l]}" | wc -l)
	t1=$(date +%s.%N)
	wait $probe
	echo "$LABEL layer ${layers[$l]}: $((n - 2)) pages loaded by ls -f in $(echo "$t1 - $t0" | bc) s"
done
