#!/usr/bin/env bash
# A mount answers before its index is loaded (the background load,
# engine/loading.c): layers not loaded yet are listed, looked up and read
# whole; new pages are taken at once, through FUSE and the fast path, and
# survive a crash before the load ends; so are changes to pages already
# there (unlink, rm -r, a rename over a page, a fast-path REPLACE), mkdir
# and renames, and what they free comes back once the load ends (the store
# counts no extent the index does not hold); a store full at the mount
# evicts to take new pages. A manifest that the
# background load finds damaged keeps serving reads and refuses changes
# (EIO), where -o eager_load refuses the mount. KVFS_TEST_LOAD_PAUSE_MS
# holds the walk back, so the test sees a mount that is not loaded yet.
. "$(dirname "$0")/lib.sh"

loading() {
	python3 -c 'import json, sys; print(json.load(open(sys.argv[1] + "/.kvfs/stats"))["namespace"]["loading"])' "$MNT"
}

mkfs --segment-size 4M
mount_kvfs
mkdir -p "$MNT/m/00" "$MNT/m/01"
$PAGETOOL write "$MNT/m/00" p 300 0 || fail "writing varied-size pages"
$PAGETOOL write "$MNT/m/01" q 200 65536 || fail "writing 64 KiB pages"
mkdir "$MNT/m/03"
$PAGETOOL write "$MNT/m/03" r 50 4096 || fail "writing a third layer"
mkdir "$MNT/m/04"
$PAGETOOL write "$MNT/m/04" s 20 4096 || fail "writing a layer to remove"
[ "$(loading)" = 0 ] || fail "a fresh store is still loading"
umount_kvfs

# (1) Before the load: everything reads as from a whole index.
KVFS_TEST_LOAD_PAUSE_MS=15000 mount_kvfs
[ "$(loading)" = 1 ] || fail "the load was not held back: this test would prove nothing"
"$KVFS" stat "$MNT" | grep -q "^index *loading in the background" ||
	fail "kvfs stat does not say the index is loading: $("$KVFS" stat "$MNT")"
[ "$(ls "$MNT/m" | tr '\n' ' ')" = "00 01 03 04 " ] || fail "layers: $(ls "$MNT/m")"
[ "$(ls "$MNT/m/01" | wc -l)" = 200 ] || fail "listing of a layer not loaded: $(ls "$MNT/m/01" | wc -l) names"
[ "$($PAGETOOL verify "$MNT/m/00" p 300 0)" = 300 ] || fail "pages of a layer not loaded"
[ "$($PAGETOOL verify "$MNT/m/01" q 200 65536)" = 200 ] || fail "64 KiB pages before the load"
[ -e "$MNT/m/00/nope" ] && fail "a name that is in no row exists"
[ "$(loading)" = 1 ] || fail "reads waited for the load (or it ended early): the rest proves nothing"
# A new page through FUSE goes ahead, and so do removals: the layer is
# loaded first (one not loaded yet only looks empty).
head -c 7000 /dev/urandom > "$T/fnew"
cp "$T/fnew" "$MNT/m/00/fnew" || fail "a new page through FUSE while loading"
cmp "$T/fnew" "$MNT/m/00/fnew" || fail "the page written through FUSE while loading"
rm "$MNT/m/00/p000001" || fail "unlink while loading"
[ -e "$MNT/m/00/p000001" ] && fail "a page unlinked while loading is still there"
cp "$MNT/m/00/p000006" "$T/p6" || fail "reading a page to rename over another"
mv "$MNT/m/00/p000006" "$MNT/m/00/p000007" || fail "a rename over a page while loading"
cmp "$T/p6" "$MNT/m/00/p000007" || fail "the page renamed over another while loading"
expect_errno ENOTEMPTY "os.rmdir('$MNT/m/04')"
rm -r "$MNT/m/04" || fail "rm -r of a layer while loading"
[ -e "$MNT/m/04" ] && fail "a layer removed while loading is still there"
# A move that replaces nothing touches no extent: it goes ahead, within a
# layer and across layers, for a new page and for pages the snapshot of
# the load holds (its walk must not bring them back under the old name).
cp "$MNT/m/00/p000004" "$T/p4" && cp "$MNT/m/00/p000005" "$T/p5" || fail "reading pages to move"
mv "$MNT/m/00/fnew" "$MNT/m/00/fnew2" || fail "rename of a new page while loading"
mv "$MNT/m/00/p000004" "$MNT/m/00/moved4" || fail "rename within a layer while loading"
mv "$MNT/m/00/p000005" "$MNT/m/01/moved5" || fail "rename across layers while loading"
mkdir "$MNT/m/02" || fail "mkdir while loading"
# So do times, modes and a new model's geometry: they touch no extent.
touch -d @1000000000 "$MNT/m/00/p000002" || fail "touch while loading"
[ "$(stat -c %Y "$MNT/m/00/p000002")" = 1000000000 ] || fail "the time set while loading"
chmod 0600 "$MNT/m/00/p000003" || fail "chmod while loading"
"$KVFS" model create "$MNT/g" --layers 2 --kv-heads 1 --head-dim 64 --dtype f16 \
	--page-tokens 16 >/dev/null || fail "kvfs model create while loading"
