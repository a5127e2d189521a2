#!/usr/bin/env bash
# Eviction is least recently used first across the layers left in the
# manifest too (-o index_pages, engine/capacity.c evict_lru): a full store
# evicts pages not used for years from layers that went back to the
# manifest before it takes a page just written. The index keeps each such
# layer's oldest access time; the evictor loads the layer holding the
# oldest before it takes anything newer from RAM, and pinned pages go
# after every other page, wherever it is.
. "$(dirname "$0")/lib.sh"
export KVFS_TEST_UNLOAD_POLL_MS=100   # layers go back after 0.5 s unused

stat_of() {
	python3 -c 'import json, sys; d = json.load(open(sys.argv[1] + "/.kvfs/stats")); print(d[sys.argv[2]][sys.argv[3]])' "$MNT" "$1" "$2"
}
in_ram() { echo $(( $(stat_of ssd pages) - $(stat_of namespace pages_unloaded) )); }

mkfs --capacity 16M --segment-size 1M
mount_kvfs -o index_pages=50
wait_loaded
# 100 old pages in 20 layers, not read since 2000.
for l in $(seq -w 0 19); do
	mkdir -p "$MNT/old/$l" && $PAGETOOL write "$MNT/old/$l" "o$l-" 5 65536 --fsync ||
		fail "writing layer old/$l"
done
touch -a -d 2000-01-01 "$MNT"/old/*/* || fail "touch -a"
# Five older still, but pinned: they go after every unpinned page, those
# left in the manifest too.
mkdir -p "$MNT/pin/00" && $PAGETOOL write "$MNT/pin/00" "p-" 5 65536 --fsync ||
	fail "writing the pinned pages"
touch -a -d 1990-01-01 "$MNT"/pin/00/* || fail "touch -a"
for p in "$MNT"/pin/00/*; do setfattr -n user.kvfs.pinned -v 1 "$p" || fail "pinning $p"; done
sync -f "$MNT/old/00" 2>/dev/null || sync
# Most of them go back to the manifest (more than 50 pages were in RAM).
for _ in $(seq 100); do
	[ "$(in_ram)" -le 50 ] && [ "$(stat_of namespace layers_unloaded)" -ge 10 ] && break
	sleep 0.1
done
[ "$(in_ram)" -le 50 ] || fail "$(in_ram) pages in RAM after the old layers went idle, want <= 50"
# 200 new pages fill the store past its capacity: 300 x 64 KiB > 16 MiB.
mkdir -p "$MNT/new/00"
$PAGETOOL write "$MNT/new/00" "n-" 200 65536 --fsync || fail "writing the new pages"
evicted=$(stat_of ssd evictions 2>/dev/null || echo "?")
new_left=$(ls "$MNT/new/00" | wc -l)
old_left=$(ls "$MNT"/old/*/ | grep -c '^o')
echo "evicted $evicted; new pages left $new_left of 200, old $old_left of 100"
[ "$old_left" -lt 100 ] || fail "nothing old was evicted (the store did not fill?)"
[ "$new_left" = 200 ] ||
	fail "$((200 - new_left)) pages just written were evicted while $old_left pages unused since 2000 stayed"
[ "$($PAGETOOL verify "$MNT/new/00" "n-" 200 65536)" = 200 ] || fail "the new pages read back wrong"
[ "$(ls "$MNT/pin/00" | wc -l)" = 5 ] ||
	fail "$((5 - $(ls "$MNT/pin/00" | wc -l))) pinned pages were evicted while $old_left unpinned old ones stayed"
no_errors_in_log
umount_kvfs
"$KVFS" fsck "$STORE" >/dev/null || fail "fsck: $("$KVFS" fsck "$STORE" 2>&1)"
echo "PASS: eviction takes the least recently used pages, in the manifest too"
