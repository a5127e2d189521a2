#!/usr/bin/env bash
# Store-level errors: a segment size the index cannot record, a full
# store, a newer manifest schema, a busy mountpoint, a missing store; unlink
# of a page that is still open.
. "$(dirname "$0")/lib.sh"
command -v sqlite3 >/dev/null || skip "sqlite3 is not installed (apt-get install sqlite3)"

# Segment files of at most 512 GiB: the index packs extent locations.
"$KVFS" mkfs "$T/seg-big" --segment-size 513G >/dev/null 2>"$T/seg.err" &&
	fail "mkfs took a 513 GiB segment size"
grep -q "512 GiB" "$T/seg.err" || fail "mkfs did not say why: $(cat "$T/seg.err")"
"$KVFS" mkfs "$T/seg-max" --segment-size 512G >/dev/null || fail "mkfs refused 512 GiB segments"

mkfs --capacity 1M
# Cache mode (the default): the older page makes room for the newer one.
mount_kvfs
mkdir -p "$MNT/m/00"
head -c 700000 /dev/urandom > "$T/big"
cp "$T/big" "$MNT/m/00/old" || fail "first page"
cp "$T/big" "$MNT/m/00/new" || fail "cache mode refused a page it could make room for"
[ ! -e "$MNT/m/00/old" ] || fail "the least recently used page was not evicted"
cmp "$T/big" "$MNT/m/00/new" || fail "the new page reads back wrong"
rm "$MNT/m/00/new"
umount_kvfs
# Authoritative mode: a full store refuses, and loses nothing.
mount_kvfs -o authoritative
mkdir -p "$MNT/m/00"
head -c 700000 /dev/urandom > "$T/big"
cp "$T/big" "$MNT/m/00/a" || fail "first page"
cp "$T/big" "$MNT/m/00/b" 2>"$T/err" && fail "store over capacity accepted a page"
grep -q "No space left on device" "$T/err" || fail "ENOSPC message: $(cat "$T/err")"
grep -q "store full" "$LOG" || fail "no log line for ENOSPC"
[ ! -e "$MNT/m/00/b" ] || sleep 0.2
cmp "$T/big" "$MNT/m/00/a" || fail "existing page damaged by ENOSPC"

# Mounting again on a busy mountpoint is refused with an explanation.
out=$("$KVFS" mount "$STORE" "$MNT" 2>&1) && fail "double mount succeeded"
grep -q "already a mount point" <<<"$out" || fail "busy mountpoint: $out"

# The same store on a second mountpoint: one daemon per store.
mkdir -p "$T/mnt2"
out=$("$KVFS" mount "$STORE" "$T/mnt2" -f 2>&1) && fail "a second daemon opened the store"
grep -q "in use by another kvfs daemon (pid $DPID)" <<<"$out" || fail "second daemon message: $out"
is_mounted "$T/mnt2" && fail "second mount appeared"
# ... even after the lock file is deleted: the store directory itself is locked.
rm -f "$STORE/kvfs.lock"
CLEANUP_HOOK='fusermount3 -u -z "$T/mnt2" 2>/dev/null'
out=$(timeout 10 "$KVFS" mount "$STORE" "$T/mnt2" -f 2>&1) && fail "a second daemon opened the store once kvfs.lock was deleted"
is_mounted "$T/mnt2" && fail "a second daemon mounted the store once kvfs.lock was deleted"
grep -q "in use by another kvfs daemon" <<<"$out" || fail "second daemon message without kvfs.lock: $out"
is_mounted "$T/mnt2" && fail "second mount appeared without kvfs.lock"
out=$("$KVFS" fsck "$STORE" 2>&1) && fail "fsck ran on a mounted store without kvfs.lock"
grep -q "in use" <<<"$out" || fail "fsck message without kvfs.lock: $out"

# Unlink while open: the reader keeps its bytes, the space returns after close.
python3 - "$MNT/m/00/a" "$T/big" <<'PY' || fail "unlink while open"
import os, sys
f = open(sys.argv[1], "rb")
os.unlink(sys.argv[1])
assert not os.path.exists(sys.argv[1])
assert f.read() == open(sys.argv[2], "rb").read()
f.close()
PY
# RELEASE of the reader's last close and the delete's commit are both
# asynchronous: give them a moment (fsync of the layer waits for the commit).
python3 -c 'import os, sys; fd = os.open(sys.argv[1], os.O_RDONLY); os.fsync(fd)' "$MNT/m/00"
for _ in $(seq 50); do
	cp "$T/big" "$MNT/m/00/c" 2>/dev/null && break
	rm -f "$MNT/m/00/c"
	sleep 0.1
done
cmp -s "$T/big" "$MNT/m/00/c" || fail "space of the unlinked page was not returned within 5 s"
umount_kvfs

# A manifest from a newer kvfs is refused with a message.
sqlite3 "$STORE/kvfs.db" "PRAGMA user_version=99; UPDATE meta SET value='99' WHERE key='schema_version';"
out=$("$KVFS" mount "$STORE" "$MNT" -f 2>&1) && fail "newer schema mounted"
grep -qi "schema" <<<"$out" || fail "schema refusal message: $out"
is_mounted "$MNT" && fail "mounted anyway"

# Not a store at all.
out=$("$KVFS" mount "$T/nowhere" "$MNT" -f 2>&1) && fail "mounted a missing store"
grep -q "cannot open store" <<<"$out" || fail "missing store message: $out"
echo PASS
