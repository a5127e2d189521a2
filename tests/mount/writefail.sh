#!/usr/bin/env bash
# The stripe's filesystem fills up between write() and fsync(): the payload
# write fails, fsync reports EIO, the page is withdrawn (never half-visible),
# the failure is logged, and the daemon keeps serving and committing.
. "$(dirname "$0")/lib.sh"

mkdir -p "$T/stripe"
mount -t tmpfs -o size=8m tmpfs "$T/stripe" || skip "cannot mount tmpfs (need root)"
CLEANUP_HOOK='umount "$T/stripe"'
mkfs --stripe "$T/stripe/s0"
mount_kvfs -o no_direct
mkdir -p "$MNT/m/00"
python3 - "$MNT/m/00" "$T/stripe/filler" <<'PY' || fail "write failure not reported as expected"
import errno, os, sys
d, filler = sys.argv[1], sys.argv[2]
fd = os.open(f"{d}/doomed", os.O_CREAT | os.O_WRONLY, 0o644)
os.write(fd, os.urandom(300000))
ffd = os.open(filler, os.O_CREAT | os.O_WRONLY, 0o644)   # the disk fills
try:                                                        # behind kvfs's back
    while True:
        os.write(ffd, b"\0" * 65536)
except OSError as e:
    assert e.errno == errno.ENOSPC, e
os.close(ffd)
try:
    os.fsync(fd)
    sys.exit("fsync succeeded although the payload could not be written")
except OSError as e:
    assert e.errno == errno.EIO, e
os.close(fd)
assert not os.path.exists(f"{d}/doomed"), "withdrawn page still visible"
os.unlink(filler)
with open(f"{d}/fine", "wb") as f:
    f.write(b"ok" * 1000); f.flush(); os.fsync(f.fileno())
assert open(f"{d}/fine", "rb").read() == b"ok" * 1000
PY
grep -q "page doomed (inode [0-9]*) lost" "$LOG" || fail "no log line for the lost page"
umount_kvfs
mount_kvfs -o no_direct
[ ! -e "$MNT/m/00/doomed" ] || fail "lost page came back after remount"
[ "$(cat "$MNT/m/00/fine")" = "$(python3 -c 'print("ok"*1000, end="")')" ] || fail "page after the failure"
umount_kvfs
echo PASS