[ "$(loading)" = 1 ] || fail "a refused change waited for the load (or it ended early)"
# Fast path: a new page is stored (durably) at once; a name that a layer
# not loaded yet holds in the manifest is EEXIST (the layer is loaded
# first); a REPLACE goes ahead too.
python3 - "$MNT" "$(dirname "$0")" "$T/fast" <<'PY' > "$T/fastout" || fail "fast-path writes while loading: $(cat "$T/fastout")"
import errno, json, mmap, os, sys
sys.path.insert(0, sys.argv[2])
import kvfsabi as abi
mnt = sys.argv[1]
def loading():
    return json.load(open(mnt + '/.kvfs/stats'))['namespace']['loading']
dfd = os.open(os.path.join(mnt, 'm'), os.O_RDONLY | os.O_DIRECTORY)
fd = abi.memfd(1 << 20)
mem = mmap.mmap(fd, 1 << 20)
rid, _ = abi.register(dfd, fd)
data = os.urandom(5000)
mem[65536:65536 + len(data)] = data
open(sys.argv[3], 'wb').write(data)
d = abi.Desc(layer=0, name=b'new', dst_off=65536, dst_len=len(data))
taken = abi.Desc(layer=3, name=b'r000005', dst_off=65536, dst_len=len(data))
abi.place(mem, [d, taken], 0, 32768)
res = abi.batch(dfd, abi.WRITE, rid, 0, 2, flags=abi.WRITE_DURABLE)
abi.collect(mem, [d, taken], 0)
assert d.status == 0, d.status
assert taken.status == -errno.EEXIST, taken.status
first = loading()
rep = abi.Desc(layer=0, name=b'p000010', dst_off=65536, dst_len=len(data))
abi.place(mem, [rep], 0, 32768)
res = abi.batch(dfd, abi.WRITE, rid, 0, 1, flags=abi.WRITE_REPLACE)
abi.collect(mem, [rep], 0)
assert res['done'] == 1 and rep.status == 0, (res, rep.status)
print(first, loading())
PY
[ "$(cat "$T/fastout")" = "1 1" ] ||
	fail "a new page or a REPLACE waited for the load (loading after each: $(cat "$T/fastout"))"
cmp "$T/fast" "$MNT/m/00/new" || fail "the page written while loading"
cmp "$T/fast" "$MNT/m/00/p000010" || fail "the page replaced while loading"
wait_loaded
# The extents of the removed pages were retired, marked at the reclaim and
# freed: the store holds exactly the extents the index does.
stats_ssd_extents() {
	python3 -c 'import json, sys; print(json.load(open(sys.argv[1] + "/.kvfs/stats"))["ssd"]["extents"])' "$MNT"
}
line=$(grep -o "loaded in the background: [0-9]* pages, [0-9]* extents" "$LOG" | tail -1) ||
	fail "no log line for the load: $(grep -i load "$LOG")"
set -- $line
[ "$5" = 550 ] || fail "pages after the load: $line (570 + 2 new - 22 removed)"
[ "$(stats_ssd_extents)" = "$7" ] ||
	fail "the store holds $(stats_ssd_extents) extents, the index $7: removed pages' space was not returned"
[ "$($PAGETOOL verify "$MNT/m/03" r 50 4096)" = 50 ] || fail "the layer loaded for a write"
head -c 5000 /dev/urandom > "$T/new2"
cp "$T/new2" "$MNT/m/02/new2" || fail "a write after the load"
cmp "$T/new2" "$MNT/m/02/new2" || fail "the page written after the load"
rm "$MNT/m/01/q000007" || fail "unlink after the load"
python3 -c 'import json, sys; v = json.load(open(sys.argv[1] + "/.kvfs/stats"))["namespace"]["load_ms"]; sys.exit(0 if v >= 15000 else 1)' "$MNT" ||
	fail "load_ms does not count the held-back load"
