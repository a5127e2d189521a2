#!/usr/bin/env bash
# kill -9 of the daemon: the stale mount is explained, and after remount every
# page whose fsync returned is present and bit-exact; pages not fsync'ed are
# either absent or complete (never torn), and uncommitted space is reclaimed,
# preallocated segment tails included.
. "$(dirname "$0")/lib.sh"

ssd() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["ssd"][sys.argv[2]])' "$MNT/.kvfs/stats" "$1"; }
seg_bytes() { stat -c '%b' "$STORE"/stripe0/seg-* | awk '{ s += $1 * 512 } END { print s + 0 }'; }
seg_files() { ls "$STORE"/stripe0 | grep -c '^seg-' || true; }

mkfs
mount_kvfs
mkdir -p "$MNT/m/00" "$MNT/m/01"
$PAGETOOL write "$MNT/m/00" durable 200 0 --fsync || fail "fsync'ed writes"
$PAGETOOL write "$MNT/m/01" loose 300 65536 || fail "plain writes"
# the segment is preallocated ahead of the writes (store/prealloc.c)
for _ in $(seq 50); do [ "$(ssd prealloc_bytes)" -gt 0 ] && break; sleep 0.1; done
pa=$(ssd prealloc_bytes)
[ "$pa" -gt 0 ] || fail "nothing preallocated after 500 pages"
[ "$(seg_bytes)" -ge "$pa" ] || fail "preallocated $pa bytes, the segments hold $(seg_bytes)"
kill -9 "$DPID"
wait "$DPID" 2>/dev/null || true
DPID=

# The dead mount answers ENOTCONN; kvfs mount explains it.
out=$("$KVFS" mount "$STORE" "$MNT" 2>&1) && fail "mount over a stale mount succeeded"
grep -q "stale" <<<"$out" || fail "stale mount not explained: $out"
grep -q "fusermount3 -u -z $MNT" <<<"$out" || fail "no command to clear it: $out"
fusermount3 -u -z "$MNT"

mount_kvfs
# reclaim gave back what no row names, the preallocated tail with it: the
# segments hold the committed extents (and ext4's extent-tree blocks)
phys=$(ssd physical_bytes)
[ "$(ssd prealloc_bytes)" = 0 ] || fail "preallocated before any write: $(ssd prealloc_bytes)"
[ "$(seg_bytes)" -le $((phys + 4096 * $(seg_files))) ] ||
	fail "after the crash the segments hold $(seg_bytes) bytes, the store $phys"
grep -q "reclaimed [1-9]" "$LOG" || fail "the mount reclaimed nothing"
[ "$($PAGETOOL verify "$MNT/m/00" durable 200 0)" = 200 ] || fail "fsync'ed pages lost"
n=$($PAGETOOL verify "$MNT/m/01" loose 300 65536 --missing-ok) || fail "a surviving page is torn"
echo "pages not fsync'ed that survived: $n of 300"
umount_kvfs
grep -q "checksum mismatch" "$LOG" && fail "checksum errors after crash"
echo PASS
