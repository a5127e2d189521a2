#!/usr/bin/env bash
# The daemon's memory after a flood of small pages: makes N distinct page
# files of SIZE bytes, imports them (kvfs import, fast-path batch writes)
# into a fresh store mounted with -o ram_cache=RAM, then reads the
# daemon's VmRSS and VmHWM and the RAM tier's and write-back's bytes from
# MOUNT/.kvfs. The bound to hold (docs/operators.md, "Memory"):
#   RSS <= ram_cache + dirty_budget + index bytes + constant.
#
#   tools/bench_rss.sh [--pages N] [--size BYTES] [--ram-cache SIZE]
#                      [--dir DIR] [--kvfs BIN] [--keep]
# SIZE: a multiple of 64. Defaults: 200000 pages of 4096 bytes, ram_cache 512M, a workspace under
# /var/tmp, build/tools/kvfs. Run as root (FUSE mount). One line of
# results on stdout, as key=value pairs.
set -euo pipefail
cd "$(dirname "$0")/.."

PAGES=200000 SIZE=4096 RAM=512M DIR= KEEP=0 KVFS=$PWD/build/tools/kvfs
while [ $# -gt 0 ]; do
	case $1 in
	--pages) PAGES=$2; shift 2 ;;
	--size) SIZE=$2; shift 2 ;;
	--ram-cache) RAM=$2; shift 2 ;;
	--dir) DIR=$2; shift 2 ;;
	--kvfs) KVFS=$2; shift 2 ;;
	--keep) KEEP=1; shift ;;
	*) sed -n '2,14p' "$0" >&2; exit 2 ;;
	esac
done
[ -n "$DIR" ] || DIR=$(mktemp -d /var/tmp/kvfs-bench-rss.XXXXXX)
mkdir -p "$DIR/mnt"
DPID=
cleanup() {
	grep -q " $DIR/mnt fuse.kvfs " /proc/mounts && "$KVFS" umount "$DIR/mnt" >/dev/null 2>&1 || true
	[ -n "$DPID" ] && wait "$DPID" 2>/dev/null || true
	[ "$KEEP" = 1 ] || rm -rf "$DIR"
}
trap cleanup EXIT

# Distinct pages (dedup would share identical ones), 4096 per layer.
python3 - "$DIR/src" "$PAGES" "$SIZE" <<'EOF'
import os, sys
root, n, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
block = os.urandom(size)
for i in range(n):
    layer = os.path.join(root, "%02d" % (i // 4096))
    if i % 4096 == 0:
        os.makedirs(layer, exist_ok=True)
    with open(os.path.join(layer, "p%06d" % (i % 4096)), "wb") as f:
        f.write(i.to_bytes(8, "little") + block[8:])
EOF

"$KVFS" mkfs "$DIR/store" >/dev/null
"$KVFS" mount "$DIR/store" "$DIR/mnt" -f -o "ram_cache=$RAM" 2>"$DIR/daemon.log" &
DPID=$!
for _ in $(seq 100); do grep -q " $DIR/mnt fuse.kvfs " /proc/mounts && break; sleep 0.1; done
# a geometry whose page is SIZE bytes: 2 (K, V) x 16 tokens x 1 head x
# SIZE/64 dims x 2 bytes (f16)
"$KVFS" model create "$DIR/mnt/bench" --layers $(( (PAGES + 4095) / 4096 )) \
	--kv-heads 1 --head-dim $(( SIZE / 64 )) --dtype f16 --page-tokens 16 >/dev/null
start=$(date +%s.%N)
"$KVFS" import --quiet "$DIR/src" "$DIR/mnt/bench" >/dev/null
secs=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { print b - a }')
sleep 2   # let the committer drain the write-back
rss=$(awk '/^VmRSS/ {print $2 * 1024}' "/proc/$DPID/status")
hwm=$(awk '/^VmHWM/ {print $2 * 1024}' "/proc/$DPID/status")
python3 - "$DIR/mnt/.kvfs/stats" "$PAGES" "$SIZE" "$rss" "$hwm" "$secs" <<'EOF'
import json, sys
path, pages, size, rss, hwm, secs = sys.argv[1:]
s = json.load(open(path))
ram, wb = s["ram"], s["writeback"]
print("pages=%s size=%s import_s=%.1f rss=%d hwm=%d ram_budget=%d ram_bytes=%d "
      "ram_pages=%d dirty_budget=%d dirty_peak=%d rss_minus_tier=%d"
      % (pages, size, float(secs), int(rss), int(hwm), ram["budget_bytes"], ram["bytes"],
         ram["pages"], wb["budget_bytes"], wb["peak_bytes"], int(rss) - ram["bytes"]))
EOF
