#!/usr/bin/env bash
# Kernel-daemon round trips of a page written through FUSE, counted in the
# daemon's FUSE debug log (-d): a 1 MiB page written 64 KiB at a time is
# one CREATE and 16 WRITEs, with no GETXATTR of security.capability before
# each write (the creator's handle is direct I/O), and reads back
# bit-exact. Before, every write(2) cost two round trips.
. "$(dirname "$0")/lib.sh"

mkfs
mount_kvfs -d -o max_page=1M
mkdir -p "$MNT/m/0" || fail "mkdir"
head -c 1048576 /dev/urandom > "$T/src"
sleep 0.2
start=$(wc -c < "$LOG")
dd if="$T/src" of="$MNT/m/0/p1" bs=64K conv=fsync status=none || fail "dd"
sleep 0.2
ops=$(tail -c +"$((start + 1))" "$LOG" | grep -aoE 'opcode: [A-Z_]+' | sort | uniq -c)
echo "$ops"
count() { echo "$ops" | awk -v op="$1" '$3 == op { print $1 }'; }
[ "$(count WRITE)" = 16 ] || fail "expected 16 WRITE requests, got '$(count WRITE)'"
[ "$(count CREATE)" = 1 ] || fail "expected 1 CREATE, got '$(count CREATE)'"
[ -z "$(count GETXATTR)" ] || fail "$(count GETXATTR) GETXATTR requests while writing a page"
cmp "$T/src" "$MNT/m/0/p1" || fail "the page does not read back"
umount_kvfs
echo PASS
