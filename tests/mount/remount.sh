#!/usr/bin/env bash
# Pages survive a clean unmount and remount bit-exact; deletions persist;
# space of deleted pages is given back; the mount root keeps its mode and
# owner.
. "$(dirname "$0")/lib.sh"

mkfs --segment-size 4M
mount_kvfs
# The mount root's mode and owner, as an operator who lets users make
# models sets them, last across mounts (its times are each mount's).
chmod 1777 "$MNT" && chown 65534:65534 "$MNT" || fail "chmod/chown of the mount root"
umount_kvfs
mount_kvfs
[ "$(stat -c '%a %u %g' "$MNT")" = "1777 65534 65534" ] ||
	fail "mount root after a remount: $(stat -c '%a %u %g' "$MNT") (want 1777 65534 65534)"
chmod 755 "$MNT" && chown 0:0 "$MNT" || fail "chmod/chown of the mount root back"
mkdir -p "$MNT/m/00" "$MNT/m/01"
$PAGETOOL write "$MNT/m/00" p 300 0 || fail "writing varied-size pages"
$PAGETOOL write "$MNT/m/01" q 100 65536 || fail "writing 64 KiB pages"
for i in $(seq 0 2 98); do rm "$MNT/m/01/q$(printf %06d "$i")"; done
# Space comes back once the deletion is committed: fsync of a directory waits for that.
python3 -c "import os; fd=os.open('$MNT', os.O_RDONLY); os.fsync(fd)"
used_before=$(df -B1 --output=used "$MNT" | tail -1 | tr -d ' ')
umount_kvfs

mount_kvfs
[ "$($PAGETOOL verify "$MNT/m/00" p 300 0)" = 300 ] || fail "varied pages after remount"
[ "$($PAGETOOL verify "$MNT/m/01" q 100 65536 --missing-ok)" = 50 ] || fail "deleted pages came back"
# Pages keep their create mode (pagetool: 0644 & ~umask) across the
# remount: the row keeps the mode.
modes=$(stat -c %a "$MNT"/m/00/* | sort -u)
[ "$modes" = "$(printf '%o' $((0644 & ~$(umask))))" ] || fail "page modes after remount: $modes (want the create mode)"
used_after=$(df -B1 --output=used "$MNT" | tail -1 | tr -d ' ')
[ "$used_before" = "$used_after" ] || fail "df used changed across remount: $used_before -> $used_after"
# Deleting everything returns the space and removes the segment files.
rm -r "$MNT/m"
python3 -c "import os; fd=os.open('$MNT', os.O_RDONLY); os.fsync(fd)"
[ "$(df -B1 --output=used "$MNT" | tail -1 | tr -d ' ')" = 0 ] || fail "space not returned after rm -r"
umount_kvfs
# At most the open tail segment remains, and it holds no blocks.
[ "$(ls "$STORE/stripe0" | grep -c '^seg-')" -le 1 ] || fail "segment files left: $(ls -l "$STORE/stripe0")"
for f in "$STORE"/stripe0/seg-*; do
	[ ! -e "$f" ] || [ "$(stat -c %b "$f")" = 0 ] || fail "$f still holds blocks"
done

# SIGTERM (systemd stop, Ctrl-C): the daemon unmounts and commits what is
# pending before it exits, fsync or not.
mount_kvfs
mkdir -p "$MNT/t/00"
$PAGETOOL write "$MNT/t/00" s 200 4096 || fail "writes before SIGTERM"
kill -TERM "$DPID"
rc=0; wait "$DPID" || rc=$?
DPID=
[ $rc -eq 0 ] || fail "daemon exited with $rc on SIGTERM"
is_mounted "$MNT" && fail "still mounted after SIGTERM"
mount_kvfs
[ "$($PAGETOOL verify "$MNT/t/00" s 200 4096)" = 200 ] || fail "pages lost across SIGTERM"
umount_kvfs

# A copy of a stopped store (backup, restore, migration) is a store of its
# own: it uses its own stripe0, and pages written to it do not touch the
# original's segment files (nor does its recovery reclaim the original's).
cp -a "$STORE" "$T/copy"
ORIG=$STORE; STORE=$T/copy
mount_kvfs
[ "$($PAGETOOL verify "$MNT/t/00" s 200 4096)" = 200 ] || fail "pages of the copy"
$PAGETOOL write "$MNT/t/00" c 50 4096 || fail "writes to the copy"
getfattr --only-values -n user.kvfs.segment "$MNT/t/00/c000001" | grep -q "^$T/copy/stripe0/" ||
	fail "the copy writes elsewhere: $(getfattr --only-values -n user.kvfs.segment "$MNT/t/00/c000001")"
umount_kvfs
STORE=$ORIG
"$KVFS" fsck --verify-data "$STORE" >"$T/fsck.out" || fail "original after the copy was used: $(cat "$T/fsck.out")"
"$KVFS" fsck --verify-data "$T/copy" >"$T/fsck.out" || fail "the copy: $(cat "$T/fsck.out")"
no_errors_in_log
echo PASS
