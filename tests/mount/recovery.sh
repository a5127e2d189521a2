#!/usr/bin/env bash
# A page's identity is bound to its row, and the store survives the loss of
# its manifest: a renamed row never serves another page's bytes; a deleted
# or truncated kvfs.db is rebuilt from kvfs.journal with every durable page
# bit-exact; a kvfs.db-wal deleted after a crash loses nothing.
. "$(dirname "$0")/lib.sh"
command -v sqlite3 >/dev/null || skip "sqlite3 is not installed (apt-get install sqlite3)"

# Every file under the mount: relative path, mode, size, sha256 (sorted).
snapshot() {
	python3 - "$MNT" <<'PY'
import hashlib, os, stat, sys
root = sys.argv[1]
for d, _, files in sorted(os.walk(root)):
    if "/.kvfs" in d + "/" or d.endswith("/.kvfs"):
        continue
    for f in sorted(files):
        p = os.path.join(d, f)
        st = os.stat(p)
        h = hashlib.sha256(open(p, "rb").read()).hexdigest()
        print(os.path.relpath(p, root), oct(stat.S_IMODE(st.st_mode)), st.st_size, h)
PY
}

# The mount must be refused: the daemon exits non-zero and nothing mounts.
# 1 if it mounted instead (the cleanup trap unmounts it).
mount_refused() {
	"$KVFS" mount "$STORE" "$MNT" -f "$@" 2>>"$LOG" &
	DPID=$!
	for _ in $(seq 100); do
		is_mounted "$MNT" && return 1
		if ! kill -0 "$DPID" 2>/dev/null; then
			local rc=0
			wait "$DPID" || rc=$?
			DPID=
			[ $rc -ne 0 ]
			return
		fi
		sleep 0.1
	done
	return 1
}

# ---- 1. a row renamed outside kvfs is refused, never served ----
# -o eager_load checks every row before the mount answers: it refuses the
# mount. By default the mount answers first, and the layer holding the row
# is never served: its lookups and listing fail (EIO), as every change does.
mkfs
mount_kvfs
mkdir -p "$MNT/m/00"
head -c 65536 /dev/urandom > "$T/a"; head -c 65536 /dev/urandom > "$T/b"
cp "$T/a" "$MNT/m/00/alpha111"; cp "$T/b" "$MNT/m/00/alpha222"
sync "$MNT/m/00/alpha111" "$MNT/m/00/alpha222"
umount_kvfs
sqlite3 "$STORE/kvfs.db" "UPDATE pages SET name = 'alpha999' WHERE name = 'alpha111'" ||
	fail "editing the row"
: >"$LOG"
if ! mount_refused -o eager_load; then
	cmp -s "$MNT/m/00/alpha999" "$T/a" && fail "alpha999 served alpha111's bytes"
	fail "a store with a renamed row mounted with -o eager_load"
fi
grep -q "column ident does not match the row" "$LOG" || fail "no log line naming the identity check"
: >"$LOG"
mount_kvfs
expect_errno EIO "os.stat('$MNT/m/00/alpha999')"
expect_errno EIO "os.listdir('$MNT/m/00')"
wait_loaded
expect_errno EIO "os.mkdir('$MNT/m/01')"
grep -q "column ident does not match the row" "$LOG" || fail "no log line naming the identity check (background load)"
grep -q "refusing every change" "$LOG" || fail "no log line saying changes are refused"
umount_kvfs
rc=0; "$KVFS" fsck "$STORE" >"$T/fsck.out" 2>&1 || rc=$?
[ $rc -eq 4 ] || { cat "$T/fsck.out"; fail "fsck of the renamed row exited $rc, not 4"; }
grep -q "m/00/alpha999 (ino [0-9]*): its identity check fails" "$T/fsck.out" ||
	{ cat "$T/fsck.out"; fail "fsck did not name the page"; }
rc=0; "$KVFS" fsck --repair "$STORE" >"$T/fsck.out" 2>&1 || rc=$?
[ $rc -eq 1 ] || { cat "$T/fsck.out"; fail "fsck --repair exited $rc, not 1"; }
"$KVFS" fsck "$STORE" >/dev/null || fail "fsck after the repair is not clean"
mount_kvfs
[ -e "$MNT/m/00/alpha999" ] && fail "the damaged row's page is still served"
cmp -s "$MNT/m/00/alpha222" "$T/b" || fail "the other page changed"
umount_kvfs

# ---- 2. kvfs.db deleted: rebuilt from the journal, bit-exact ----
rm -rf "$STORE"; mkfs
mount_kvfs
"$KVFS" model create "$MNT/geo" --layers 2 --kv-heads 1 --head-dim 64 --dtype f16 \
	--page-tokens 16 >/dev/null || fail "model create"
mkdir -p "$MNT/m/00" "$MNT/m/01" "$MNT/geo/00"
$PAGETOOL write "$MNT/m/00" p 60 20000 --fsync >/dev/null || fail "write layer 00"
$PAGETOOL write "$MNT/m/01" q 40 70000 >/dev/null || fail "write layer 01"
head -c 4096 /dev/urandom > "$MNT/geo/00/g1"
cp "$MNT/m/00/p000001" "$MNT/m/01/dup"          # a shared extent (dedup)
rm "$MNT/m/00/p000002" "$MNT/m/01/q000003"      # deletes stay deleted
head -c 5000 /dev/urandom > "$MNT/m/00/tmp.x"; mv "$MNT/m/00/tmp.x" "$MNT/m/00/final"
touch "$MNT/m/00/empty"                          # an empty page
chmod 0640 "$MNT/m/00/p000004"
sync -f "$MNT/m/00/final"
umount_kvfs
mount_kvfs; snapshot >"$T/before"; umount_kvfs
[ "$(wc -l <"$T/before")" -ge 100 ] || fail "too few pages written"

