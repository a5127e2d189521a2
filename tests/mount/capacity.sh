#!/bin/bash
# Capacity in cache mode: a flood larger than the store never passes its
# capacity (df and the store's counter), least recently used pages go
# first, shared pages and pages held open stay, access times survive a
# restart; authoritative mode refuses with ENOSPC instead of evicting.
. "$(dirname "$0")/lib.sh"
CAP_PY="python3 $(dirname "$0")/capacity.py"

mkfs --capacity 32M
KVFS_LOG=debug mount_kvfs
$CAP_PY fill "$MNT" || fail "filling the store"
# Half full: the segment is preallocated ahead of the writes, within the
# budget (the flood below samples the segment files on disk too).
ssd() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["ssd"][sys.argv[2]])' "$MNT/.kvfs/stats" "$1"; }
for _ in $(seq 50); do [ "$(ssd prealloc_bytes)" -gt 0 ] && break; sleep 0.1; done
[ "$(ssd prealloc_bytes)" -gt 0 ] || fail "nothing preallocated in a half-full store"
[ $(( $(ssd prealloc_bytes) + $(ssd physical_bytes) )) -le $((32 << 20)) ] ||
	fail "preallocated $(ssd prealloc_bytes) bytes beside $(ssd physical_bytes) in a 32M store"
$CAP_PY evict "$MNT" || fail "eviction order"
grep -q "evicted page a0" "$LOG" || fail "evictions are not logged at debug level"
umount_kvfs
mount_kvfs
$CAP_PY after-remount "$MNT" || fail "LRU order after a restart"
KVFS_STORE=$STORE $CAP_PY flood "$MNT" || fail "writer flood"
umount_kvfs
mount_kvfs -o evict_high=50,evict_low=40
$CAP_PY lowered "$MNT" || fail "a mount above its high watermark"
umount_kvfs
mount_kvfs -o authoritative
$CAP_PY authoritative "$MNT" || fail "authoritative mode"
umount_kvfs

# kvfs gc through the mount (root only) and on the store offline.
used() { stat -f -c '%b %f %S' "$MNT" | awk '{ print ($1 - $2) * $3 }'; }
mount_kvfs -o allow_other     # others reach the ioctl, to be refused there
n0=$(ls "$MNT/m/0" | wc -l)
exec 7<"$MNT/m/0/$(ls "$MNT/m/0" | head -n 1)"    # held open: must survive
held=$(ls "$MNT/m/0" | head -n 1)
out=$("$KVFS" gc "$MNT" --target-size 8M) || fail "kvfs gc --target-size on the mount"
echo "$out"
[ "$(used)" -le $((8 << 20)) ] || fail "gc left $(used) bytes used, target 8M"
[ -e "$MNT/m/0/$held" ] || fail "gc evicted a page held open"
[ "$(ls "$MNT/m/0" | wc -l)" -lt "$n0" ] || fail "gc evicted nothing"
exec 7<&-
if command -v setpriv >/dev/null; then
	chmod 755 "$T"       # others must reach the mount point
	# ... and run kvfs: a copy, since the build tree may be private to
	# root (a checkout under a 0700 mktemp directory)
	mkdir -p "$T/nobody" && cp "$KVFS" "$T/nobody/kvfs" &&
		cp "$KVFS_LIB" "$T/nobody/libkvfs.so.0" && chmod -R a+rX "$T/nobody" ||
		fail "copying kvfs for uid 65534"
	out=$(LD_LIBRARY_PATH="$T/nobody" setpriv --reuid 65534 --regid 65534 --clear-groups \
		"$T/nobody/kvfs" gc "$MNT" --target-size 0 2>&1) &&
		fail "gc by a non-root user succeeded"
	grep -q "only root" <<<"$out" || fail "gc by a non-root user: $out"
fi
"$KVFS" gc "$STORE" --older-than 1s >/dev/null 2>&1 && fail "gc on a mounted store's directory succeeded"
rc=0; "$KVFS" gc "$MNT" >/dev/null 2>&1 || rc=$?
[ $rc -eq 2 ] || fail "gc without a mode: exit $rc, not a usage error (2)"
rc=0; "$KVFS" gc "$MNT" --older-than 3x >/dev/null 2>&1 || rc=$?
[ $rc -eq 2 ] || fail "a bad duration: exit $rc, not a usage error (2)"
umount_kvfs
sleep 1.1
"$KVFS" gc "$STORE" --older-than 1s || fail "kvfs gc --older-than on the store"
mount_kvfs
[ -z "$(ls "$MNT/m/0")" ] || fail "offline gc --older-than 1s left pages: $(ls "$MNT/m/0" | head -3)"
[ "$(used)" -eq 0 ] || fail "offline gc left $(used) bytes used"
umount_kvfs
no_errors_in_log "store full|no space for|cannot open store|in use by another|kvfs.pinned \"yes\" refused"
echo "PASS: capacity enforced, LRU eviction, authoritative ENOSPC"
