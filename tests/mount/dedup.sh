#!/bin/bash
# Content dedup: identical pages share one extent (refcount, du vs df),
# different pages never do, even when their hashes collide (a test hook
# forces it), refcounts survive a remount and drop correctly on unlink.
. "$(dirname "$0")/lib.sh"
DEDUP_PY="python3 $(dirname "$0")/dedup.py"

mkfs
mount_kvfs
mkdir -p "$MNT/m/00" "$MNT/m/01"
$DEDUP_PY share "$MNT" || fail "identical pages do not share one extent"
umount_kvfs
mount_kvfs
$DEDUP_PY after-remount "$MNT" || fail "shared extents after remount"
umount_kvfs
mount_kvfs
$DEDUP_PY after-unlink "$MNT" || fail "space after unlinking shared pages"
umount_kvfs
no_errors_in_log

# Every page of one length gets the same checksum: only the byte
# comparison keeps different pages apart.
rm -rf "$STORE"
mkfs
KVFS_TEST_HASH_COLLIDE=1 mount_kvfs
mkdir -p "$MNT/m/00"
$DEDUP_PY collide "$MNT" || fail "a forced hash collision shared different pages"
umount_kvfs
grep -q "test hook KVFS_TEST_HASH_COLLIDE" "$LOG" || fail "the collision hook was not active"
no_errors_in_log
echo "PASS: dedup shares identical pages only"
