#!/usr/bin/env bash
# -o index_pages=N (index/residency.c): the background load brings at most
# N pages into the daemon's RAM, the most recently changed layers first;
# the other layers stay in the manifest after the load and are loaded the
# first time something needs them. Through the mount nothing tells them
# apart from loaded layers: listings, lookups, reads, writes, unlink,
# rename and rmdir, statfs's inode count, the stats' page count; their
# extents' records leave RAM after the load and come back with them; a
# full store evicts their pages too (least recently used first: evictlru.sh),
# and so does kvfs gc. After the load, layers unused for a few seconds go back
# to the manifest while more pages than N are in RAM (index/unload.c),
# and come back as the ones the load left there: inodes the kernel holds
# still answer, and changes to them are kept.
. "$(dirname "$0")/lib.sh"

# The unloader polls every second, and a layer goes after five polls
# unused: the sections below check what the load leaves, so none goes
# back while they run (the last section sets a short poll).
export KVFS_TEST_UNLOAD_POLL_MS=60000

stat_of() {
	python3 -c 'import json, sys; d = json.load(open(sys.argv[1] + "/.kvfs/stats")); print(d[sys.argv[2]][sys.argv[3]])' "$MNT" "$1" "$2"
}

mkfs --capacity 16M --segment-size 1M
mount_kvfs
mkdir -p "$MNT/m/00" "$MNT/m/01" "$MNT/m/02" "$MNT/m/03"
# Oldest first: 00 is the least recently changed layer.
for l in 00 01 02 03; do
	$PAGETOOL write "$MNT/m/$l" "p$l-" 40 65536 --fsync || fail "writing layer $l"
	sleep 0.05
done
files_before=$(stat -f -c %c "$MNT")
umount_kvfs

# Room for two layers of 40: 03 and 02 are loaded, 01 and 00 are not.
mount_kvfs -o index_pages=90,evict_high=90,evict_low=80
wait_loaded
[ "$(stat_of namespace layers_unloaded)" = 2 ] ||
	fail "layers left in the manifest: $(stat_of namespace layers_unloaded), want 2"
[ "$(stat_of namespace pages_unloaded)" = 80 ] ||
	fail "pages left in the manifest: $(stat_of namespace pages_unloaded), want 80"
[ "$(stat_of ssd pages)" = 160 ] || fail "ssd.pages $(stat_of ssd pages), want all 160"
[ "$(stat -f -c %c "$MNT")" = "$files_before" ] ||
	fail "statfs counts $(stat -f -c %c "$MNT") inodes, $files_before before the budget"
grep -q "80 of the pages, in 2 layers, stay in the manifest" "$LOG" ||
	fail "the log does not say what stayed in the manifest: $(grep 'loaded in the background' "$LOG")"
# Their extents' records left RAM too (each page has its own here).
for _ in $(seq 50); do grep -q "80 extents named only by layers left in the manifest left RAM" "$LOG" && break; sleep 0.1; done
grep -q "80 extents named only by layers left in the manifest left RAM" "$LOG" ||
	fail "the extents of the layers left out are still in RAM: $(grep 'extents named only' "$LOG")"
# A layer left in the manifest still holds its pages (rmdir: ENOTEMPTY),
# and says so from its count of rows: no load into RAM for the answer.
expect_errno ENOTEMPTY "os.rmdir('$MNT/m/01')"
[ "$(stat_of namespace layers_unloaded)" = 2 ] ||
	fail "rmdir of a layer left in the manifest loaded it ($(stat_of namespace layers_unloaded) left out)"
# Listed, looked up and read as a loaded one; a missing name is ENOENT.
[ "$(ls "$MNT/m/01" | wc -l)" = 40 ] || fail "listing of a layer left in the manifest"
[ "$(stat_of namespace layers_unloaded)" = 1 ] || fail "the listing did not load the layer"
[ "$($PAGETOOL verify "$MNT/m/01" p01- 40 65536)" = 40 ] || fail "pages of a layer loaded on demand"
[ -e "$MNT/m/00/nope" ] && fail "a name that is in no row exists"
[ "$(stat_of namespace layers_unloaded)" = 0 ] || fail "a lookup did not load layer 00"
[ "$($PAGETOOL verify "$MNT/m/00" p00- 40 65536)" = 40 ] || fail "pages of layer 00"
umount_kvfs

