#!/usr/bin/env bash
# kvfs fsck: a clean store passes; each kind of damage, planted alone in its
# own copy of the store, is found (exit 4, named), --repair fixes it (exit 1)
# losing only the damaged pages, a second fsck is clean (exit 0), and the
# store mounts with every other page bit-exact. Damage PRAGMA quick_check
# does not see (an index that disagrees with its table, a UNIQUE index
# holding a key twice) and a page whose layer is gone are found too. Plus
# the operational and usage exits: mounted store 8, missing store 8, bad
# arguments 16.
. "$(dirname "$0")/lib.sh"

# sql DIR QUERY: run one statement on DIR/kvfs.db with foreign keys off (so
# damage can be planted), print result rows as a|b|c.
sql() {
	python3 - "$1" "$2" <<'PY' || fail "sql on $1: $2"
import sqlite3, sys
db = sqlite3.connect(sys.argv[1] + "/kvfs.db")
db.execute("PRAGMA foreign_keys = OFF")
for row in db.execute(sys.argv[2]):
    print("|".join(str(c) for c in row))
db.commit()
PY
}

# Paths (model/layer/name) of the pages naming extent $2 in store $1, sorted.
pages_of() {
	sql "$1" "SELECT mo.name || '/' || l.name || '/' || p.name FROM pages AS p
		  JOIN layers AS l ON l.ino = p.layer_ino JOIN models AS mo ON mo.ino = l.model_ino
		  WHERE p.extent_id = $2 ORDER BY 1"
}

# A copy of the pristine store whose stripe row points at the copy's own
# stripe (stripe paths in the manifest are absolute).
copy_store() {
	local d=$T/$1
	cp -a "$STORE" "$d" || fail "cp -a $STORE $d"
	sql "$d" "UPDATE stripes SET path = '$d/stripe0' WHERE id = 0" >/dev/null
	echo "$d"
}

# fsck_expect WANT_RC OUTFILE ARGS...: run kvfs fsck, keep its output.
fsck_expect() {
	local want=$1 out=$2 rc=0
	shift 2
	"$KVFS" fsck "$@" >"$out" 2>&1 || rc=$?
	if [ "$rc" -ne "$want" ]; then
		cat "$out" >&2
		fail "kvfs fsck $* exited $rc, expected $want"
	fi
}

# Pages the repair output says it deleted, sorted, one per line.
repair_lost() { sed -nE 's/^repair: deleted page ([^ ]+) \(ino.*/\1/p' "$1" | sort; }

# verify_mount DIR LOST: mount DIR; every recorded page must read back with
# its recorded sha256 except exactly the pages listed in LOST (missing).
verify_mount() {
	local d=$1 lost=$2
	local saved=$STORE
	STORE=$d
	mount_kvfs
	python3 - "$MNT" "$T/sums" "$lost" <<'PY' || { umount_kvfs; STORE=$saved; fail "pages after repair of $d"; }
import hashlib, os, sys
mnt, sums, lost = sys.argv[1], sys.argv[2], set(sys.argv[3].split())
want = dict(l.split() for l in open(sums))
have = {}
for root, _, files in os.walk(os.path.join(mnt, "m")):
    for f in files:
        p = os.path.join(root, f)
        with open(p, "rb") as fh:
            have[os.path.relpath(p, mnt)] = hashlib.sha256(fh.read()).hexdigest()
missing = set(want) - set(have)
bad = [k for k in have if k in want and have[k] != want[k]]
extra = set(have) - set(want)
ok = True
if missing != lost:
    print(f"missing pages {sorted(missing)}, expected {sorted(lost)}", file=sys.stderr); ok = False
if bad:
    print(f"pages with wrong bytes: {bad}", file=sys.stderr); ok = False
if extra:
    print(f"unexpected pages: {sorted(extra)}", file=sys.stderr); ok = False
sys.exit(0 if ok else 1)
PY
	umount_kvfs
	STORE=$saved
}

# repair_case NAME DIR KEYWORD LOST [VERIFY]: the damage in DIR is found
# (read-only twice: -n changes nothing), repaired losing exactly LOST, and
# gone afterwards.
repair_case() {
	local name=$1 d=$2 keyword=$3 lost=$4 verify=${5:-}
	fsck_expect 4 "$T/$name.ro" $verify "$d"
	grep -q -- "$keyword" "$T/$name.ro" || { cat "$T/$name.ro" >&2; fail "$name: fsck did not report \"$keyword\""; }
	fsck_expect 4 "$T/$name.ro2" -n $verify "$d"
	fsck_expect 1 "$T/$name.fix" --repair $verify "$d"
	local got
	got=$(repair_lost "$T/$name.fix" | tr '\n' ' ')
	[ "$got" = "$(echo "$lost" | tr ' ' '\n' | sed '/^$/d' | sort | tr '\n' ' ')" ] ||
		{ cat "$T/$name.fix" >&2; fail "$name: repair deleted [$got], expected [$lost]"; }
	fsck_expect 0 "$T/$name.after" --verify-data "$d"
	grep -q "clean" "$T/$name.after" || fail "$name: second fsck does not say clean"
	verify_mount "$d" "$(echo "$lost" | tr ' ' '\n' | grep -v dangle || true)"
	echo "ok: $name"
}

