#!/usr/bin/env bash
# A flipped byte in a segment file gives EIO and a log line, never wrong
# bytes; other pages keep working.
. "$(dirname "$0")/lib.sh"
command -v getfattr >/dev/null || skip "getfattr is not installed (apt-get install attr)"

mkfs
mount_kvfs
mkdir -p "$MNT/m/00"
$PAGETOOL write "$MNT/m/00" p 10 100000 || fail "write"
ext=$(getfattr --absolute-names --only-values -n user.kvfs.extent "$MNT/m/00/p000003")
umount_kvfs

seg=$(echo "$ext" | sed -E 's/.*segment=([0-9]+).*/\1/')
off=$(echo "$ext" | sed -E 's/.*offset=([0-9]+).*/\1/')
file=$(printf '%s/stripe0/seg-%08d' "$STORE" "$seg")
python3 - "$file" $((off + 4242)) <<'PY'
import sys
with open(sys.argv[1], "r+b") as f:
    f.seek(int(sys.argv[2])); b = f.read(1); f.seek(int(sys.argv[2]))
    f.write(bytes([b[0] ^ 0x40]))
PY

mount_kvfs
expect_errno EIO "open('$MNT/m/00/p000003', 'rb').read()"
grep -q "checksum mismatch" "$LOG" || fail "no checksum log line"
n=$($PAGETOOL verify "$MNT/m/00" p 3 100000) && [ "$n" = 3 ] || fail "other pages"
umount_kvfs
echo PASS
