#!/usr/bin/env bash
# KVFS_IOC_WRITE through a real mount (raw ABI, see fastwrite.py): batch
# written pages read back bit-exact by FUSE read and the fast-path READ;
# replace, refusals and permissions; and a durable batch survives kill -9 of
# the daemon the moment the ioctl returns.
. "$(dirname "$0")/lib.sh"
command -v getfattr >/dev/null || skip "getfattr is not installed (apt-get install attr)"

mkfs
chmod 755 "$T"   # uid 65534 takes part in the permission checks
# A small write-back budget and commit batch, so one call spans several
# staging chunks and transactions.
KVFS_LOG=debug mount_kvfs -o allow_other,max_page=1M,dirty=4M,commit_batch=1000
mkdir "$MNT/m" "$MNT/m/0" "$MNT/m/1" "$MNT/m/2" "$MNT/m/3" "$MNT/m/4" || fail "mkdir"
"$KVFS" model create "$MNT/tiny" --layers 2 --kv-heads 2 --head-dim 8 --dtype bf16 --page-tokens 4 >/dev/null || fail "model create"
python3 "$(dirname "$0")/fastwrite.py" "$MNT" "$LOG" "$T" main || fail "fast write checks"
no_errors_in_log
umount_kvfs
# Everything written is still there after a clean remount.
mount_kvfs
cmp <(head -c 777 /dev/zero | tr '\0' L) "$MNT/m/0/last" || fail "page after a clean remount"
mkdir "$MNT/k" "$MNT/k/0" "$MNT/k/1" || fail "mkdir k"
python3 "$(dirname "$0")/fastwrite.py" "$MNT" "$LOG" "$T" crash "$DPID" || fail "durable batch"
wait "$DPID" 2>/dev/null || true
DPID=
fusermount3 -u -z "$MNT"
mount_kvfs
python3 "$(dirname "$0")/fastwrite.py" "$MNT" "$LOG" "$T" verify || fail "durable pages after kill -9"
umount_kvfs
grep -q "checksum mismatch" "$LOG" && fail "checksum errors after the crash"
echo PASS
