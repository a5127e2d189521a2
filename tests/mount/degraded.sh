#!/usr/bin/env bash
# A store with a missing stripe: refused without -o degraded (the message
# names the option); with it, the pages on the missing stripe give EIO and
# a log line, the others read back, new pages all go to the stripes that
# are there, and nothing on the missing stripe is touched (its marker gone:
# the directory and its segment files are still there, and reclaim must
# not take them for garbage). Once the stripe is back every page, old and
# new, reads back bit-exact and fsck is clean.
. "$(dirname "$0")/lib.sh"

S0=$T/s0
S1=$T/s1
mkfs --stripe "$S0" --stripe "$S1"
mount_kvfs -o ram_cache=0
mkdir -p "$MNT/m/00"
$PAGETOOL write "$MNT/m/00" old 12 70000 --fsync || fail "writing the first pages"
umount_kvfs

# which stripe holds each page, from the extent xattr (read offline: the
# mount below must not be the one that tells us)
mount_kvfs -o ram_cache=0
for i in $(seq 0 11); do
	n=$(printf 'old%06d' "$i")
	x=$(getfattr --absolute-names --only-values -n user.kvfs.extent "$MNT/m/00/$n")
	echo "$n ${x%% *}"
done >"$T/where"
umount_kvfs
grep -q "stripe=1" "$T/where" || fail "no page on stripe 1: $(cat "$T/where")"
grep -q "stripe=0" "$T/where" || fail "no page on stripe 0: $(cat "$T/where")"

# 1. The directory is gone: refused, and the message names the option.
mv "$S1" "$T/s1.away"
if "$KVFS" mount "$STORE" "$MNT" -f >"$T/refused" 2>&1; then
	fusermount3 -u "$MNT" 2>/dev/null || true
	fail "a store with a missing stripe mounted without -o degraded"
fi
grep -q -- "-o degraded" "$T/refused" || fail "refusal does not name -o degraded: $(cat "$T/refused")"
mount_kvfs -o degraded,ram_cache=0
[ -e "$MNT/m/00/old000000" ] || fail "degraded mount does not list the pages"
umount_kvfs
mv "$T/s1.away" "$S1"

# 2. The marker is gone, the segment files are still there.
mv "$S1/kvfs-stripe" "$T/marker.away"
(cd "$S1" && sha256sum seg-* && stat -c '%n %s %b' seg-*) >"$T/s1.before"
: >"$LOG"
mount_kvfs -o degraded,ram_cache=0
grep -q "stripe 1 ($S1) is missing" "$LOG" || fail "no log line for the missing stripe"
python3 - "$MNT" "$T/where" "$(dirname "$0")" <<'PY' || fail "reads on a degraded mount"
import errno, json, os, sys
mnt, where = sys.argv[1], sys.argv[2]
sys.path.insert(0, sys.argv[3])
from pagetool import content
for line in open(where):
    name, stripe = line.split()
    path = f'{mnt}/m/00/{name}'
    try:
        with open(path, 'rb') as f:
            data = f.read()
    except OSError as e:
        if stripe == 'stripe=1' and e.errno == errno.EIO:
            continue
        sys.exit(f'{name} ({stripe}): {e}')
    if stripe == 'stripe=1':
        sys.exit(f'{name} on the missing stripe read without an error')
    if data != content(name, 70000):
        sys.exit(f'{name}: wrong bytes')
st = json.load(open(f'{mnt}/.kvfs/stats'))['ssd']
if (st['stripes_ok'], st['stripes_missing'], st['stripes_failed']) != (1, 1, 0):
    sys.exit(f'stripe metrics: {st}')
PY
grep -q "stripe missing (store opened degraded)" "$LOG" || fail "no log line for a read on the missing stripe"
"$KVFS" stat "$MNT" >"$T/stat" && grep -q "STRIPES: 1 ok, 0 failed (out of allocation), 1 missing" "$T/stat" ||
	fail "kvfs stat does not show the missing stripe"
$PAGETOOL write "$MNT/m/00" new 10 70000 --fsync || fail "new pages on a degraded mount"
for i in $(seq 0 9); do
	n=$(printf 'new%06d' "$i")
	x=$(getfattr --absolute-names --only-values -n user.kvfs.extent "$MNT/m/00/$n")
	[ "${x%% *}" = stripe=0 ] || fail "$n allocated on the missing stripe: $x"
done
umount_kvfs
(cd "$S1" && sha256sum seg-* && stat -c '%n %s %b' seg-*) >"$T/s1.after"
cmp -s "$T/s1.before" "$T/s1.after" || fail "the missing stripe's files changed: $(diff "$T/s1.before" "$T/s1.after")"

# 3. The stripe is back: everything reads back, fsck is clean.
mv "$T/marker.away" "$S1/kvfs-stripe"
"$KVFS" fsck "$STORE" --verify-data >"$T/fsck" 2>&1 || fail "fsck after the degraded mount: $(cat "$T/fsck")"
mount_kvfs -o ram_cache=0
$PAGETOOL verify "$MNT/m/00" old 12 70000 || fail "old pages after the stripe came back"
$PAGETOOL verify "$MNT/m/00" new 10 70000 || fail "new pages after the stripe came back"
umount_kvfs

# 4. Eviction on a degraded mount takes only pages of the stripes that are
# there: the missing stripe's pages wait for it.
mv "$S1/kvfs-stripe" "$T/marker.away"
mount_kvfs -o degraded,ram_cache=0
"$KVFS" gc "$MNT" --target-size 0 -q >"$T/gc" 2>&1 || fail "gc on a degraded mount: $(cat "$T/gc")"
umount_kvfs
mv "$T/marker.away" "$S1/kvfs-stripe"
mount_kvfs -o ram_cache=0
while read -r n stripe; do
	if [ "$stripe" = stripe=1 ]; then
		$PAGETOOL content "$n" 70000 | cmp -s - "$MNT/m/00/$n" || fail "$n on the missing stripe was evicted"
	else
		[ ! -e "$MNT/m/00/$n" ] || fail "gc --target-size 0 left $n"
	fi
done <"$T/where"
umount_kvfs
"$KVFS" fsck "$STORE" --verify-data >"$T/fsck" 2>&1 || fail "fsck after the degraded gc: $(cat "$T/fsck")"
no_errors_in_log "stripe missing|read failed: Input\/output error|no kvfs-stripe marker"
echo PASS