no_errors_in_log
umount_kvfs
"$KVFS" fsck "$STORE" >/dev/null || fail "fsck after a mount that loaded in the background"
mount_kvfs
[ "$(stat -c %Y "$MNT/m/00/p000002")" = 1000000000 ] || fail "the time set while loading, after a remount"
[ "$(stat -c %a "$MNT/m/00/p000003")" = 600 ] || fail "the mode set while loading, after a remount"
getfattr --absolute-names --only-values -n user.kvfs.geometry "$MNT/g" | grep -q 'dtype=f16' ||
	fail "the geometry set while loading, after a remount"
cmp "$T/fnew" "$MNT/m/00/fnew2" || fail "the FUSE page written and renamed while loading, after a remount"
cmp "$T/p4" "$MNT/m/00/moved4" || fail "a page renamed while loading, after a remount"
cmp "$T/p5" "$MNT/m/01/moved5" || fail "a page moved across layers while loading, after a remount"
[ -e "$MNT/m/00/p000004" ] || [ -e "$MNT/m/00/p000005" ] && fail "a renamed page is back under its old name"
[ -e "$MNT/m/00/p000001" ] || [ -e "$MNT/m/00/p000006" ] || [ -e "$MNT/m/04" ] &&
	fail "a page or layer removed while loading is back after a remount"
cmp "$T/p6" "$MNT/m/00/p000007" || fail "the page renamed over another while loading, after a remount"
cmp "$T/fast" "$MNT/m/00/new" || fail "the fast-path page written while loading, after a remount"
umount_kvfs

# (1b) New pages made durable while loading survive a crash before the
# load ends, and a page removed before them stays removed; the next
# mount's reclaim keeps the pages and fsck finds the store clean.
KVFS_TEST_LOAD_PAUSE_MS=15000 mount_kvfs
[ "$(loading)" = 1 ] || fail "the load was not held back (1b)"
[ "$(ls "$MNT/m/01" | wc -l)" = 200 ] || fail "layer 01 before (1b): $(ls "$MNT/m/01" | wc -l) names"
rm "$MNT/m/01/q000003" || fail "unlink while loading (1b)"
$PAGETOOL write "$MNT/m/02" crash 40 65536 --fsync || fail "fsync'ed pages while loading"
[ "$(loading)" = 1 ] || fail "the writes waited for the load (1b)"
kill -9 "$DPID"
wait "$DPID" 2>/dev/null || true
DPID=
fusermount3 -u -z "$MNT"
# The removed page's bytes are still in the file (a free before the
# reclaim only records it): orphaned space, as after any crash between a
# delete and its punch, and nothing else; the next mount returns it.
out=$("$KVFS" fsck "$STORE" 2>&1) ||
	! echo "$out" | grep -v '^kvfs fsck: ' | grep -v '(orphaned space)$' >/dev/null ||
	fail "fsck after a crash while loading: $out"
mount_kvfs
wait_loaded
[ "$($PAGETOOL verify "$MNT/m/02" crash 40 65536)" = 40 ] || fail "pages fsync'ed while loading, after a crash"
[ "$($PAGETOOL verify "$MNT/m/03" r 50 4096)" = 50 ] || fail "the older pages after a crash while loading"
cmp "$T/fnew" "$MNT/m/00/fnew2" || fail "a page written while loading, after a crash in the next load"
[ -e "$MNT/m/01/q000003" ] && fail "a page removed before fsync'ed writes is back after a crash"
[ "$(ls "$MNT/m/01" | wc -l)" = 199 ] || fail "layer 01 after a crash: $(ls "$MNT/m/01" | wc -l) names"
umount_kvfs
"$KVFS" fsck "$STORE" >/dev/null || fail "fsck after the mount that followed the crash: $("$KVFS" fsck "$STORE" 2>&1)"

