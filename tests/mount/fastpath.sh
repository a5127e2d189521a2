#!/usr/bin/env bash
# The fast-path ioctls through a real mount (raw ABI, see fastpath.py).
. "$(dirname "$0")/lib.sh"

mkfs
chmod 755 "$T"   # uid 65534 takes part in the ownership checks
KVFS_LOG=debug mount_kvfs -o allow_other
M=$MNT/m
mkdir "$M" "$M/0" "$M/1" "$MNT/other" "$MNT/other/0" || fail "mkdir"
for i in $(seq 0 9); do
	head -c $((65536 + i * 4096 + (i == 9 ? 5000 : 0))) /dev/urandom > "$M/0/p$i" || fail "write p$i"
done
for i in $(seq 0 4); do head -c 30000 /dev/urandom > "$M/1/p$i" || fail "write layer 1 p$i"; done
echo x > "$MNT/other/0/x"
python3 -c "import os; fd = os.open('$M/0/secret', os.O_CREAT | os.O_WRONLY, 0o400); os.write(fd, b's' * 5000); os.close(fd)" || fail "write secret"
python3 "$(dirname "$0")/fastpath.py" "$MNT" "$LOG" "$T" || fail "fast path checks"
no_errors_in_log 'checksum mismatch|read failed'
umount_kvfs
