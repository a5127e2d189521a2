#!/usr/bin/env bash
# An unprivileged caller abuses the fast path (fastabuse.py): huge calls,
# floods of calls and regions, punched regions, malformed calls. The
# daemon's peak memory and its log stay within bounds, refusals are
# counted, and root is still served.
. "$(dirname "$0")/lib.sh"

mkfs
chmod 755 "$T"    # uid 65534 reaches the mount
mount_kvfs -o allow_other,max_page=1M,ram_cache=0   # reads go to the device
mkdir -p "$MNT/m/0" || fail "mkdir"
chmod 777 "$MNT/m" "$MNT/m/0"
head -c 65536 /dev/urandom > "$T/page"
cp "$T/page" "$MNT/m/0/page" || fail "cp page"
# Under a sanitizer RSS counts shadow memory and quarantine: not checked.
rss=check
if grep -q 'libasan\|libtsan' "/proc/$DPID/maps" 2>/dev/null; then rss=skip; fi
python3 "$(dirname "$0")/fastabuse.py" "$MNT" "$LOG" "$DPID" "$rss" || fail "fast-path abuse"
refused=$(awk '$1 == "kvfs_fast_refused_total" { print $2 }' "$MNT/.kvfs/metrics")
[ "${refused:-0}" -gt 1000 ] || fail "kvfs_fast_refused_total is ${refused:-missing} after a flood of refusals"
# The executor weighs each uid's CPU (unit executor checks how) when it
# can lower a raised nice again: root with CAP_SYS_NICE. A container
# without it must say so in the log, not silently.
w=$(awk '$1 == "kvfs_fast_uid_weighting" { print $2 }' "$MNT/.kvfs/metrics")
case "$w" in
1) ;;
0) grep -q "executor thread cannot lower its nice" "$LOG" ||
	fail "kvfs_fast_uid_weighting is 0 and the log does not say why" ;;
*) fail "kvfs_fast_uid_weighting is ${w:-missing}" ;;
esac
cmp "$T/page" "$MNT/m/0/page" || fail "page changed"
umount_kvfs
echo PASS
