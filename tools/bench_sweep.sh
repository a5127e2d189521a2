#!/usr/bin/env bash
# The index's RAM under a page budget while every layer is used
# (docs/benchmarks/scale.md, "Layers go back to the manifest after the
# load"): on a store kept by the meta case (kvfs bench --cases meta --keep
# --dir DIR), with one daemon binary and -o index_pages=BUDGET, caches
# dropped: once the load is over, `ls -f` of every layer of the meta
# case's model (each loads it), twice, 12 s apart; after each step the
# pages in RAM (.kvfs/stats: ssd.pages - namespace.pages_unloaded), the
# layers out of RAM, and the daemon's VmRSS and VmHWM.
# usage: tools/bench_sweep.sh KVFS_BINARY STORE_DIR MNT BUDGET [LABEL]
set -euo pipefail
KVFS=$1 STORE=$2 MNT=$3 BUDGET=$4 LABEL=${5:-}
MODEL=benchm                        # the meta case's model
LOG=$(mktemp)
trap 'fusermount3 -u "$MNT" 2>/dev/null || true; rm -f "$LOG"' EXIT
mkdir -p "$MNT"
sync
echo 3 > /proc/sys/vm/drop_caches
"$KVFS" mount "$STORE" "$MNT" -f -o "index_pages=$BUDGET" 2> "$LOG" &
DPID=$!
for _ in $(seq 200); do mountpoint -q "$MNT" && break; sleep 0.1; done
state() {
	python3 -c 'import json, sys
d = json.load(open(sys.argv[1] + "/.kvfs/stats"))
n, s = d["namespace"], d["ssd"]
print("pages in RAM %d, layers out %d" % (s["pages"] - n["pages_unloaded"], n["layers_unloaded"]),
      end="" if n["loading"] == 0 else " (loading)")' "$MNT"
	grep -E 'VmRSS|VmHWM' "/proc/$DPID/status" | awk '{printf ", %s %.0f MB", $1, $2 / 1024}'
	echo
}
for _ in $(seq 1200); do state | grep -q loading || break; sleep 0.5; done
sleep 2
echo "$LABEL loaded: $(state)"
for round in 1 2; do
	t0=$(date +%s.%N)
	for l in $(ls "$MNT/$MODEL"); do ls -f "$MNT/$MODEL/$l" > /dev/null; done
	t1=$(date +%s.%N)
	echo "$LABEL sweep $round, $(ls "$MNT/$MODEL" | wc -l) layers in $(echo "$t1 - $t0" | bc) s: $(state)"
	sleep 12
	echo "$LABEL 12 s later: $(state)"
done
"$KVFS" umount "$MNT"
wait "$DPID" || true
echo "$LABEL log: $(grep -c 'went back to the manifest' "$LOG") lines of layers gone back"