# ---- a store with shared (refcount 2) and unique extents ----
mkfs
mount_kvfs
mkdir -p "$MNT/m/00" "$MNT/m/01"
$PAGETOOL write "$MNT/m/00" p 20 0 || fail "write m/00"
$PAGETOOL write "$MNT/m/01" p 20 0 || fail "write m/01"   # same bytes: shared extents
$PAGETOOL write "$MNT/m/01" q 12 0 || fail "write m/01 q"
(cd "$MNT" && find m -type f | sort | while read -r p; do
	echo "$p $(sha256sum <"$p" | cut -d' ' -f1)"; done) >"$T/sums"
[ "$(wc -l <"$T/sums")" -eq 52 ] || fail "expected 52 pages, got $(wc -l <"$T/sums")"

# a mounted store is refused
fsck_expect 8 "$T/mounted" "$STORE"
grep -q "in use" "$T/mounted" || fail "fsck of a mounted store does not say it is in use"
umount_kvfs

shared=$(sql "$STORE" "SELECT count(*) FROM extents WHERE refcount = 2")
[ "$shared" -ge 2 ] || fail "expected shared extents, got $shared"

fsck_expect 0 "$T/clean" --verify-data "$STORE"
grep -q "52 pages" "$T/clean" || fail "clean fsck does not count 52 pages"
fsck_expect 0 "$T/clean.json" --json "$STORE"
python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); sys.exit(d["problems"] != 0 or d["pages"] != 52)' \
	"$T/clean.json" || fail "--json summary"

# ---- usage and operational errors ----
fsck_expect 16 "$T/u1"
fsck_expect 16 "$T/u2" --bogus "$STORE"
fsck_expect 16 "$T/u3" -n --repair "$STORE"
fsck_expect 16 "$T/u4" "$STORE" "$STORE"
fsck_expect 0 "$T/u5" --help
grep -q "usage: kvfs fsck" "$T/u5" || fail "--help prints no usage"
fsck_expect 8 "$T/nx" "$T/no-such-store"
fsck_expect 8 "$T/notstore" "$MNT"   # a directory without a manifest

# ---- (a) truncated segment: cut the file holding the highest extent ----
d=$(copy_store trunc)
read -r id seg off <<<"$(sql "$d" "SELECT id, segment, \"offset\" FROM extents ORDER BY \"offset\" DESC LIMIT 1" | tr '|' ' ')"
lost=$(pages_of "$d" "$id")
[ -n "$lost" ] || fail "no page names extent $id"
truncate -s $((off + 100)) "$(printf '%s/stripe0/seg-%08d' "$d" "$seg")"
repair_case truncated "$d" "truncated segment" "$lost"

# ---- (b) bad checksum in a shared extent: only --verify-data sees it ----
d=$(copy_store badsum)
read -r id seg off len <<<"$(sql "$d" "SELECT id, segment, \"offset\", length FROM extents WHERE refcount = 2 ORDER BY id LIMIT 1" | tr '|' ' ')"
lost=$(pages_of "$d" "$id")
[ "$(echo "$lost" | wc -l)" -eq 2 ] || fail "extent $id should have 2 pages: $lost"
python3 - "$(printf '%s/stripe0/seg-%08d' "$d" "$seg")" $((off + len / 2)) <<'PY'
import sys
with open(sys.argv[1], "r+b") as f:
    f.seek(int(sys.argv[2])); b = f.read(1); f.seek(int(sys.argv[2]))
    f.write(bytes([b[0] ^ 0x40]))
PY
fsck_expect 0 "$T/badsum.noverify" "$d"
repair_case badsum "$d" "checksum mismatch" "$lost" --verify-data

# ---- (c) dangling row: a page naming an extent that does not exist ----
d=$(copy_store dangling)
sql "$d" "INSERT INTO pages (ino, layer_ino, name, extent_id, size, mode, uid, gid,
	  ctime_ns, mtime_ns, atime_ns) SELECT (SELECT max(ino) FROM pages) + 1000, ino,
	  'dangle', 999999, 4096, 292, 0, 0, 0, 0, 0 FROM layers WHERE name = '00'" >/dev/null
[ "$(sql "$d" "SELECT count(*) FROM pages WHERE extent_id = 999999")" = 1 ] || fail "planting the dangling row"
repair_case dangling "$d" "dangling row" "m/00/dangle"

