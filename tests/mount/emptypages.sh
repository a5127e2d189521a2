#!/bin/bash
# Every page costs at least one 4 KiB block of the capacity, an empty one
# too (engine/page.c kvfs_store_usage): 10,000 empty files in a 16 MiB
# cache leave at most 4,096, evicted least recently used first; an
# authoritative store refuses the create that would not fit (ENOSPC); the
# count survives a remount with the layer left in the manifest.
. "$(dirname "$0")/lib.sh"
EPY="python3 $(dirname "$0")/emptypages.py"
CAP=$((16 << 20))

mkfs --capacity 16M
mount_kvfs
mkdir -p "$MNT/m/0" "$MNT/m/1" || fail "mkdir"
$EPY data "$MNT" || fail "root's data pages"
read -r made refused < <($EPY flood "$MNT" m/1 10000) || fail "the flood"
echo "cache mode: $made empty pages created, $refused refused"
[ "$made" -eq 10000 ] || fail "a cache refused $refused empty pages: it should evict"
# the evictor runs behind the creates: give it a moment to settle
for _ in $(seq 50); do
	$EPY check "$MNT" $CAP >/dev/null 2>&1 && break
	sleep 0.2
done
$EPY check "$MNT" $CAP || fail "10,000 empty pages in a 16 MiB cache"
$EPY room "$MNT" || fail "root's 4 MiB write after the flood"
before=$($EPY count "$MNT")
umount_kvfs

# Layers left in the manifest count their empty rows too.
mount_kvfs -o index_pages=1
wait_loaded
after=$($EPY count "$MNT")
[ "$after" = "$before" ] || fail "after a remount with the layer in the manifest: $after empty pages counted, $before before"
ls "$MNT/m/1" >/dev/null        # loads the layer: its rows become pages
$EPY check "$MNT" $CAP || fail "after loading the layer"
umount_kvfs

# Authoritative: the create that does not fit gets ENOSPC, and an unlink
# gives its block back.
mount_kvfs -o authoritative
mkdir "$MNT/m/2" || fail "mkdir"
read -r made refused < <($EPY flood "$MNT" m/2 5000) || fail "the authoritative flood"
echo "authoritative: $made empty pages created, $refused refused"
[ "$refused" -gt 0 ] || fail "an authoritative store of 16 MiB took 5,000 more empty pages"
grep -q "no room for the 4096-byte block a new page" "$LOG" || fail "the refusal is not logged"
first=$(ls "$MNT/m/2" | head -1)
rm "$MNT/m/2/$first" || fail "unlink"
touch "$MNT/m/2/again" || fail "a create after an unlink gave a block back"
umount_kvfs
no_errors_in_log "no room for the 4096-byte block"
echo "PASS"
