#!/usr/bin/env bash
# A damaged manifest never acknowledges what it cannot keep: a damaged
# b-tree page refuses the mount (quick_check) and fsck --rebuild restores
# the store; once the committer sees corruption every change is refused
# with EIO, and an unmount that had to drop changes exits non-zero.
. "$(dirname "$0")/lib.sh"
command -v sqlite3 >/dev/null || skip "sqlite3 is not installed (apt-get install sqlite3)"
command -v setfattr >/dev/null || skip "setfattr is not installed (apt-get install attr)"

# ---- 1. corruption seen by the committer ----
mkfs
mount_kvfs -o fault_injection
mkdir -p "$MNT/m/00"
$PAGETOOL write "$MNT/m/00" p 20 30000 --fsync >/dev/null || fail "write"
setfattr -n user.kvfs.fault -v "manifest commit 1 CORRUPT 1000" "$MNT" || fail "arming the fault"
expect_errno EIO "fd = os.open('$MNT/m/00/late', os.O_CREAT | os.O_WRONLY, 0o644); os.write(fd, b'x' * 5000); os.fsync(fd)"
grep -q "refusing every change" "$LOG" || fail "no log line saying changes are refused"
expect_errno EIO "open('$MNT/m/00/after', 'wb').write(b'y')"
expect_errno EIO "os.unlink('$MNT/m/00/p000001')"
expect_errno EIO "os.mkdir('$MNT/m/01')"
n=$($PAGETOOL verify "$MNT/m/00" p 20 30000) && [ "$n" = 20 ] || fail "reads while changes are refused"
rc=0; "$KVFS" umount "$MNT" 2>"$T/umount.err" || rc=$?
[ $rc -ne 0 ] || fail "kvfs umount exited 0 after the daemon dropped changes"
grep -q "without committing" "$T/umount.err" || fail "umount did not say what was lost: $(cat "$T/umount.err")"
rc=0; wait "$DPID" || rc=$?; DPID=
[ $rc -ne 0 ] || fail "the daemon exited 0 after dropping changes"
rc=0; "$KVFS" fsck "$STORE" >"$T/fsck.out" 2>&1 || rc=$?
[ $rc -le 4 ] || { cat "$T/fsck.out"; fail "fsck after the lost changes exited $rc"; }
cat "$T/fsck.out" >&2
mount_kvfs
n=$($PAGETOOL verify "$MNT/m/00" p 20 30000) && [ "$n" = 20 ] || fail "acknowledged pages after the remount"
umount_kvfs

# ---- 2. a damaged index page: -o eager_load refuses the mount; by
# default the background load finds it and every change is refused ----
root=$(sqlite3 "$STORE/kvfs.db" "SELECT rootpage FROM sqlite_master WHERE name = 'pages_extent'")
psize=$(sqlite3 "$STORE/kvfs.db" "PRAGMA page_size")
[ -n "$root" ] && [ "$root" -gt 1 ] || fail "no pages_extent index"
python3 - "$STORE/kvfs.db" $(((root - 1) * psize)) "$psize" <<'PY'
import sys
with open(sys.argv[1], "r+b") as f:
    f.seek(int(sys.argv[2]))
    f.write(b"\x00\xff" * (int(sys.argv[3]) // 2))
PY
: >"$LOG"
out=$(timeout 20 "$KVFS" mount "$STORE" "$MNT" -f -o eager_load 2>&1) && fail "a manifest with a damaged index page mounted"
is_mounted "$MNT" && fail "mounted anyway"
grep -q "quick_check" <<<"$out" || fail "the refusal does not say what is damaged: $out"
grep -q "kvfs fsck --rebuild" <<<"$out" || fail "the refusal does not name the way out: $out"
: >"$LOG"
mount_kvfs
wait_loaded
expect_errno EIO "os.mkdir('$MNT/m/01')"
expect_errno EIO "open('$MNT/m/00/after', 'wb').write(b'y')"
grep -q "malformed\|quick_check" "$LOG" || fail "the log does not say what is damaged"
grep -q "kvfs fsck --rebuild" "$LOG" || fail "the log does not name the way out"
umount_kvfs
rc=0; "$KVFS" fsck --rebuild "$STORE" >"$T/fsck.out" 2>&1 || rc=$?
[ $rc -eq 1 ] || { cat "$T/fsck.out"; fail "fsck --rebuild exited $rc"; }
mount_kvfs
n=$($PAGETOOL verify "$MNT/m/00" p 20 30000) && [ "$n" = 20 ] || fail "pages after the rebuild"
umount_kvfs
"$KVFS" fsck --verify-data "$STORE" >/dev/null || fail "fsck after the rebuild"
echo PASS