# ---- (d) leaked extent: a row no page names, over real data ----
d=$(copy_store leaked)
read -r seg end <<<"$(sql "$d" "SELECT segment, max(\"offset\" + ((length + 4095) / 4096) * 4096) FROM extents WHERE segment = (SELECT max(segment) FROM extents)" | tr '|' ' ')"
head -c 8192 /dev/urandom | dd of="$(printf '%s/stripe0/seg-%08d' "$d" "$seg")" bs=4096 seek=$((end / 4096)) conv=notrunc status=none
sql "$d" "INSERT INTO extents (id, stripe, segment, \"offset\", length, hash, refcount)
	  VALUES ((SELECT max(id) FROM extents) + 100, 0, $seg, $end, 8000, zeroblob(16), 1)" >/dev/null
repair_case leaked "$d" "leaked extent" ""

# ---- (e) wrong refcount ----
d=$(copy_store refcount)
sql "$d" "UPDATE extents SET refcount = 3 WHERE id = (SELECT id FROM extents WHERE refcount = 2 ORDER BY id DESC LIMIT 1)" >/dev/null
repair_case refcount "$d" "refcount 3 but 2 page(s) refer to it" ""

# ---- orphaned space: data no extent covers ----
d=$(copy_store orphan)
seg=$(sql "$d" "SELECT min(segment) FROM extents")
sz=$(stat -c %s "$(printf '%s/stripe0/seg-%08d' "$d" "$seg")")
head -c 4096 /dev/urandom | dd of="$(printf '%s/stripe0/seg-%08d' "$d" "$seg")" bs=4096 seek=$(((sz + 4095) / 4096 + 4)) conv=notrunc status=none
repair_case orphan "$d" "orphaned space" ""

# ---- damage PRAGMA quick_check does not see: an index against its table ----
# set_index_sql DIR SQL: redefine index pages_extent without rebuilding it,
# so its entries no longer say what the definition says.
set_index_sql() {
	python3 - "$1/kvfs.db" "$2" <<'PY' || fail "redefining pages_extent in $1"
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
db.execute("PRAGMA writable_schema = ON")
db.execute("UPDATE sqlite_schema SET sql = ? WHERE name = 'pages_extent'", (sys.argv[2],))
db.commit()
PY
}
d=$(copy_store index)
set_index_sql "$d" "CREATE INDEX pages_extent ON pages (size)"
[ "$(sql "$d" "PRAGMA quick_check")" = ok ] || fail "index: quick_check should pass"
fsck_expect 4 "$T/index.ro" "$d"
grep -q "index pages_extent does not match table pages" "$T/index.ro" ||
	{ cat "$T/index.ro" >&2; fail "index: fsck did not report the index"; }
echo "ok: index"
d=$(copy_store unique)   # the shared extents are keys held twice
set_index_sql "$d" "CREATE UNIQUE INDEX pages_extent ON pages (extent_id)"
fsck_expect 4 "$T/unique.ro" "$d"
grep -q "UNIQUE index pages_extent of table pages holds" "$T/unique.ro" ||
	{ cat "$T/unique.ro" >&2; fail "unique: fsck did not report the duplicate keys"; }
grep -q "does not match" "$T/unique.ro" && { cat "$T/unique.ro" >&2; fail "unique: entries match"; }
echo "ok: unique"

# ---- a page whose layer row does not exist (foreign key) ----
d=$(copy_store nolayer)
sql "$d" "UPDATE pages SET layer_ino = 999999 WHERE ino = (SELECT min(ino) FROM pages)" >/dev/null
fsck_expect 4 "$T/nolayer.ro" "$d"
grep -q "table pages, row [0-9]*: refers to a layers row that does not exist" "$T/nolayer.ro" ||
	{ cat "$T/nolayer.ro" >&2; fail "nolayer: fsck did not report the missing layer"; }
# The row pass stopped at that page, so the pages' side of the index sums
# came from a scan of their own: it must agree with the indexes...
grep -q "does not match" "$T/nolayer.ro" && { cat "$T/nolayer.ro" >&2; fail "nolayer: index reported"; }
echo "ok: nolayer"
# ...and still find an index that differs.
d=$(copy_store nolayer_index)
sql "$d" "UPDATE pages SET layer_ino = 999999 WHERE ino = (SELECT min(ino) FROM pages)" >/dev/null
set_index_sql "$d" "CREATE INDEX pages_extent ON pages (size)"
fsck_expect 4 "$T/nolayer_index.ro" "$d"
grep -q "refers to a layers row that does not exist" "$T/nolayer_index.ro" &&
grep -q "index pages_extent does not match table pages" "$T/nolayer_index.ro" ||
	{ cat "$T/nolayer_index.ro" >&2; fail "nolayer_index: not both reported"; }
echo "ok: nolayer_index"
d=$(copy_store layergone)   # the pages' rows intact, their layer's row deleted
sql "$d" "DELETE FROM layers WHERE name = '01'" >/dev/null
fsck_expect 4 "$T/layergone.ro" "$d"
[ "$(grep -c "refers to a layers row that does not exist" "$T/layergone.ro")" -eq 32 ] ||
	{ cat "$T/layergone.ro" >&2; fail "layergone: not every page of m/01 reported"; }
echo "ok: layergone"

echo "PASS: fsck finds, repairs and reports store damage"