rm -f "$STORE"/kvfs.db "$STORE"/kvfs.db-wal "$STORE"/kvfs.db-shm
: >"$LOG"
mount_refused || fail "mounted without a manifest"
grep -q "kvfs fsck --rebuild $STORE" "$LOG" || fail "mount does not name the recovery path"
rc=0; "$KVFS" fsck "$STORE" >"$T/fsck.out" 2>&1 || rc=$?
[ $rc -eq 4 ] || { cat "$T/fsck.out"; fail "fsck without kvfs.db exited $rc, not 4"; }
grep -q -- "--rebuild" "$T/fsck.out" || fail "fsck does not name --rebuild"
rc=0; "$KVFS" fsck --rebuild "$STORE" >"$T/fsck.out" 2>&1 || rc=$?
[ $rc -eq 1 ] || { cat "$T/fsck.out"; fail "fsck --rebuild exited $rc, not 1"; }
"$KVFS" fsck --verify-data "$STORE" >"$T/fsck.out" || { cat "$T/fsck.out"; fail "not clean after the rebuild"; }
mount_kvfs; snapshot >"$T/after"
diff "$T/before" "$T/after" >&2 || fail "the rebuilt store differs"
# the model's geometry came back: a page of the wrong size is refused there
expect_errno EXDEV "os.rename('$MNT/m/00/p000001', '$MNT/geo/00/p000001')"
umount_kvfs

# ---- 3. kvfs.db truncated: fsck --repair rebuilds it ----
truncate -s 0 "$STORE/kvfs.db"; rm -f "$STORE/kvfs.db-wal" "$STORE/kvfs.db-shm"
rc=0; "$KVFS" fsck --repair "$STORE" >"$T/fsck.out" 2>&1 || rc=$?
[ $rc -eq 1 ] || { cat "$T/fsck.out"; fail "fsck --repair of a truncated kvfs.db exited $rc"; }
ls "$STORE"/kvfs.db.damaged-* >/dev/null 2>&1 || fail "the old manifest was not kept aside"
mount_kvfs; snapshot >"$T/after"
diff "$T/before" "$T/after" >&2 || fail "the store rebuilt after truncation differs"
umount_kvfs

# ---- 4. kvfs.db-wal deleted after a crash: nothing fsync'ed is lost ----
mount_kvfs
mkdir -p "$MNT/w/00"
$PAGETOOL write "$MNT/w/00" s 50 30000 --fsync >/dev/null || fail "write before the crash"
rm "$MNT/m/01/q000004"; sync -f "$MNT/w/00/s000001"
snapshot >"$T/before"
kill -9 "$DPID"; wait "$DPID" 2>/dev/null || true; DPID=
fusermount3 -u "$MNT" 2>/dev/null || fusermount3 -u -z "$MNT" || true
[ -s "$STORE/kvfs.db-wal" ] || skip "SQLite checkpointed the WAL before the crash; nothing to lose"
rm -f "$STORE/kvfs.db-wal" "$STORE/kvfs.db-shm"
: >"$LOG"
mount_kvfs
grep -q "MANIFEST WAS BEHIND ITS JOURNAL" "$LOG" || fail "mount did not say that the manifest lost commits"
snapshot >"$T/after"
diff "$T/before" "$T/after" >&2 || fail "pages fsync'ed before the crash were lost with the WAL"
umount_kvfs
"$KVFS" fsck --verify-data "$STORE" >/dev/null || fail "fsck after the roll-forward"

# ---- 5. a torn journal tail is dropped, the store mounts ----
head -c 3000 /dev/urandom >>"$STORE/kvfs.journal"
: >"$LOG"
mount_kvfs
grep -q "torn or damaged; dropped" "$LOG" || fail "the torn tail was not reported"
n=$($PAGETOOL verify "$MNT/w/00" s 50 30000) && [ "$n" = 50 ] || fail "pages after a torn journal"
umount_kvfs

# ---- 6. damage before the journal's last batch ----
# A mount reads the journal from its last committed batch on (meta
# journal_at), so it neither reads nor notices damage in the snapshot; fsck
# reads it whole, says so, and --repair writes the journal anew.
python3 - "$STORE/kvfs.journal" <<'PY' || fail "damaging the journal"
import struct, sys
with open(sys.argv[1], 'r+b') as f:
    hlen = struct.unpack_from('<Q', f.read(32), 16)[0]
    off = 32 + hlen + 32 + 4          # into the first frame after the header
    f.seek(off)
    b = f.read(1)
    f.seek(off)
    f.write(bytes([b[0] ^ 0x5a]))
PY
: >"$LOG"
mount_kvfs
n=$($PAGETOOL verify "$MNT/w/00" s 50 30000) && [ "$n" = 50 ] || fail "pages with a damaged journal snapshot"
umount_kvfs
rc=0; "$KVFS" fsck "$STORE" >"$T/fsck.out" 2>&1 || rc=$?
[ $rc -eq 4 ] || { cat "$T/fsck.out"; fail "fsck of a damaged journal exited $rc, not 4"; }
grep -q "journal: kvfs.journal is damaged" "$T/fsck.out" || { cat "$T/fsck.out"; fail "fsck did not name the journal"; }
rc=0; "$KVFS" fsck --repair "$STORE" >"$T/fsck.out" 2>&1 || rc=$?
[ $rc -eq 1 ] || { cat "$T/fsck.out"; fail "fsck --repair of the journal exited $rc, not 1"; }
"$KVFS" fsck "$STORE" >"$T/fsck.out" 2>&1 || { cat "$T/fsck.out"; fail "fsck after the journal was written anew"; }
echo PASS
