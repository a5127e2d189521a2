#!/usr/bin/env bash
# Ordinary tools on a mounted store: cp, cat, ls, stat, du, df, getfattr,
# find, mv, rm, shell redirection; and the errors kvfs promises.
. "$(dirname "$0")/lib.sh"
command -v getfattr >/dev/null || skip "getfattr is not installed (apt-get install attr)"

mkfs
mount_kvfs
M=$MNT/llama3-8b
mkdir "$M" "$M/00" "$M/01" || fail "mkdir model and layers"
head -c 65536 /dev/urandom > "$T/page.bin"

cp "$T/page.bin" "$M/00/blk-a" || fail "cp into a layer"
cmp "$T/page.bin" "$M/00/blk-a" || fail "cat differs from what cp wrote"
[ "$(stat -c %s "$M/00/blk-a")" = 65536 ] || fail "stat size"
# The seal makes the bytes immutable, not the mode: cp's create mode stays.
[ "$(stat -c %a "$M/00/blk-a")" = "$(printf '%o' $((0666 & ~$(umask))))" ] ||
	fail "sealed page mode is $(stat -c %a "$M/00/blk-a"), want the create mode"
ls -l "$M/00" | grep -q -- '^-r.* 1 .* 65536 .* blk-a' || fail "ls -l: $(ls -l "$M/00")"
[ "$(du -k "$M/00/blk-a" | cut -f1)" = 64 ] || fail "du -k: $(du -k "$M/00/blk-a")"
[ "$(find "$MNT" -type f | wc -l)" = 1 ] || fail "find"

# The checksum xattr is the XXH3-128 of the bytes, as xxhsum prints it.
sum=$(getfattr --absolute-names --only-values -n user.kvfs.checksum "$M/00/blk-a")
if command -v xxh128sum >/dev/null; then
	[ "$sum" = "xxh3-128:$(xxh128sum "$T/page.bin" | cut -d' ' -f1)" ] || fail "checksum xattr $sum"
fi
getfattr --absolute-names -d "$M/00/blk-a" | grep -q 'user.kvfs.state="durable"\|user.kvfs.state="sealed"' || fail "state xattr"
getfattr --absolute-names --only-values -n user.kvfs.extent "$M/00/blk-a" | grep -q '^stripe=0 segment=0 offset=[0-9]* length=65536$' || fail "extent xattr"
[ "$(getfattr --absolute-names --only-values -n user.kvfs.refcount "$M/00/blk-a")" = 1 ] || fail "refcount xattr"

# df: the store's capacity and what the page occupies.
used=$(df -B1 --output=used "$MNT" | tail -1 | tr -d ' ')
[ "$used" -ge 65536 ] || fail "df used $used < one page"

# Shell redirection: the first close happens before any byte is written.
echo hello > "$M/00/greeting" || fail "echo > page"
[ "$(cat "$M/00/greeting")" = hello ] || fail "redirected page content"

# Sealed pages are immutable.
expect_errno EPERM "os.open('$M/00/blk-a', os.O_WRONLY)"
expect_errno EPERM "os.open('$M/00/blk-a', os.O_RDONLY | os.O_TRUNC)"
chmod 0640 "$M/00/blk-a" || fail "chmod of a sealed page (metadata may change)"
expect_errno EPERM "os.open('$M/00/blk-a', os.O_WRONLY)"
expect_errno EPERM "os.truncate('$M/00/blk-a', 10)"
# Unsupported object types.
expect_errno EPERM "os.symlink('blk-a', '$M/00/link')"
expect_errno EPERM "os.link('$M/00/blk-a', '$M/00/hard')"
expect_errno EPERM "os.mknod('$M/00/fifo', 0o600 | __import__('stat').S_IFIFO)"
# Pages live in layers; layers are numbers; names have a limit.
expect_errno EPERM "open('$MNT/loose', 'w')"
expect_errno EPERM "open('$M/loose', 'w')"
expect_errno EPERM "os.mkdir('$M/00/sub')"
expect_errno EINVAL "os.mkdir('$M/first')"
expect_errno EEXIST "os.mkdir('$M/000')"
expect_errno ENAMETOOLONG "open('$M/00/' + 'x' * 256, 'w')"
expect_errno ENOTEMPTY "os.rmdir('$M/00')"
expect_errno EISDIR "os.unlink('$M/01')"

# A page being written is not readable by others, and others cannot write it.
python3 - "$M/01" <<'PY' || fail "page being written was accessible"
import errno, os, sys
d = sys.argv[1]
fd = os.open(f"{d}/busy", os.O_CREAT | os.O_WRONLY, 0o644)
os.write(fd, b"x" * 100)
for flags in (os.O_RDONLY, os.O_WRONLY):
    try:
        os.open(f"{d}/busy", flags)
        sys.exit("second open of a page being written succeeded")
    except OSError as e:
        assert e.errno == errno.EBUSY, e
os.close(fd)
with open(f"{d}/busy", "rb") as f:
    assert f.read() == b"x" * 100
PY

# mv: rename within and across layers, and atomic replace (publish).
mv "$M/00/blk-a" "$M/01/blk-b" || fail "mv across layers"
cmp "$T/page.bin" "$M/01/blk-b" || fail "moved page content"
[ ! -e "$M/00/blk-a" ] || fail "old name still there"
cp "$M/00/greeting" "$M/00/tmp.1" && mv "$M/00/tmp.1" "$M/01/blk-b" || fail "mv replace"
[ "$(cat "$M/01/blk-b")" = hello ] || fail "replaced page content"
expect_errno EEXIST "import ctypes; libc=ctypes.CDLL(None, use_errno=True); r=libc.renameat2(-100, b'$M/00/greeting', -100, b'$M/01/blk-b', 1); (_ for _ in ()).throw(OSError(ctypes.get_errno(), 'renameat2')) if r else None"

# rm and rmdir.
rm "$M/01/blk-b" "$M/00/greeting" "$M/01/busy" || fail "rm"
[ -z "$(ls "$M/00" "$M/01" | grep -v : | grep .)" ] || fail "layers not empty after rm: $(ls -R "$M")"
rmdir "$M/01" || fail "rmdir empty layer"
mv "$M" "$MNT/renamed-model" || fail "rename a model"
[ -d "$MNT/renamed-model/00" ] || fail "renamed model lost its layer"

umount_kvfs
no_errors_in_log
echo PASS
