#!/usr/bin/env bash
# Crash loop: mixed load (fsync'ed and plain page writes, tmp+rename
# publishes over existing pages) while the daemon is killed with SIGKILL at
# random moments, CYCLES times. After every remount: each page whose fsync
# returned is present and bit-exact, every visible page reads back without a
# checksum error, and df agrees with the distinct extents the pages name
# (no leaked or double-counted space; dedup makes du >= df).
. "$(dirname "$0")/lib.sh"
CYCLES=${KVFS_CRASH_CYCLES:-8}

mkfs
: > "$T/acked"
for cyc in $(seq 1 "$CYCLES"); do
	mount_kvfs
	mkdir -p "$MNT/m/00" "$MNT/m/01" 2>/dev/null || true
	python3 - "$MNT/m" "$T/acked" <<'PY' || fail "cycle $cyc: check after remount"
import hashlib, os, sys
m, acked = sys.argv[1], sys.argv[2]
for line in open(acked):
    name, digest = line.split()
    data = open(f"{m}/{name}", "rb").read()
    if hashlib.sha256(data).hexdigest() != digest:
        sys.exit(f"fsync'ed page {name}: wrong bytes")
for layer in ("00", "01"):
    for n in os.listdir(f"{m}/{layer}"):
        open(f"{m}/{layer}/{n}", "rb").read()     # EIO would raise
PY
	used=$(df -B1 --output=used "$MNT" | tail -1 | tr -d ' ')
	du=$(du -s -B1 "$MNT" | cut -f1)
	# Identical pages share one extent (dedup): df counts it once, du per
	# page. Physical use is the footprints of the distinct extents.
	phys=$(python3 - "$MNT/m" <<'PY'
import os, sys
seen = {}
for layer in ("00", "01"):
    for n in os.listdir(f"{sys.argv[1]}/{layer}"):
        ext = os.getxattr(f"{sys.argv[1]}/{layer}/{n}", "user.kvfs.extent").decode()
        length = int(ext.split("length=")[1])
        seen[ext] = (length + 4095) // 4096 * 4096
print(sum(seen.values()))
PY
)
	[ "$used" -eq "$phys" ] || fail "cycle $cyc: df used $used, distinct extents hold $phys"
	# du also counts the directories (4 KiB each: root, model, 2 layers)
	[ "$used" -le $((du - 4 * 4096)) ] || fail "cycle $cyc: df used $used above du of pages $((du - 16384))"
	python3 - "$MNT/m" "$T/acked" "$cyc" <<'PY' &
import hashlib, os, random, sys
m, acked, cyc = sys.argv[1], open(sys.argv[2], "a"), sys.argv[3]
i = 0
while True:
    i += 1
    name = f"00/c{cyc}-{i}"
    data = os.urandom(random.choice([100, 4096, 65536, 200000]))
    try:
        fd = os.open(f"{m}/{name}", os.O_CREAT | os.O_WRONLY, 0o644)
        os.write(fd, data)
        if i % 2:
            os.fsync(fd)
            acked.write(f"{name} {hashlib.sha256(data).hexdigest()}\n")
            acked.flush()
        os.close(fd)
        with open(f"{m}/01/tmp{cyc}-{i}", "wb") as f:
            f.write(data[:1000])
        os.rename(f"{m}/01/tmp{cyc}-{i}", f"{m}/01/pub{i % 5}")
        # Dedup under crashes: a few payloads shared by many pages that
        # come and go, so refcounts change in every transaction.
        with open(f"{m}/01/same{cyc}-{i}", "wb") as f:
            f.write(bytes([i % 3]) * 8192)
        if i > 4:
            os.unlink(f"{m}/01/same{cyc}-{i - 4}")
    except OSError:
        break
PY
	load=$!
	sleep "0.$((RANDOM % 8 + 2))"
	kill -9 "$DPID"
	wait "$DPID" 2>/dev/null || true
	DPID=
	wait "$load" 2>/dev/null || true
	fusermount3 -u -z "$MNT"
done
mount_kvfs
[ "$(wc -l < "$T/acked")" -gt 0 ] || fail "no page was acknowledged: the load did not run"
shared=$(python3 - "$MNT/m" "$T/acked" <<'PY'
import hashlib, os, sys
m = sys.argv[1]
for line in open(sys.argv[2]):
    name, digest = line.split()
    assert hashlib.sha256(open(f"{m}/{name}", "rb").read()).hexdigest() == digest, name
same = [n for n in os.listdir(f"{m}/01") if n.startswith("same")]
for n in same:
    data = open(f"{m}/01/{n}", "rb").read()
    assert len(data) == 8192 and data == data[:1] * 8192, n
print(sum(int(os.getxattr(f"{m}/01/{n}", "user.kvfs.refcount")) > 1 for n in same))
PY
) || fail "final check"
[ "$shared" -gt 0 ] || fail "no page shares an extent: dedup was not exercised"
umount_kvfs
grep -q "checksum mismatch" "$LOG" && fail "checksum errors after crashes"
echo "PASS: $CYCLES crash cycles, $(wc -l < "$T/acked") fsync'ed pages verified, $shared pages sharing extents"
