#!/usr/bin/env bash
# Refusals at the edges, each of which once went through silently:
#  1. a time past 2262 (or before 1677) does not fit int64 nanoseconds:
#     utimensat fails with EOVERFLOW and changes nothing (it used to wrap);
#  2. mkfs --capacity below the 1M minimum is refused, naming the minimum,
#     and leaves nothing behind that would refuse the next mkfs;
#  3. mounting onto the store directory, a stripe directory or inside
#     either is refused with a message saying so;
#  4. mounting a store that does not exist names the store, not its log;
#  5. fsck escapes control characters of page names in its problem lines
#     (plain and --json), so a crafted name cannot drive the terminal.
. "$(dirname "$0")/lib.sh"

# 2. mkfs --capacity 1K
if "$KVFS" mkfs "$STORE" --capacity 1K >"$T/out" 2>&1; then fail "mkfs --capacity 1K accepted"; fi
grep -q "minimum of 1048576 bytes (1M)" "$T/out" || fail "mkfs refusal does not name the minimum: $(cat "$T/out")"
[ ! -e "$STORE" ] || fail "a refused mkfs left $STORE behind: $(find "$STORE")"
"$KVFS" mkfs "$STORE" --capacity 1M >"$T/out" 2>&1 || fail "mkfs --capacity 1M after a refused one: $(cat "$T/out")"
rm -rf "$STORE"

S1=$T/s1
mkfs --stripe "$T/s0" --stripe "$S1"

# 4. a store that does not exist
if "$KVFS" mount "$T/nostore" "$MNT" >"$T/out" 2>&1; then fail "mounting a missing store succeeded"; fi
grep -q "cannot open store $T/nostore: No such file or directory" "$T/out" || fail "missing store not named: $(cat "$T/out")"
grep -q "kvfs.log" "$T/out" && fail "the message names the log, not the store: $(cat "$T/out")"

# 3. onto the store or a stripe, or inside them
mkdir -p "$STORE/sub" "$S1/sub"
for m in "$STORE" "$STORE/sub" "$S1" "$S1/sub"; do
	if "$KVFS" mount "$STORE" "$m" >"$T/out" 2>&1; then
		fusermount3 -u "$m" 2>/dev/null || true
		fail "mounted onto $m"
	fi
	grep -q "cannot mount at $m: it is" "$T/out" || fail "refusal at $m unclear: $(cat "$T/out")"
	is_mounted "$m" && fail "$m is mounted after the refusal"
done
rmdir "$STORE/sub" "$S1/sub"

# 1. times outside int64 nanoseconds
mount_kvfs
mkdir -p "$MNT/m/00"
printf 'page' >"$MNT/m/00/p"
python3 - "$MNT/m/00/p" "$MNT/m" <<'PY' || fail "times outside 1677..2262"
import errno, os, sys
for path in sys.argv[1:]:
    os.utime(path, ns=(1_500_000_000 * 10**9, 1_600_000_000 * 10**9))
    for t in (2**63 // 10**9 + 1, 10**10, -(2**63 // 10**9) - 2):   # 2262.., 2286, 1677..
        try:
            os.utime(path, (t, t))
            sys.exit(f'{path}: utime to {t} s succeeded: mtime now {os.stat(path).st_mtime_ns}')
        except OSError as e:
            if e.errno != errno.EOVERFLOW:
                sys.exit(f'{path}: utime to {t} s: {e}, want EOVERFLOW')
    st = os.stat(path)
    if (st.st_atime_ns, st.st_mtime_ns) != (1_500_000_000 * 10**9, 1_600_000_000 * 10**9):
        sys.exit(f'{path}: a refused utime changed the times: {st}')
    # the limits themselves fit
    os.utime(path, ns=(2**63 - 1, -2**63))
    st = os.stat(path)
    if (st.st_atime_ns, st.st_mtime_ns) != (2**63 - 1, -2**63):
        sys.exit(f'{path}: extreme times read back as {st.st_atime_ns}, {st.st_mtime_ns}')
PY

# 5. a page whose name holds an escape sequence and a newline
name=$(printf 'esc\033[2Jx\nname')
printf 'payload' >"$MNT/m/00/$name" || fail "creating a page with control characters in its name"
umount_kvfs
python3 - "$STORE/kvfs.db" <<'PY' || fail "planting a dangling row"
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
db.execute("PRAGMA foreign_keys = OFF")
n = db.execute("UPDATE pages SET extent_id = 999999 WHERE name = ?", ('esc\033[2Jx\nname',)).rowcount
db.commit()
sys.exit(0 if n == 1 else f'{n} rows')
PY
"$KVFS" fsck "$STORE" -n >"$T/fsck" 2>&1 && fail "fsck found nothing"
grep -q 'esc\\x1b\[2Jx\\x0aname' "$T/fsck" || fail "fsck does not print the escaped name: $(cat -v "$T/fsck")"
LC_ALL=C grep -q $'\033' "$T/fsck" && fail "fsck printed a raw escape: $(cat -v "$T/fsck")"
"$KVFS" fsck "$STORE" -n --json >"$T/json" 2>"$T/jsonerr" && fail "fsck --json found nothing"
python3 -c 'import json, sys; json.load(open(sys.argv[1]))' "$T/json" || fail "fsck --json output: $(cat -v "$T/json")"
grep -q 'esc\\x1b\[2Jx\\x0aname' "$T/jsonerr" || fail "fsck --json problem lines: $(cat -v "$T/jsonerr")"
LC_ALL=C grep -q $'\033' "$T/json" "$T/jsonerr" && fail "fsck --json printed a raw escape"
rc=0; "$KVFS" fsck "$STORE" --repair >"$T/fsck" 2>&1 || rc=$?
[ $rc = 1 ] || fail "fsck --repair exited $rc: $(cat -v "$T/fsck")"
LC_ALL=C grep -q $'\033' "$T/fsck" && fail "fsck --repair printed a raw escape: $(cat -v "$T/fsck")"
"$KVFS" fsck "$STORE" --verify-data >"$T/fsck" 2>&1 || fail "fsck after the repair: $(cat -v "$T/fsck")"
mount_kvfs
[ "$(cat "$MNT/m/00/p")" = page ] || fail "the other page after the repair"
umount_kvfs
echo PASS
