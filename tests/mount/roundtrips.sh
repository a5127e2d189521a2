#!/usr/bin/env bash
# Kernel-daemon round trips of a page written through FUSE, counted in the
# daemon's FUSE debug log (-d): a 1 MiB page written 64 KiB at a time is
# one CREATE and 16 WRITEs, with no GETXATTR of security.capability before
# each write (the creator's handle is direct I/O), no GETATTR of the page
# (its attributes are cached while it is written: before, the permission
# check of the open asked for them), and reads back bit-exact. Before,
# every write(2) cost two round trips.
. "$(dirname "$0")/lib.sh"

mkfs
mount_kvfs -d -o max_page=1M
mkdir -p "$MNT/m/0" || fail "mkdir"
head -c 1048576 /dev/urandom > "$T/src"
sleep 0.2
start=$(wc -c < "$LOG")
dd if="$T/src" of="$MNT/m/0/p1" bs=64K conv=fsync status=none || fail "dd"
sleep 0.2
window=$(tail -c +"$((start + 1))" "$LOG")
ops=$(echo "$window" | grep -aoE 'opcode: [A-Z_]+' | sort | uniq -c)
ino=$(stat -c %i "$MNT/m/0/p1")
echo "$ops"
count() { echo "$ops" | awk -v op="$1" '$3 == op { print $1 }'; }
[ "$(count WRITE)" = 16 ] || fail "expected 16 WRITE requests, got '$(count WRITE)'"
[ "$(count CREATE)" = 1 ] || fail "expected 1 CREATE, got '$(count CREATE)'"
[ -z "$(count GETXATTR)" ] || fail "$(count GETXATTR) GETXATTR requests while writing a page"
page_getattrs=$(echo "$window" | grep -acE "opcode: GETATTR \([0-9]+\), nodeid: $ino," || true)
[ "$page_getattrs" = 0 ] || fail "$page_getattrs GETATTR requests for the page (inode $ino) while writing it"
cmp "$T/src" "$MNT/m/0/p1" || fail "the page does not read back"
umount_kvfs
echo PASS
