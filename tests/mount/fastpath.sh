#!/usr/bin/env bash
# The fast-path ioctls through a real mount (raw ABI, see fastpath.py).
. "$(dirname "$0")/lib.sh"

mkfs
chmod 755 "$T"   # uid 65534 takes part in the ownership checks
KVFS_LOG=debug mount_kvfs -o allow_other,ram_cache=0   # the disk path: O_DIRECT and bounces
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

# A handle from before a restart names nothing (never another page), even
# when the page it named is gone and its inode number is handed out again.
handles() { python3 - "$M" "$@" <<'PY'
import errno, os, sys
sys.path.insert(0, os.environ["TESTDIR"])
import kvfsabi as abi
model, cmd, arg = sys.argv[1], sys.argv[2], sys.argv[3]
dfd = os.open(model, os.O_RDONLY)
fd = abi.memfd(1 << 20)
import mmap
mem = mmap.mmap(fd, 1 << 20)
rid, _ = abi.register(dfd, fd)
if cmd == "lookup":
    d = [abi.Desc(0, arg.encode())]
    abi.place(mem, d, 0, 4096)
    abi.batch(dfd, abi.LOOKUP, rid, 0, 1)
    abi.collect(mem, d, 0)
    assert d[0].status == 0, d[0].status
    print(d[0].handle)
else:
    d = [abi.Desc(handle=int(arg), dst_off=1 << 19, dst_len=1 << 19)]
    abi.place(mem, d, 0, 4096)
    abi.batch(dfd, abi.READ, rid, 0, 1)
    abi.collect(mem, d, 0)
    print(d[0].status)
PY
}
export TESTDIR=$(dirname "$0")
echo newest > "$M/0/newest"
old=$(handles lookup newest) || fail "lookup of the newest page"
[ "$(handles read "$old")" = 0 ] || fail "read by handle in the same mount"
rm "$M/0/newest"
umount_kvfs
mount_kvfs
echo other > "$M/0/reborn"    # may get the inode number 'newest' had
[ "$(handles read "$old")" = -2 ] || fail "a handle from the previous mount was accepted"
new=$(handles lookup reborn) || fail "lookup after remount"
[ "$new" != "$old" ] || fail "a handle was reissued for another page"
[ "$(handles read "$new")" = 0 ] || fail "read by a fresh handle"
umount_kvfs
