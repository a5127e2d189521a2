#!/usr/bin/env bash
# A write burst into a full store with -o index_pages: how long it takes,
# and whether eviction took the oldest pages or the ones just written.
# SRC_STORE is a store made by the meta case (kvfs bench --cases meta
# --meta-pages N --keep): its pages are older than the burst, most of
# them in layers the budget leaves in the manifest. It is copied to
# DIR/store for each run, so each binary starts from the same state; the
# mount's capacity is set to what the copy uses, so every new page must
# evict one. usage: tools/bench_evict.sh KVFS_BINARY SRC_STORE DIR
#   [NEW_PAGES (20000)] [INDEX_PAGES (50000)]
set -euo pipefail
KVFS=$1 SRC=$2 DIR=$3 NEW=${4:-20000} BUDGET=${5:-50000}
STORE=$DIR/store MNT=$DIR/mnt LOG=$DIR/daemon.log
HERE=$(cd "$(dirname "$0")" && pwd)
rm -rf "$STORE"
mkdir -p "$MNT"
cp -a "$SRC" "$STORE"
stats() { python3 -c 'import json,sys; d=json.load(open(sys.argv[1]+"/.kvfs/stats")); print(d[sys.argv[2]][sys.argv[3]])' "$MNT" "$1" "$2"; }
mount_it() {
	"$KVFS" mount "$STORE" "$MNT" -f -o "$1" > "$LOG" 2>&1 &
	DPID=$!
	for _ in $(seq 300); do mountpoint -q "$MNT" && break; sleep 0.1; done
	mountpoint -q "$MNT" || { echo "bench_evict: no mount: $(tail -3 "$LOG")" >&2; exit 1; }
	for _ in $(seq 600); do grep -q "loaded in the background" "$LOG" && return 0; sleep 0.1; done
}
unmount_it() { "$KVFS" umount "$MNT"; wait "$DPID" 2>/dev/null || true; }
trap 'fusermount3 -u "$MNT" 2>/dev/null || true; rm -rf "$STORE"' EXIT
mount_it ram_cache=0
used=$(stats ssd physical_bytes)
old=$(stats ssd pages)
model=$(ls "$MNT" | head -1)
unmount_it
mount_it "ram_cache=0,index_pages=$BUDGET,capacity=$used"
mkdir -p "$MNT/burst/00"
t0=$(date +%s.%N)
python3 "$HERE/../tests/mount/pagetool.py" write "$MNT/burst/00" b- "$NEW" 4096 --fsync > /dev/null
t1=$(date +%s.%N)
left=$(ls -f "$MNT/burst/00" | grep -c '^b-' || true)
echo "$(basename "$KVFS") @ $("$KVFS" version 2>/dev/null | head -1): $old old pages of model $model," \
	"capacity $used bytes, index_pages $BUDGET; $NEW new 4 KiB pages written in" \
	"$(python3 -c "print(f'{$t1 - $t0:.2f}')") s; evictions $(stats ssd evictions);" \
	"new pages left $left of $NEW; old pages left $(( $(stats ssd pages) - left ))"
unmount_it
