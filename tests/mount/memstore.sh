#!/usr/bin/env bash
# A store on tmpfs: pages are copied out of mapped segments and hashed in
# the same pass (store/memread.c). Fast-path reads into aligned and odd
# destinations, FUSE reads and RAM-tier promotion are bit-exact; a flipped
# byte is EIO with the destination zeroed and counted; and with
# KVFS_MAPPED_READS=off the same store reads through the ring (where an odd
# destination bounces, so the flags tell the two paths apart).
if [ "$(stat -f -c %T /dev/shm 2>/dev/null)" != tmpfs ]; then
	echo "SKIP: /dev/shm is not tmpfs here" >&2
	exit 77
fi
export KVFS_TEST_DIR=/dev/shm
. "$(dirname "$0")/lib.sh"

mkfs
mount_kvfs -o ram_cache=0
grep -q "in memory (tmpfs): pages are copied out of mapped segments" "$LOG" ||
	fail "the daemon did not say its stripe is in memory"
M=$MNT/m
mkdir "$M" "$M/0" || fail "mkdir"
sizes=(5000 65536 69631 1048577 300 4096)
for i in "${!sizes[@]}"; do
	head -c "${sizes[$i]}" /dev/urandom > "$T/p$i" || fail "make p$i"
	cp "$T/p$i" "$M/0/p$i" || fail "write p$i"
done
sync "$M/0"
for i in "${!sizes[@]}"; do cmp "$T/p$i" "$M/0/p$i" || fail "FUSE read of p$i"; done

# read.py MODE: fast-path READ of every page, twice (aligned, then odd
# destinations); MODE says what the flags must show.
cat > "$T/read.py" <<'PY'
import errno, mmap, os, sys
sys.path.insert(0, os.environ["TESTDIR"])
import kvfsabi as abi
M, T, mode = sys.argv[1:4]
n = int(sys.argv[4])
MB = 1 << 20
dfd = os.open(M, os.O_RDONLY)
fd = abi.memfd(32 * MB)
mem = mmap.mmap(fd, 32 * MB)
rid, _ = abi.register(dfd, fd)
want = [open(os.path.join(T, 'p%d' % i), 'rb').read() for i in range(n)]
for odd in (0, 3):
    ds = [abi.Desc(0, b'p%d' % i, dst_off=MB + i * 2 * MB + odd, dst_len=2 * MB - odd)
          for i in range(n)]
    mem[MB:MB + 2 * MB * n] = b'\xaa' * (2 * MB * n)
    abi.place(mem, ds, 0, MB // 2)
    abi.batch(dfd, abi.READ, rid, 0, n)
    abi.collect(mem, ds, 0)
    for i, d in enumerate(ds):
        got = bytes(mem[d.dst_off:d.dst_off + len(want[i])])
        if mode == 'corrupt' and i == 1:
            if d.status != -errno.EIO or got != bytes(len(want[i])):
                abi.fail(f'corrupt p1: status {d.status}, destination zeroed: {got == bytes(len(got))}')
            continue
        if d.status != 0 or got != want[i]:
            abi.fail(f'p{i} at +{odd}: status {d.status}, bytes equal: {got == want[i]}')
        bounced = bool(d.out_flags & abi.DESC_BOUNCED)
        if mode == 'mapped' and bounced:
            abi.fail(f'p{i} at +{odd} bounced: it should have been copied from the mapping')
        if mode == 'cached' and not d.out_flags & 4:    # KVFS_DESC_CACHED
            abi.fail(f'p{i} at +{odd} not from the RAM tier')
        if mode == 'ring' and odd and d.status == 0 and not bounced:
            abi.fail(f'p{i} at +{odd} not bounced: the ring path did not run')
PY
export TESTDIR
TESTDIR=$(dirname "$0")
python3 "$T/read.py" "$M" "$T" mapped "${#sizes[@]}" || fail "fast-path reads from the mapping"

# One flipped byte in the segment: EIO for that page, its destination
# zeroed, counted; cat gets EIO too.
seg=$(getfattr --only-values -n user.kvfs.segment "$M/0/p1") || fail "segment xattr"
off=$(getfattr --only-values -n user.kvfs.extent "$M/0/p1" | tr ' ' '\n' | sed -n 's/^offset=//p')
[ -n "$off" ] || fail "no extent offset for p1"
python3 - "$seg" $((off + 777)) <<'PY' || fail "flip a byte"
import sys
with open(sys.argv[1], 'r+b') as f:
    f.seek(int(sys.argv[2])); b = f.read(1)
    f.seek(int(sys.argv[2])); f.write(bytes([b[0] ^ 0x10]))
PY
python3 "$T/read.py" "$M" "$T" corrupt "${#sizes[@]}" || fail "fast-path read of a flipped page"
echo 3 > /proc/sys/vm/drop_caches   # the kernel kept p1 from the cmp above
cat "$M/0/p1" > /dev/null 2>&1 && fail "cat of a flipped page succeeded"
grep -q "^kvfs_checksum_failures_total [1-9]" "$MNT/.kvfs/metrics" || fail "checksum failures not counted"
python3 - "$seg" $((off + 777)) <<'PY' || fail "flip it back"
import sys
with open(sys.argv[1], 'r+b') as f:
    f.seek(int(sys.argv[2])); b = f.read(1)
    f.seek(int(sys.argv[2])); f.write(bytes([b[0] ^ 0x10]))
PY
umount_kvfs

# The RAM tier keeps a page read twice: its copy comes from the mapping.
mount_kvfs -o ram_cache=64M
python3 "$T/read.py" "$M" "$T" mapped "${#sizes[@]}" || fail "reads with the RAM tier"
python3 "$T/read.py" "$M" "$T" cached "${#sizes[@]}" || fail "reads from the RAM tier"
umount_kvfs

KVFS_MAPPED_READS=off mount_kvfs -o ram_cache=0
grep -c "in memory (tmpfs)" "$LOG" | grep -qx 2 || fail "KVFS_MAPPED_READS=off still mapped"
python3 "$T/read.py" "$M" "$T" ring "${#sizes[@]}" || fail "fast-path reads through the ring"
for i in "${!sizes[@]}"; do cmp "$T/p$i" "$M/0/p$i" || fail "FUSE read of p$i (ring)"; done
umount_kvfs
no_errors_in_log 'checksum mismatch|checksum'
echo PASS