# (2) A refcount that disagrees with the pages: found by the background
# load, after the mount answered.
python3 - "$STORE/kvfs.db" <<'PY' || fail "damaging the manifest"
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
db.execute("UPDATE extents SET refcount = refcount + 1 WHERE id = (SELECT max(id) FROM extents)")
db.commit()
PY
mount_kvfs
wait_loaded
[ "$($PAGETOOL verify "$MNT/m/03" r 50 4096)" = 50 ] || fail "reads of a damaged store"
expect_errno EIO "os.open('$MNT/m/00/after', os.O_CREAT | os.O_WRONLY, 0o644)"
expect_errno EIO "os.unlink('$MNT/m/00/p000002')"
grep -q "refcount" "$LOG" || fail "the log does not say what is damaged"
grep -q "refusing every change" "$LOG" || fail "the log does not say changes are refused"
umount_kvfs
# -o eager_load checks before it answers: the mount is refused.
rc=0; "$KVFS" mount "$STORE" "$MNT" -f -o eager_load 2>>"$LOG" || rc=$?
[ $rc -ne 0 ] || fail "-o eager_load mounted a damaged manifest"
is_mounted "$MNT" && fail "mounted after all"

# (3) A store full at the mount takes new pages while its index loads:
# eviction picks its victims in the layers loaded whole, and what they
# free counts at once. It used to wait for the end of the load. Most of
# the store (layer 02) is not loaded, more than the low mark, so eviction
# frees only what writers need (least recently used first), rather than
# every page it may take, the new ones included.
STORE=$T/store-full
LOG=$T/daemon-full.log
mkfs --capacity 8M --segment-size 1M
mount_kvfs
mkdir -p "$MNT/m/00" "$MNT/m/01" "$MNT/m/02"
$PAGETOOL write "$MNT/m/00" old 20 65536 --fsync || fail "filling layer 00"
$PAGETOOL write "$MNT/m/02" cold 90 65536 --fsync || fail "filling layer 02"
umount_kvfs
KVFS_TEST_LOAD_PAUSE_MS=20000 mount_kvfs -o evict_high=60,evict_low=50
[ "$(loading)" = 1 ] || fail "the load was not held back (3)"
ls "$MNT/m/00" >/dev/null    # its layer is whole now: its pages may go
$PAGETOOL write "$MNT/m/01" new 10 65536 --fsync || fail "new pages that fit, while loading"
sleep 1                      # an evictor run behind the writers
[ "$(ls "$MNT/m/00" | wc -l)" = 20 ] ||
	fail "pages were evicted though the new ones fitted: $(ls "$MNT/m/00" | wc -l) of 20 left"
$PAGETOOL write "$MNT/m/01" more 20 65536 --fsync || fail "new pages into a full store while loading"
[ "$(loading)" = 1 ] || fail "new pages into a full store waited for the load"
[ "$($PAGETOOL verify "$MNT/m/01" new 10 65536)" = 10 ] || fail "the first new pages were evicted: $(grep -c "evicted page" "$LOG") evictions, $(grep "evicted page" "$LOG" | head -3)"
[ "$($PAGETOOL verify "$MNT/m/01" more 20 65536)" = 20 ] || fail "the new pages, while loading"
n=$(ls "$MNT/m/00" | wc -l)
[ "$n" -lt 20 ] && [ "$n" -ge 4 ] || fail "$n of layer 00's 20 pages left: eviction took too few or too many"
wait_loaded
line=$(grep -o "loaded in the background: [0-9]* pages, [0-9]* extents" "$LOG" | tail -1)
set -- $line
[ "$5" = $((n + 120)) ] || fail "pages after the load: $line, want $((n + 120))"
# The store, fuller than evict_high, comes down to evict_low once the load
# is over (the idle evictor looks every second); then every extent the
# store holds is a page's (no two pages here are alike): the space of the
# pages evicted while loading, and after, came back.
ssd_stat() {
	python3 -c 'import json, sys; print(json.load(open(sys.argv[1] + "/.kvfs/stats"))["ssd"][sys.argv[2]])' "$MNT" "$1"
}
for _ in $(seq 100); do
	[ "$(ssd_stat physical_bytes)" -le "$(ssd_stat low_watermark_bytes)" ] &&
		[ "$(stats_ssd_extents)" = "$(ssd_stat pages)" ] && break
	sleep 0.1
done
[ "$(ssd_stat physical_bytes)" -le "$(ssd_stat low_watermark_bytes)" ] ||
	fail "usage $(ssd_stat physical_bytes) stays above the low mark after the load"
[ "$(stats_ssd_extents)" = "$(ssd_stat pages)" ] ||
	fail "the store holds $(stats_ssd_extents) extents for $(ssd_stat pages) pages: evicted pages' space was not returned"
no_errors_in_log
umount_kvfs
"$KVFS" fsck "$STORE" >/dev/null || fail "fsck after eviction while loading: $("$KVFS" fsck "$STORE" 2>&1)"
echo "PASS: lazy load"
