#!/usr/bin/env bash
# One uid's pages still being written (open, never closed) hold at most
# half the write-back budget (dirtyshare.py): past that its writes fail
# with EDQUOT after a short wait, root keeps writing and the mount keeps
# answering, and the daemon's memory stays within the budget. Before,
# uid 65534 holding the budget made every other writer wait 2 s a write
# (4 s seen), let one charge over the budget through each 2 s (RSS grew
# without bound), and 20 such writers blocked every FUSE thread. A page of
# the uid past its share, alone, is not held against root's writes.
. "$(dirname "$0")/lib.sh"
BUDGET=$((8 << 20))

mkfs
chmod 755 "$T"    # uid 65534 reaches the mount
mount_kvfs -o allow_other,dirty=$BUDGET,nodedup
mkdir -p "$MNT/m/0" "$MNT/m/1"
chmod 777 "$MNT/m/0"
python3 "$(dirname "$0")/dirtyshare.py" "$MNT" "$BUDGET" || fail "write-back share per uid"
refused=$(awk '$1 == "kvfs_writeback_uid_refused_total" { print $2 }' "$MNT/.kvfs/metrics")
[ "${refused:-0}" -ge 21 ] || fail "kvfs_writeback_uid_refused_total is ${refused:-missing}"
grep -q "write-back: uid 65534 holds .* refusing a write of .* with EDQUOT" "$LOG" ||
	fail "no log line for the refusals"
umount_kvfs
mount_kvfs
n=$(ls "$MNT/m/0" | grep -vc '^c[0-2]$')
[ "$n" = 6 ] || fail "$n pages of uid 65534 after remount, want 6 (4 held, after, big): $(ls "$MNT/m/0")"
# A refused ftruncate dooms the page as a refused write does: a copy that
# could not grow its page to its size leaves no part of it behind.
[ ! -e "$MNT/m/0/grown" ] || fail "the page whose ftruncate was refused was stored"
for c in $(ls "$MNT/m/0" | grep '^c[0-2]$'); do
	[ "$(stat -c %s "$MNT/m/0/$c")" = $((3 << 20)) ] || fail "page $c is not whole"
done
umount_kvfs
no_errors_in_log
echo "PASS: one uid's unsealed pages hold at most half the write-back budget"
