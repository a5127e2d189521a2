#!/bin/bash
# Everyday tools round-trip a model through the mount with bytes, modes and
# mtimes intact: rsync -a in, cp -a out and back in, tar c and tar x (with
# an empty member), touch; find -newer, stat and directory mtimes behave as
# on ext4; all of it survives a remount.
. "$(dirname "$0")/lib.sh"
CMP="python3 $(dirname "$0")/treecmp.py"
for t in rsync tar cp find touch; do
	command -v $t >/dev/null || skip "$t is not installed (tools/setup.sh installs it)"
done

# The source: a model on the local disk, pages of several modes and times,
# an empty page, layer directories with their own times.
SRC=$T/src
mkdir -p "$SRC/m/00" "$SRC/m/01"
for i in 1 2 3; do
	head -c $((i * 40000)) /dev/urandom > "$SRC/m/00/page$i"
	head -c 65536 /dev/urandom > "$SRC/m/01/page$i"
done
: > "$SRC/m/00/empty"
chmod 640 "$SRC/m/00/page1"; chmod 600 "$SRC/m/01/page2"; chmod 444 "$SRC/m/01/page3"
touch -d '2020-02-03 04:05:06.123456789' "$SRC/m/00/page1" "$SRC/m/00/empty"
touch -d '2019-01-01 00:00:00' "$SRC/m/01/page2"
chmod 750 "$SRC/m/01"
touch -d '2021-05-05 05:05:05.5' "$SRC/m/00" "$SRC/m/01"

mkfs
mount_kvfs

# rsync -a in: exit 0, everything as in the source.
rsync -a "$SRC/m/" "$MNT/m/" || fail "rsync -a into the mount exited $?"
$CMP "$SRC/m" "$MNT/m" || fail "rsync -a: the mount differs from the source"

# cp -a out and back in (under another model name).
cp -a "$MNT/m" "$T/out" || fail "cp -a out of the mount"
$CMP "$SRC/m" "$T/out" || fail "cp -a out: the copy differs from the source"
cp -a "$T/out" "$MNT/m2" || fail "cp -a into the mount"
$CMP "$SRC/m" "$MNT/m2" || fail "cp -a in: the mount differs from the source"

# tar c from the mount, tar x into it (the archive holds an empty member;
# the pax format keeps nanoseconds).
tar -C "$MNT" --format=posix -cf "$T/m.tar" m || fail "tar c of the mount"
tar -tvf "$T/m.tar" | grep ' 0 .* m/00/empty$' >/dev/null || fail "the archive lacks the empty member"
tar -C "$MNT" --transform 's,^m,m3,' -xpf "$T/m.tar" || fail "tar x into the mount"
$CMP "$SRC/m" "$MNT/m3" || fail "tar x: the mount differs from the source"
mkdir "$T/untar"
tar -C "$T/untar" -xpf "$T/m.tar" || fail "tar x of the mount's archive"
$CMP "$SRC/m" "$T/untar/m" || fail "tar c: the archive differs from the source"

# touch: a new empty page, and times of an existing one.
touch "$MNT/m/00/new-empty" || fail "touch of a new page"
[ -f "$MNT/m/00/new-empty" ] && [ "$(stat -c %s "$MNT/m/00/new-empty")" = 0 ] ||
	fail "touch did not leave an empty page"
touch -m -d '2018-08-08 08:08:08' "$MNT/m/00/page2" || fail "touch -m of a sealed page"
[ "$(stat -c %Y "$MNT/m/00/page2")" = "$(date -d '2018-08-08 08:08:08' +%s)" ] ||
	fail "touch -m did not set the mtime"

# find -newer and directory mtimes, as on ext4. The reference is an ext4
# file, whose times are the clock's coarse tick (up to 4 ms behind), while
# the daemon's are exact: a page touched less than a tick before the
# reference can read as newer than it. So the pause before it too.
sleep 0.05; touch "$T/ref"; sleep 0.05
before=$(stat -c %Y.%y "$MNT/m/01")
head -c 100 /dev/urandom > "$MNT/m/01/fresh"
[ "$(find "$MNT" -newer "$T/ref" -type f)" = "$MNT/m/01/fresh" ] ||
	fail "find -newer: $(find "$MNT" -newer "$T/ref" -type f)"
[ "$(stat -c %Y.%y "$MNT/m/01")" != "$before" ] || fail "creating a page left its directory's mtime"
[ -n "$(find "$MNT/m" -maxdepth 1 -newer "$T/ref" -name 01)" ] ||
	fail "find -newer does not see the changed layer directory"
rm "$MNT/m/01/fresh"

# Everything persists across a remount.
umount_kvfs
mount_kvfs
for m in m2 m3; do
	$CMP "$SRC/m" "$MNT/$m" || fail "$m after a remount differs from the source"
done
[ -f "$MNT/m/00/new-empty" ] || fail "the empty page touch made is gone after a remount"
[ "$(stat -c %Y "$MNT/m/00/page2")" = "$(date -d '2018-08-08 08:08:08' +%s)" ] ||
	fail "touch -m did not survive a remount"
umount_kvfs
"$KVFS" fsck "$STORE" >/dev/null || fail "fsck after the tools"
no_errors_in_log
echo "PASS: rsync -a, cp -a, tar c/x, touch, find -newer"
