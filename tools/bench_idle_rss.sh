#!/bin/bash
# The daemon's anonymous RSS before, right after and 4 s after a write
# flood (docs/benchmarks/scale.md, "A write burst's memory given back").
# A fresh store under /var/tmp/abt, mounted with -o ram_cache=0 (the RAM
# tier would hold the pages written); four engines write PAGES pages of
# SIZE bytes each through the fast path (bench_idle_rss.py), then the
# layers are synced. Run it against two builds, alternating.
# Not tools/bench_rss.sh: that one floods through `kvfs import`, one
# client, and reads RSS once; the memory this measures is left in the
# malloc arenas of several fast-path threads serving engines at once, and
# shows only when read again after the daemon has gone idle.
# usage: tools/bench_idle_rss.sh KVFS_BINARY PAGES_PER_ENGINE SIZE(4096|65536)
set -u
K=$1 PAGES=$2 SIZE=$3
W=${KVFS_BENCH_DIR:-/var/tmp/abt}
HERE=$(cd "$(dirname "$0")" && pwd)
case $SIZE in
4096) GEO="--kv-heads 1 --head-dim 64 --dtype f16" ;;
65536) GEO="--kv-heads 8 --head-dim 128 --dtype bf16" ;;
*) echo "SIZE must be 4096 or 65536" >&2; exit 2 ;;
esac
umount -l "$W/mnt" 2>/dev/null; rm -rf "$W"; mkdir -p "$W/mnt"
"$K" mkfs "$W/store" >/dev/null || exit 1
"$K" mount "$W/store" "$W/mnt" -f -o ram_cache=0 2>"$W/log" & D=$!
for _ in $(seq 100); do grep -q " $W/mnt " /proc/mounts && break; sleep 0.1; done
"$K" model create "$W/mnt/m" --layers 4 $GEO --page-tokens 16 >/dev/null || exit 1
rss() { awk '/^RssAnon/ { print int($2 / 1024) }' "/proc/$D/status"; }
r0=$(rss)
python3 "$HERE/bench_idle_rss.py" "$W/mnt" "$PAGES" "$SIZE" || echo "the flood failed" >&2
for l in "$W/mnt/m"/*; do python3 -c 'import os,sys; fd=os.open(sys.argv[1], os.O_RDONLY); os.fsync(fd)' "$l"; done
r1=$(rss)
sleep 4
r2=$(rss)
echo "$K: $((4 * PAGES)) pages of $SIZE B; RssAnon MB: before $r0, after the flood $r1, 4 s later $r2"
fusermount3 -u "$W/mnt"; wait $D; rm -rf "$W"