# Changes to layers left in the manifest: each is loaded first.
mount_kvfs -o index_pages=90
wait_loaded
[ "$(stat_of namespace layers_unloaded)" = 2 ] || fail "(2) layers left in the manifest"
rm "$MNT/m/00/p00-000001" || fail "unlink in a layer left in the manifest"
mv "$MNT/m/00/p00-000002" "$MNT/m/01/moved" || fail "rename across layers left in the manifest"
head -c 5000 /dev/urandom > "$T/new"
cp "$T/new" "$MNT/m/00/new" || fail "a new page into a layer left in the manifest"
umount_kvfs
mount_kvfs -o index_pages=1
wait_loaded
[ -e "$MNT/m/00/p00-000001" ] && fail "an unlinked page is back"
[ -e "$MNT/m/00/p00-000002" ] && fail "a moved page is back under its old name"
cmp "$MNT/m/00/new" "$T/new" || fail "the new page after a remount"
[ "$(ls "$MNT/m/01" | wc -l)" = 41 ] || fail "the moved page in its new layer"
mkdir "$MNT/m/09" && $PAGETOOL write "$MNT/m/09" gone 3 4096 --fsync || fail "a layer to remove"
umount_kvfs
mount_kvfs -o index_pages=1
wait_loaded
rm -r "$MNT/m/09" || fail "rm -r of a layer left in the manifest"
[ -e "$MNT/m/09" ] && fail "a removed layer is still there"
umount_kvfs

# A full store evicts pages of layers left in the manifest: here the
# loaded layers cannot free enough (the new pages are the only ones in
# RAM), so the evictor loads the coldest layer left out.
mount_kvfs -o index_pages=1,evict_high=90,evict_low=80
wait_loaded
mkdir "$MNT/m/04" || fail "mkdir"
$PAGETOOL write "$MNT/m/04" new 80 65536 --fsync ||
	fail "new pages into a full store whose pages are left in the manifest: $(grep -iE 'evict|ENOSPC' "$LOG" | tail -3)"
[ "$($PAGETOOL verify "$MNT/m/04" new 80 65536)" = 80 ] || fail "the new pages"
[ "$(stat_of ssd evictions)" -gt 0 ] || fail "nothing was evicted"
no_errors_in_log
umount_kvfs

# kvfs gc reaches the layers left in the manifest: an age sweep loads
# every one (they are the coldest), and takes their old pages.
mount_kvfs -o index_pages=1
wait_loaded
[ "$(stat_of namespace layers_unloaded)" -gt 0 ] || fail "(gc) no layer left in the manifest"
sleep 1.2
"$KVFS" gc "$MNT" --older-than 1s >/dev/null || fail "kvfs gc --older-than on the mount"
[ "$(stat_of namespace layers_unloaded)" = 0 ] || fail "gc did not reach the layers left in the manifest"
[ "$(stat_of ssd pages)" = 0 ] || fail "gc left $(stat_of ssd pages) pages not read for 1 s"
no_errors_in_log
umount_kvfs

# Layers go back to the manifest after the load: five polls of 100 ms
# unused, while more than 40 pages are in RAM.
in_ram() { echo $(( $(stat_of ssd pages) - $(stat_of namespace pages_unloaded) )); }
wait_unloaded() {   # until at least $1 layers are out of RAM, and at most $2 pages in
	for _ in $(seq "${3:-100}"); do
		[ "$(stat_of namespace layers_unloaded)" -ge "$1" ] && [ "$(in_ram)" -le "$2" ] &&
			return 0
		sleep 0.1
	done
	fail "$(stat_of namespace layers_unloaded) layers went back, want $1; $(in_ram) pages in RAM, want $2"
}
export KVFS_TEST_UNLOAD_POLL_MS=100
mount_kvfs -o index_pages=40
wait_loaded
for l in 05 06 07 08; do
	mkdir "$MNT/m/$l" && $PAGETOOL write "$MNT/m/$l" "u$l-" 30 16384 --fsync ||
		fail "writing layer $l"
