#!/usr/bin/env bash
# A model with geometry enforces its page size with clear errors.
. "$(dirname "$0")/lib.sh"
command -v getfattr >/dev/null || skip "getfattr is not installed (apt-get install attr)"

mkfs
mount_kvfs
# 2 (K,V) * 4 tokens * 2 heads * 8 dims * 2 bytes (bf16) = 256 bytes a page
"$KVFS" model create "$MNT/tiny" --layers 3 --kv-heads 2 --head-dim 8 --dtype bf16 --page-tokens 4 >/dev/null || fail "model create"
[ "$(ls "$MNT/tiny" | tr '\n' ' ')" = "00 01 02 " ] || fail "layer dirs: $(ls "$MNT/tiny")"
[ "$(getfattr --absolute-names --only-values -n user.kvfs.page_bytes "$MNT/tiny")" = 256 ] || fail "page_bytes xattr"
getfattr --absolute-names --only-values -n user.kvfs.geometry "$MNT/tiny" | grep -q 'layers=3 kv_heads=2 head_dim=8 dtype=bf16 page_tokens=4' || fail "geometry xattr"
"$KVFS" model list "$MNT" | grep -q '^tiny .*layers=3' || fail "model list"

head -c 256 /dev/urandom > "$T/ok"
cp "$T/ok" "$MNT/tiny/00/good" || fail "right-sized page refused"
head -c 100 /dev/urandom > "$T/short"
cp "$T/short" "$MNT/tiny/00/short" 2>"$T/err" && fail "short page accepted"
grep -q "Invalid argument" "$T/err" || fail "short page error: $(cat "$T/err")"
sleep 0.2
[ ! -e "$MNT/tiny/00/short" ] || fail "short page is visible"
head -c 300 /dev/urandom > "$T/long"
cp "$T/long" "$MNT/tiny/00/long" 2>"$T/err" && fail "long page accepted"
grep -q "File too large" "$T/err" || fail "long page error: $(cat "$T/err")"
sleep 0.2
[ ! -e "$MNT/tiny/00/long" ] || fail "a page whose write failed was stored truncated"
# Same with several writes, the first ones accepted: nothing is stored.
dd if=/dev/urandom of="$MNT/tiny/00/dd" bs=64 count=5 2>"$T/err" && fail "dd past the page size succeeded"
sleep 0.2
[ ! -e "$MNT/tiny/00/dd" ] || fail "truncated page from dd was stored"
grep -q "model geometry" "$LOG" || fail "no log line naming the geometry"
expect_errno EINVAL "os.mkdir('$MNT/tiny/03')"
# mv of a wrong-size page into the model: EXDEV, so mv copies, the copy's
# close reports the size, and the source stays (not "a subdirectory of
# itself", mv's words for EINVAL).
mkdir -p "$MNT/plain/00"
cp "$T/short" "$MNT/plain/00/p" || fail "page in a model without geometry"
expect_errno EXDEV "os.rename('$MNT/plain/00/p', '$MNT/tiny/00/p')"
mv "$MNT/plain/00/p" "$MNT/tiny/00/p" 2>"$T/err" && fail "mv of a wrong-size page succeeded"
grep -q "subdirectory of itself" "$T/err" && fail "mv: $(cat "$T/err")"
grep -q "Invalid argument" "$T/err" || fail "mv of a short page: $(cat "$T/err")"
cmp "$T/short" "$MNT/plain/00/p" || fail "the source of a refused mv changed"
sleep 0.2
[ ! -e "$MNT/tiny/00/p" ] || fail "a refused mv left a page behind"
# Geometry cannot change under existing pages.
expect_errno ENOTEMPTY "os.setxattr('$MNT/tiny', 'user.kvfs.geometry', b'layers=3 kv_heads=1 head_dim=8 dtype=bf16 page_tokens=4')"
expect_errno EINVAL "os.setxattr('$MNT/tiny', 'user.kvfs.geometry', b'layers=3 dtype=nope')"
# Anyone can write wrong-sized pages at will: their log lines are
# rate-limited (each once made three lines per page, without a limit).
python3 - "$MNT/tiny/00" <<'PY' || fail "wrong-sized pages in a loop"
import os, sys
for i in range(300):
    fd = os.open(os.path.join(sys.argv[1], f"flood{i}"), os.O_CREAT | os.O_WRONLY, 0o644)
    os.write(fd, b"x")
    try:
        os.close(fd)
    except OSError:
        pass
PY
lines=$(grep -cE "flood[0-9]+|discarded at close" "$LOG" || true)
[ "$lines" -lt 300 ] || fail "300 wrong-sized pages logged $lines lines"
[ "$lines" -ge 1 ] || fail "wrong-sized pages logged nothing"
# So are bad geometries, layer names and pin values; and a name cannot
# forge a log line (a newline and a timestamp) or send terminal escapes.
python3 - "$MNT" <<'PY' || fail "refused requests in a loop"
import errno, os, sys
mnt = sys.argv[1]
forged = "\n2026-01-01T00:00:00.000Z kvfs[1]: error: FORGED\x1b[31m"
for i in range(300):
    for call in (lambda: os.setxattr(f"{mnt}/plain", "user.kvfs.geometry", b"bad%d" % i),
                 lambda: os.mkdir(f"{mnt}/plain/{forged}{i}"),
                 lambda: os.setxattr(f"{mnt}/tiny/00/good", "user.kvfs.pinned", b"2")):
        try:
            call()
            sys.exit("a refused request succeeded")
        except OSError as e:
            if e.errno not in (errno.EINVAL, errno.EPERM):
                raise
PY
lines=$(grep -cE 'geometry "bad|FORGED|user.kvfs.pinned "2"' "$LOG" || true)
[ "$lines" -lt 300 ] || fail "900 refused requests logged $lines lines"
[ "$lines" -ge 3 ] || fail "refused requests logged $lines lines, not each kind"
grep -q "^2026-01-01T00:00:00.000Z kvfs\[1\]" "$LOG" && fail "a page name forged a log line"
grep -q $'\x1b' "$LOG" && fail "a page name put a terminal escape into the log"
grep -qF '\x0a2026-01-01' "$LOG" || fail "the refused name is not in the log, escaped"
umount_kvfs
mount_kvfs
[ "$(getfattr --absolute-names --only-values -n user.kvfs.page_bytes "$MNT/tiny")" = 256 ] || fail "geometry lost on remount"
cmp "$T/ok" "$MNT/tiny/00/good" || fail "page after remount"
# A cp -a round trip keeps the geometry: cp sets the model's attributes
# after copying its pages, which all have the page size.
cp -a "$MNT/tiny" "$T/tiny-out" && cp -a "$T/tiny-out" "$MNT/tinycopy" || fail "cp -a of a model"
getfattr --absolute-names --only-values -n user.kvfs.geometry "$MNT/tinycopy" |
	grep -q 'layers=3 kv_heads=2 head_dim=8 dtype=bf16 page_tokens=4' ||
	fail "a cp -a copy of a model lost its geometry"
cmp "$T/ok" "$MNT/tinycopy/00/good" || fail "page of the cp -a copy"
python3 -c "
with open('$MNT/tinycopy/00/wrong', 'wb') as f:
    f.write(b'x' * 100)" 2>/dev/null && fail "the copy took a page of the wrong size"
[ ! -e "$MNT/tinycopy/00/wrong" ] || fail "a page of the wrong size was stored in the copy"
umount_kvfs
echo PASS
