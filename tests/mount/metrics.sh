#!/bin/bash
# Observability: MOUNT/.kvfs/stats (JSON) and .kvfs/metrics (Prometheus)
# match docs/metrics.md and each other, move as pages are written (cp) and
# read (cat), refuse every change; `kvfs stat` summarises them; `kvfs model
# drop` removes a model through the mount.
. "$(dirname "$0")/lib.sh"
MPY="python3 $(dirname "$0")/metrics.py"
PAGES=8
SIZE=65536

mkfs --capacity 256M
mount_kvfs

# .kvfs is reached by name only (not listed: find, du, cp -a never see it),
# lists its two files, and takes no space.
if ls -a "$MNT" | grep -q kvfs; then fail "the root lists .kvfs: $(ls -a "$MNT")"; fi
[ "$(ls -a "$MNT/.kvfs" | tr '\n' ' ')" = ". .. events metrics stats " ] || fail "ls -a .kvfs: $(ls -a "$MNT/.kvfs")"
[ "$(du -s "$MNT/.kvfs" | cut -f1)" = 0 ] || fail "du counts .kvfs: $(du -s "$MNT/.kvfs")"
[ -z "$(find "$MNT" -type f)" ] || fail "find sees files in an empty store: $(find "$MNT" -type f)"
$MPY docs "$MNT" || fail "docs/metrics.md and the metrics file disagree"
$MPY hist "$MNT" || fail "latency histograms"
$MPY chunked "$MNT" || fail "reading a control file in small pieces"

# (2) writes through FUSE move the write counters by exactly what was written.
mkdir -p "$MNT/m/00" "$MNT/m/01"
$MPY save "$MNT" "$T/s0.json" || fail "snapshot before writing"
for i in $(seq $PAGES); do
	head -c $SIZE /dev/urandom > "$T/p$i"
	cp "$T/p$i" "$MNT/m/0$((i % 2))/p$i" || fail "cp page $i"
done
python3 -c 'import os, sys; fd = os.open(sys.argv[1], os.O_RDONLY); os.fsync(fd)' "$MNT/m/00"
$MPY writes "$MNT" "$T/s0.json" $PAGES $SIZE || fail "write counters"
[ "$(find "$MNT" -type f | wc -l)" = $PAGES ] || fail "find -type f: $(find "$MNT" -type f)"
[ "$(du -s -B1 "$MNT/m" | cut -f1)" -ge $((PAGES * SIZE)) ] || fail "du of the pages"
$MPY readonly "$MNT" || fail ".kvfs is not read-only"

# `kvfs stat`: the summary and --json.
"$KVFS" stat "$MNT" > "$T/stat.txt" || fail "kvfs stat exited $?"
for want in '^ssd ' '^ram ' 'hit rate' 'capacity .* used \([0-9.]+%\)' 'evictions' \
	    '^dedup ' '^write-back ' 'write amplification [1-9]' '^latency .*p99' \
	    'accepted: fuse 512.0 KiB'; do
	grep -Eq "$want" "$T/stat.txt" || fail "kvfs stat lacks /$want/: $(cat "$T/stat.txt")"
done
"$KVFS" stat "$MNT" --json | python3 -c 'import json, sys; s = json.load(sys.stdin); assert s["pages"]["sealed"] >= 8, s' \
	|| fail "kvfs stat --json"
rc=0; "$KVFS" stat "$T" 2>"$T/err" || rc=$?
[ $rc = 1 ] && grep -q "not the root of a kvfs mount" "$T/err" || fail "kvfs stat on a plain directory: rc $rc, $(cat "$T/err")"
rc=0; "$KVFS" stat 2>/dev/null || rc=$?
[ $rc = 2 ] || fail "kvfs stat without MOUNT: rc $rc"

# (2) reads: after a remount nothing is in the kernel's page cache.
umount_kvfs
mount_kvfs
$MPY save "$MNT" "$T/s1.json" || fail "snapshot before reading"
for i in $(seq $PAGES); do
	cat "$MNT/m/0$((i % 2))/p$i" | cmp - "$T/p$i" || fail "page $i reads back wrong"
done
$MPY reads "$MNT" "$T/s1.json" $((PAGES * SIZE)) || fail "read counters"

# `kvfs model drop`: pipes need --yes; the model, its layers and pages go.
"$KVFS" model create "$MNT/tiny" --layers 2 --kv-heads 1 --head-dim 64 --dtype f16 --page-tokens 16 >/dev/null \
	|| fail "model create"
for i in 1 2 3; do head -c 4096 /dev/urandom > "$MNT/tiny/0$((i % 2))/q$i" || fail "write tiny page $i"; done
settle() { python3 -c 'import os, sys; fd = os.open(sys.argv[1], os.O_RDONLY); os.fsync(fd)' "$MNT"; }
df_used() { settle; python3 -c 'import os, sys; s = os.statvfs(sys.argv[1]); print((s.f_blocks - s.f_bfree) * s.f_frsize)' "$MNT"; }
used0=$(df_used)
rc=0; "$KVFS" model drop "$MNT/tiny" </dev/null 2>"$T/err" || rc=$?
[ $rc = 2 ] && grep -q -- "--yes" "$T/err" || fail "drop in a pipe without --yes: rc $rc, $(cat "$T/err")"
[ -f "$MNT/tiny/01/q1" ] || fail "drop without --yes removed pages"
for bad in "$MNT/.kvfs" "$MNT/tiny/00" "$MNT/nosuch" "$T"; do
	rc=0; "$KVFS" model drop "$bad" --yes 2>/dev/null || rc=$?
	[ $rc = 1 ] || fail "model drop $bad: rc $rc"
done
"$KVFS" model drop "$MNT/tiny" --yes > "$T/drop.txt" || fail "model drop --yes"
grep -q "3 pages, 12288 bytes, 2 layer directories" "$T/drop.txt" || fail "drop output: $(cat "$T/drop.txt")"
[ ! -e "$MNT/tiny" ] || fail "the model directory is still there"
if "$KVFS" model list "$MNT" | grep -q '^tiny '; then fail "model list still shows tiny"; fi
"$KVFS" model list "$MNT" | grep -q '^m ' || fail "model list lost m"
used1=$(df_used)
[ "$used1" -eq $((used0 - 3 * 4096)) ] || fail "df used went from $used0 to $used1 after dropping 3 pages of 4 KiB"

umount_kvfs
no_errors_in_log
echo "PASS: .kvfs stats and metrics, kvfs stat, kvfs model drop"