done
exec 3< "$MNT/m/05/u05-000001"      # the kernel holds its inode
wait_unloaded 3 40
[ "$(stat_of ssd pages)" = 120 ] || fail "ssd.pages $(stat_of ssd pages), want 120"
grep -q "layer(s) unused for 0.5 s went back to the manifest" "$LOG" ||
	fail "the log does not say what went back: $(grep 'went back' "$LOG")"
# The inode the kernel holds answers (GETATTR by inode alone; a read).
sleep 1.1                           # past the attribute timeout
[ "$(stat -c %s "$MNT/m/05/u05-000001")" = 16384 ] || fail "stat of a page held by the kernel"
[ "$(head -c 16384 <&3 | wc -c)" = 16384 ] || fail "reading an open page whose layer went back"
exec 3<&-
# Every page is there, each layer loaded again by its lookups.
for l in 05 06 07 08; do
	[ "$($PAGETOOL verify "$MNT/m/$l" "u$l-" 30 16384)" = 30 ] || fail "pages of layer $l"
done
# Changes to layers that went back: they come back first. (The pages
# just read stay until the access-time flush: layers count as gone.)
wait_unloaded 3 120
rm "$MNT/m/06/u06-000001" || fail "unlink in a layer that went back"
mv "$MNT/m/07/u07-000002" "$MNT/m/08/moved" || fail "rename across layers that went back"
chmod 0400 "$MNT/m/05/u05-000003" || fail "chmod in a layer that went back"
head -c 5000 /dev/urandom > "$T/new2"
cp "$T/new2" "$MNT/m/06/new" || fail "a new page into a layer that went back"
sync -f "$MNT/m/06/new" 2>/dev/null || sync
# Once the access times are saved (every 30 s), the pages read go too.
wait_unloaded 3 40 600
no_errors_in_log
umount_kvfs
mount_kvfs -o index_pages=1
wait_loaded
[ -e "$MNT/m/06/u06-000001" ] && fail "an unlinked page is back"
[ -e "$MNT/m/07/u07-000002" ] && fail "a moved page is back under its old name"
[ -e "$MNT/m/08/moved" ] || fail "the moved page is missing"
[ "$(stat -c %a "$MNT/m/05/u05-000003")" = 400 ] || fail "the chmod was lost"
cmp "$MNT/m/06/new" "$T/new2" || fail "the new page after a remount"
umount_kvfs

# The engine tells the index what each layer waits for (engine/commit.c):
# with every manifest commit failing, a chmod in a layer that went back
# loads it, and it stays in RAM while the change is not in the manifest
# (going back would reload the old mode from the rows); once the commits
# land it goes again, and the change survives a remount.
mount_kvfs -o index_pages=1,fault_injection
wait_loaded
wait_unloaded 4 1
fault() { python3 -c 'import os,sys; os.setxattr(sys.argv[1], "user.kvfs.fault", sys.argv[2].encode())' "$MNT" "$1"; }
fault "manifest commit 1 EIO 100000" ||
	fail "arming the manifest fault"
chmod 0600 "$MNT/m/08/u08-000003" || fail "chmod with the committer failing"
sleep 2                             # 20 polls, each layer idle after 5
[ "$(stat_of namespace layers_unloaded)" = 3 ] ||
	fail "$(stat_of namespace layers_unloaded) layers out of RAM while a change to one is not committed, want 3"
[ "$(stat -c %a "$MNT/m/08/u08-000003")" = 600 ] || fail "the chmod reads back wrong"
fault off || fail "disarming the manifest fault"
wait_unloaded 4 1
umount_kvfs
mount_kvfs -o index_pages=1
wait_loaded
[ "$(stat -c %a "$MNT/m/08/u08-000003")" = 600 ] || fail "the chmod made while commits failed was lost"
umount_kvfs
"$KVFS" fsck "$STORE" >/dev/null || fail "fsck: $("$KVFS" fsck "$STORE" 2>&1)"
echo "PASS: index budget"
