#!/usr/bin/env bash
# A page written by one large AIO O_DIRECT write (aiowrite.py): the kernel
# sends its 1 MiB pieces one at a time (async direct I/O is off), and the
# page reads back exactly.
. "$(dirname "$0")/lib.sh"
mkfs --capacity 1G
mount_kvfs
mkdir -p "$MNT/m/0"
python3 "$(dirname "$0")/aiowrite.py" "$MNT/m/0" 24 16 || fail "AIO O_DIRECT page writes"
umount_kvfs
no_errors_in_log
echo "PASS: aiowrite"
