#!/usr/bin/env bash
# Fault injection through the daemon's seams (faults.py): store writes,
# fsyncs and reads (EIO, ENOSPC, short), fast-path batches, manifest commits
# and row changes. Then a clean unmount, a remount that has every
# acknowledged page and none of the failed ones, and a clean fsck. Without
# -o fault_injection the xattr is refused.
. "$(dirname "$0")/lib.sh"
command -v setfattr >/dev/null || skip "setfattr is not installed (apt-get install attr)"
[ -w /proc/sys/vm/drop_caches ] || skip "cannot drop the page cache (need root)"

mkfs
mount_kvfs
mkdir -p "$MNT/m/0"
setfattr -n user.kvfs.fault -v "store write 1 EIO" "$MNT" 2>"$T/err" &&
	fail "fault injection armed on a mount without -o fault_injection"
grep -q "not permitted" "$T/err" || fail "refusal: $(cat "$T/err")"
getfattr -n user.kvfs.fault "$MNT" >/dev/null 2>&1 && fail "user.kvfs.fault readable without the option"
umount_kvfs

mount_kvfs -o fault_injection,ram_cache=0
python3 "$(dirname "$0")/faults.py" "$MNT" "$LOG" run || fail "fault seams"
grep -q "fault injection armed: store write 1 EIO" "$LOG" || fail "arming is not logged"
umount_kvfs
mount_kvfs
python3 "$(dirname "$0")/faults.py" "$MNT" "$LOG" verify || fail "after remount"
umount_kvfs
"$KVFS" fsck "$STORE" --verify-data >"$T/fsck" 2>&1 || fail "fsck after faults: $(cat "$T/fsck")"
echo PASS
