#!/usr/bin/env bash
# kill -9 of the daemon: the stale mount is explained, and after remount every
# page whose fsync returned is present and bit-exact; pages not fsync'ed are
# either absent or complete (never torn), and uncommitted space is reclaimed.
. "$(dirname "$0")/lib.sh"

mkfs
mount_kvfs
mkdir -p "$MNT/m/00" "$MNT/m/01"
$PAGETOOL write "$MNT/m/00" durable 200 0 --fsync || fail "fsync'ed writes"
$PAGETOOL write "$MNT/m/01" loose 300 65536 || fail "plain writes"
kill -9 "$DPID"
wait "$DPID" 2>/dev/null || true
DPID=

# The dead mount answers ENOTCONN; kvfs mount explains it.
out=$("$KVFS" mount "$STORE" "$MNT" 2>&1) && fail "mount over a stale mount succeeded"
echo "$out" | grep -q "stale" || fail "stale mount not explained: $out"
echo "$out" | grep -q "fusermount3 -u -z $MNT" || fail "no command to clear it: $out"
fusermount3 -u -z "$MNT"

mount_kvfs
[ "$($PAGETOOL verify "$MNT/m/00" durable 200 0)" = 200 ] || fail "fsync'ed pages lost"
n=$($PAGETOOL verify "$MNT/m/01" loose 300 65536 --missing-ok) || fail "a surviving page is torn"
echo "pages not fsync'ed that survived: $n of 300"
umount_kvfs
grep -q "checksum mismatch" "$LOG" && fail "checksum errors after crash"
echo PASS
