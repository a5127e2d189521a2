#!/usr/bin/env bash
# A stripe's disk fails while mounted: its filesystem (an ext4 image with
# errors=remount-ro) turns read-only, so every write there fails with
# EROFS. The stripe must leave the rotation at its first failed write
# (before, every second new page failed for as long as the mount lasted),
# with one log line and the stripe counted as failed in the metrics; its
# pages are still read. Once the disk is back every acknowledged page reads
# back bit-exact and fsck is clean.
. "$(dirname "$0")/lib.sh"

[ -w /proc/sys/vm/drop_caches ] || skip "cannot drop the page cache (need root)"
ext4_image 64M errors=remount-ro
S1=$FS/s1
DEV=$(basename "$(findmnt -n -o SOURCE "$FS")")
[ -w "/sys/fs/ext4/$DEV/trigger_fs_error" ] || skip "no /sys/fs/ext4/$DEV/trigger_fs_error to fail the disk with"

mkfs --stripe "$T/s0" --stripe "$S1" --capacity 32M
mount_kvfs -o ram_cache=0
mkdir -p "$MNT/m/00"
$PAGETOOL write "$MNT/m/00" before 8 70000 --fsync || fail "pages before the failure"

echo "kvfs stripe test" >"/sys/fs/ext4/$DEV/trigger_fs_error"   # now read-only
touch "$FS/probe" 2>/dev/null && fail "the image did not turn read-only"

# One page at a time, each fsync'ed: at most the first one that meets the
# read-only stripe may fail; every later one must succeed.
python3 - "$MNT/m/00" "$(dirname "$0")" >"$T/acked" <<'PY' || fail "new pages after the stripe failed"
import errno, os, sys
d = sys.argv[1]
sys.path.insert(0, sys.argv[2])
from pagetool import content, write_page
failed = []
for i in range(20):
    name = f'after{i:06d}'
    try:
        write_page(f'{d}/{name}', content(name, 70000), True)
        print(name)
    except OSError as e:
        if e.errno != errno.EIO:
            sys.exit(f'{name}: {e}')
        failed.append(i)
if len(failed) > 1 or (failed and failed[0] > 1):
    sys.exit(f'pages {failed} of 20 failed: the failed stripe is still in rotation')
PY
[ "$(grep -c "taken out of allocation" "$LOG")" = 1 ] || fail "want one log line taking the stripe out"
grep -q "stripe 1 ($S1) taken out of allocation" "$LOG" || fail "the log line does not name the stripe"
python3 - "$MNT" <<'PY' || fail "stripe metrics"
import json, sys
st = json.load(open(f'{sys.argv[1]}/.kvfs/stats'))['ssd']
if (st['stripes_ok'], st['stripes_failed'], st['stripes_missing']) != (1, 1, 0) or st['write_errors'] < 1:
    sys.exit(f'stripe metrics: {st}')
prom = open(f'{sys.argv[1]}/.kvfs/metrics').read()
if 'kvfs_ssd_stripes{state="failed"} 1' not in prom:
    sys.exit('kvfs_ssd_stripes{state="failed"} 1 is not in .kvfs/metrics')
PY
"$KVFS" stat "$MNT" >"$T/stat" && grep -q "STRIPES: 1 ok, 1 failed" "$T/stat" || fail "kvfs stat does not show the failed stripe"
# reads still come from the failed stripe
echo 3 >/proc/sys/vm/drop_caches
$PAGETOOL verify "$MNT/m/00" before 8 70000 || fail "pages on the failed stripe no longer read"
umount_kvfs

# The disk comes back (the operator repaired it): everything acknowledged
# is there, bit-exact, and fsck is clean.
umount "$FS" || fail "umount $FS"
for dev in $(losetup -n -O NAME -j "$IMG" 2>/dev/null); do losetup -d "$dev" 2>/dev/null || true; done
command -v e2fsck >/dev/null && { e2fsck -p "$IMG" >/dev/null 2>&1 || true; }
mount -o loop "$IMG" "$FS" || fail "mount $IMG again"
"$KVFS" fsck "$STORE" --verify-data >"$T/fsck" 2>&1 || fail "fsck: $(cat "$T/fsck")"
mount_kvfs -o ram_cache=0
$PAGETOOL verify "$MNT/m/00" before 8 70000 || fail "pages before the failure, after remount"
python3 - "$MNT/m/00" "$(dirname "$0")" "$T/acked" <<'PY' || fail "acknowledged pages after remount"
import sys
sys.path.insert(0, sys.argv[2])
from pagetool import content
for name in open(sys.argv[3]).read().split():
    if open(f'{sys.argv[1]}/{name}', 'rb').read() != content(name, 70000):
        sys.exit(f'{name}: wrong bytes')
PY
$PAGETOOL write "$MNT/m/00" later 4 70000 --fsync || fail "pages after the disk came back"
umount_kvfs
echo PASS
