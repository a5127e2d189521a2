"""docs/abi.md is all a client needs (see abidoc.sh).

1. The doc's C example is extracted, compiled against client/ and run on
   the mount; the page it stores is then read through FUSE, bit-exact.
2. The doc's structs, command numbers and flag values are compiled against
   client/kvfs_ioctl.h (sizes, offsets, types, values).
3. A client written from the doc alone (struct, fcntl, ctypes; the command
   numbers are taken from the doc's table) checks what the doc promises:
   allocation before registering, length and offset, seals, LOOKUP's
   ignored inputs, layer names, punched memory, PREFETCH without a RAM
   tier, data regions, ownership, limits and the errors.

usage: abidoc.py MOUNT DOC CLIENT_DIR DAEMON_LOG TMPDIR
"""
import ctypes
import errno
import fcntl
import mmap
import os
import re
import struct
import subprocess
import sys

MNT, DOC, CLIENT, LOG, TMP = sys.argv[1:6]
MODEL = f"{MNT}/llama-8b"      # the doc's example model: 64 KiB pages
PAGE = 65536
MiB = 1 << 20
doc = open(DOC).read()
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print(f"FAIL: {what}", file=sys.stderr)


def pattern(seed, n=PAGE):
    return bytes(((i * 31 + seed) & 0xFF) for i in range(n))


# ---- 1. the C example, as the doc prints it ----

blocks = re.findall(r"^```c\n(.*?)^```", doc, re.S | re.M)
examples = [b for b in blocks if "int main(" in b]
check(len(examples) == 1, f"one complete C program in the doc, found {len(examples)}")
inc = f"{TMP}/inc"
os.makedirs(f"{inc}/kvfs", exist_ok=True)
if not os.path.exists(f"{inc}/kvfs/kvfs_ioctl.h"):     # <kvfs/kvfs_ioctl.h>, as installed
    os.symlink(os.path.abspath(f"{CLIENT}/kvfs_ioctl.h"), f"{inc}/kvfs/kvfs_ioctl.h")
CC = os.environ.get("CC", "cc")


def compile_c(src, out, syntax_only=False):
    path = f"{out}.c"
    with open(path, "w") as f:
        f.write(src)
    cmd = [CC, "-std=gnu11", "-Wall", "-Wextra", "-Werror", "-I", inc, path]
    cmd += ["-fsyntax-only"] if syntax_only else ["-o", out]
    r = subprocess.run(cmd, capture_output=True, text=True)
    check(r.returncode == 0, f"{CC} {os.path.basename(path)}: {r.stderr.strip()}")
    return r.returncode == 0


if examples and compile_c(examples[0], f"{TMP}/kvdemo"):
    for run in (1, 2):      # the second run replaces the page (REPLACE)
        r = subprocess.run([f"{TMP}/kvdemo", MODEL], capture_output=True, text=True,
                           timeout=60)
        check(r.returncode == 0 and r.stdout.startswith("ok"),
              f"the doc's example, run {run}: rc {r.returncode}: {r.stdout}{r.stderr}")
    # What it stored, through plain FUSE: the doc says layer 3 is "03".
    with open(f"{MODEL}/03/blk-0001", "rb") as f:
        check(f.read() == pattern(7), "the example's page reads back bit-exact through FUSE")

# ---- 2. the doc's structs and numbers against the header ----

checks = ["#include <stddef.h>", "#include <kvfs/kvfs_ioctl.h>"]
structs = 0
for b in blocks:
    m = re.match(r"struct (kvfs_\w+) \{", b)
    if not m or "int main(" in b:
        continue
    name = m.group(1)
    structs += 1
    body = re.sub(r"/\*.*?\*/", "", b, flags=re.S)
    checks.append(body.replace(f"struct {name} {{", f"struct doc_{name} {{", 1))
    checks.append(f"_Static_assert(sizeof(struct doc_{name}) == sizeof(struct {name}), "
                  f"\"{name}: size\");")
    for decl in re.findall(r"\b(?:u?int(?:8|16|32|64)_t)\s+([^;{}()]+);", body):
        for field in decl.split(","):
            f = re.sub(r"\[.*\]", "", field).strip()
            checks.append(
                f"_Static_assert(offsetof(struct doc_{name}, {f}) == offsetof(struct {name}, {f})"
                f" && __builtin_types_compatible_p(__typeof__(((struct doc_{name} *)0)->{f}),"
                f" __typeof__(((struct {name} *)0)->{f})), \"{name}.{f}: offset or type\");")
check(structs >= 4, f"the doc shows the four argument structs, found {structs}")
CMDS = {}
for name, nr, num in re.findall(r"^\| `(KVFS_IOC_\w+)` \| (\d+) \| `(0x[0-9A-Fa-f]+)` \|",
                                doc, re.M):
    CMDS[name] = int(num, 16)
    checks.append(f"_Static_assert({name} == {num}u && _IOC_NR({name}) == {nr}, \"{name}\");")
check(len(CMDS) == 7, f"the command table gives seven numbers, found {len(CMDS)}")
VALUES = {}
for name, val in re.findall(r"`(KVFS_(?:WRITE|BATCH|DESC|REGION|GC)_\w+)` \((\d+)\)", doc):
    VALUES[name] = int(val)
    checks.append(f"_Static_assert({name} == {val}u, \"{name} is {val}\");")
for name, val in [("KVFS_ABI_VERSION", 1), ("KVFS_NAME_MAX", 255),
                  ("KVFS_BATCH_MAX", 1 << 20), ("KVFS_REGIONS_PER_PROCESS", 64)]:
    checks.append(f"_Static_assert({name} == {val}u, \"{name}\");")
compile_c("\n".join(checks) + "\n", f"{TMP}/docstructs", syntax_only=True)

# ---- 3. a client from the doc alone ----

REGION = "<IIiIQQQQ"      # abi flags fd reserved0 length region_id offset reserved1
DESC = "<QQIIQQiIQQ"      # handle name_off name_len layer dst_off dst_len status out_flags bytes reserved
BATCH = "<IIQQIIIIQQQ"    # abi flags region_id desc_off count group done failed bytes data_region_id reserved1
assert struct.calcsize(REGION) == 48 and struct.calcsize(DESC) == 64
assert struct.calcsize(BATCH) == 64
REGISTER = CMDS.get("KVFS_IOC_REGION_REGISTER", 0)
UNREGISTER = CMDS.get("KVFS_IOC_REGION_UNREGISTER", 0)
READ, LOOKUP = CMDS.get("KVFS_IOC_READ", 0), CMDS.get("KVFS_IOC_LOOKUP", 0)
WRITE, PREFETCH = CMDS.get("KVFS_IOC_WRITE", 0), CMDS.get("KVFS_IOC_PREFETCH", 0)
AT_OFFSET = VALUES.get("KVFS_REGION_AT_OFFSET", 1)
DATA_REGION = VALUES.get("KVFS_BATCH_DATA_REGION", 256)
DURABLE, REPLACE = VALUES.get("KVFS_WRITE_DURABLE", 1), VALUES.get("KVFS_WRITE_REPLACE", 2)
DESC_CACHED = VALUES.get("KVFS_DESC_CACHED", 4)
F_ADD_SEALS, F_SEAL_SHRINK, F_SEAL_GROW, F_SEAL_WRITE, F_SEAL_FUTURE_WRITE = 1033, 2, 4, 8, 16
libc = ctypes.CDLL(None, use_errno=True)
libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]


def errno_of(fn, *args, **kw):
    """0 if the call worked, else its errno."""
    try:
        fn(*args, **kw)
    except OSError as e:
        return e.errno
    return 0


def memory(size, allocate=True, seals=0):
    """The doc's recipe: memfd_create, fallocate (not ftruncate alone), seal."""
    fd = os.memfd_create("kv", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    if allocate:
        os.posix_fallocate(fd, 0, size)
    else:
        os.ftruncate(fd, size)
    if seals:
        fcntl.fcntl(fd, F_ADD_SEALS, seals)
    return fd


def fallocate(fd, mode, off, length):
    if libc.fallocate(fd, mode, off, length) < 0:
        raise OSError(ctypes.get_errno(), "fallocate")


PUNCH = 0x01 | 0x02      # FALLOC_FL_KEEP_SIZE | FALLOC_FL_PUNCH_HOLE


def register(d, fd, length=0, offset=None, flags=None, abi=1):
    if flags is None:
        flags = AT_OFFSET if offset else 0
    buf = bytearray(struct.pack(REGION, abi, flags, fd, 0, length, 0, offset or 0, 0))
    fcntl.ioctl(d, REGISTER, buf, True)
    f = struct.unpack(REGION, buf)
    return f[5], f[4]


def unregister(d, rid):
    fcntl.ioctl(d, UNREGISTER, struct.pack(REGION, 1, 0, -1, 0, 0, rid, 0, 0))


def batch(d, cmd, rid, count, desc_off=0, flags=0, group=0, data=0, abi=1, reserved1=0):
    buf = bytearray(struct.pack(BATCH, abi, flags, rid, desc_off, count, group, 0, 0, 0,
                                data, reserved1))
    fcntl.ioctl(d, cmd, buf, True)
    f = struct.unpack(BATCH, buf)
    return f[6], f[7], f[8]       # done, failed, bytes


def put(mem, i, handle=0, name_off=0, name_len=0, layer=0, dst_off=0, dst_len=0,
        reserved=0, base=0):
    struct.pack_into(DESC, mem, base + 64 * i, handle, name_off, name_len, layer, dst_off,
                     dst_len, 0, 0, 0, reserved)


def got(mem, i, base=0):
    f = struct.unpack_from(DESC, mem, base + 64 * i)
    return {"handle": f[0], "status": f[6], "out_flags": f[7], "bytes": f[8]}


def name(mem, off, s):
    mem[off:off + len(s)] = s
    return {"name_off": off, "name_len": len(s)}


def metric(key):
    with open(f"{MNT}/.kvfs/metrics") as f:
        for line in f:
            p = line.split()
            if len(p) == 2 and p[0] == key:
                return float(p[1])
    return None


dfd = os.open(MODEL, os.O_RDONLY | os.O_DIRECTORY)
ref = pattern(7)

# -- memory: allocated before registering; length; seals --
fd = memory(MiB, allocate=False)
check(errno_of(register, dfd, fd) == errno.EINVAL, "ftruncate alone: EINVAL")
m = mmap.mmap(fd, MiB)
sum(m[i] for i in range(0, MiB, 4096))      # touching (reading) every page allocates
check(errno_of(register, dfd, fd) == 0, "ftruncate, then every page read: registered")
m.close()
os.close(fd)
fd = memory(4 * MiB)
rid, length = register(dfd, fd)
check(length == 4 * MiB, f"length 0 maps the whole file: {length}")
check(errno_of(fcntl.fcntl, fd, F_ADD_SEALS, F_SEAL_WRITE) == errno.EBUSY,
      "F_SEAL_WRITE once registered: EBUSY")
check(errno_of(register, dfd, fd, length=4 * MiB + 4096) == errno.EINVAL, "length > size: EINVAL")
check(register(dfd, fd, length=MiB)[1] == MiB, "length 1 MiB maps 1 MiB")
unregister(dfd, rid)
os.close(fd)
check(errno_of(register, dfd, memory(MiB, seals=F_SEAL_WRITE)) == errno.EPERM,
      "write-sealed memfd: EPERM")
try:
    fut = memory(MiB, seals=F_SEAL_FUTURE_WRITE)
except OSError:
    fut = None      # older kernel
if fut is not None:
    check(errno_of(register, dfd, fut) == errno.EPERM, "F_SEAL_FUTURE_WRITE: EPERM")
empty = os.memfd_create("kv", os.MFD_CLOEXEC)
check(errno_of(register, dfd, empty) == errno.EINVAL, "empty file: EINVAL")
check(errno_of(register, dfd, 999) == errno.EBADF, "fd not open: EBADF")
check(errno_of(register, dfd, memory(MiB), abi=2) == errno.EPROTO, "register abi 2: EPROTO")
if os.path.isdir("/dev/shm"):
    shm = f"/dev/shm/kvfs-abidoc-{os.getpid()}"
    wfd = os.open(shm, os.O_CREAT | os.O_RDWR, 0o600)
    os.posix_fallocate(wfd, 0, MiB)
    rfd = os.open(shm, os.O_RDONLY)
    check(errno_of(register, dfd, rfd) == errno.EACCES, "/dev/shm file opened read-only: EACCES")
    check(errno_of(register, dfd, wfd) == 0, "/dev/shm file opened read-write: registered")
    os.unlink(shm)

# -- the main region: descriptors at 0, names at 4096, data from 1 MiB --
R = 8 * MiB
mfd = memory(R, seals=F_SEAL_SHRINK | F_SEAL_GROW)
mem = mmap.mmap(mfd, R)
rid, _ = register(dfd, mfd)

# LOOKUP by layer + name; handle, dst_off and dst_len are ignored.
put(mem, 0, layer=3, **name(mem, 4096, b"blk-0001"))
done, failed, nbytes = batch(dfd, LOOKUP, rid, 1)
handle = got(mem, 0)["handle"]
check(done == 1 and got(mem, 0)["bytes"] == PAGE and handle, "lookup of the example's page")
put(mem, 0, layer=3, handle=0xDEADBEEF, dst_off=1 << 60, dst_len=3, **name(mem, 4096, b"blk-0001"))
batch(dfd, LOOKUP, rid, 1)
check(got(mem, 0)["status"] == 0 and got(mem, 0)["handle"] == handle,
      f"lookup ignores handle, dst_off, dst_len: {got(mem, 0)}")

# READ by handle into memory fallocated but never touched: registration populated it.
put(mem, 0, handle=handle, dst_off=4 * MiB, dst_len=PAGE)
batch(dfd, READ, rid, 1)
check(got(mem, 0)["status"] == 0 and mem[4 * MiB:4 * MiB + PAGE] == ref,
      f"read into fallocated, untouched memory: {got(mem, 0)}")

# WRITE: a page in layer 5 from the bytes at 1 MiB, then the errors.
src = pattern(11)
mem[MiB:MiB + PAGE] = src
put(mem, 0, layer=5, dst_off=MiB, dst_len=PAGE, **name(mem, 4096, b"py-0001"))
done, failed, nbytes = batch(dfd, WRITE, rid, 1, flags=DURABLE)
h1 = got(mem, 0)["handle"]
check(done == 1 and nbytes == PAGE and h1, f"write: {got(mem, 0)}")
with open(f"{MODEL}/05/py-0001", "rb") as f:
    check(f.read() == src, "written page through FUSE, bit-exact")
batch(dfd, WRITE, rid, 1)
check(got(mem, 0)["status"] == -errno.EINVAL, "the same descriptor again (handle set): -EINVAL")
put(mem, 0, layer=5, dst_off=MiB, dst_len=PAGE, **name(mem, 4096, b"py-0001"))
batch(dfd, WRITE, rid, 1)
check(got(mem, 0)["status"] == -errno.EEXIST, "write over a page without REPLACE: -EEXIST")
mem[MiB:MiB + PAGE] = ref
put(mem, 0, layer=5, dst_off=MiB, dst_len=PAGE, **name(mem, 4096, b"py-0001"))
batch(dfd, WRITE, rid, 1, flags=REPLACE)
h2 = got(mem, 0)["handle"]
check(got(mem, 0)["status"] == 0 and h2 not in (0, h1), "REPLACE: a new handle")
put(mem, 0, handle=h1, dst_off=4 * MiB, dst_len=PAGE)
batch(dfd, READ, rid, 1)
check(got(mem, 0)["status"] == -errno.ENOENT, "the replaced page's handle: -ENOENT")
put(mem, 0, layer=5, dst_off=MiB, dst_len=4096, **name(mem, 4096, b"py-0002"))
put(mem, 1, layer=5, handle=7, dst_off=MiB, dst_len=PAGE, **name(mem, 4200, b"py-0003"))
put(mem, 2, layer=5, dst_off=MiB, dst_len=PAGE, **name(mem, 4300, b"py-0004"))
put(mem, 3, layer=5, dst_off=MiB, dst_len=PAGE, **name(mem, 4400, b"py-0004"))
put(mem, 4, layer=5, dst_off=0, dst_len=PAGE, **name(mem, 4500, b"py-0005"))
put(mem, 5, layer=5, dst_off=R - 4096, dst_len=PAGE, **name(mem, 4600, b"py-0006"))
batch(dfd, WRITE, rid, 6)
st = [got(mem, i)["status"] for i in range(6)]
check(st == [-errno.EINVAL] * 5 + [-errno.ERANGE],
      f"write: wrong size, handle, same name twice, source over descriptors, outside: {st}")

# -- layer numbers and directory names --
check(sorted(os.listdir(MODEL)) == [f"{i:02d}" for i in range(32)], "32 layers: 00..31")
subprocess.run([os.environ["KVFS"], "model", "create", f"{MNT}/wide", "--layers", "101",
                "--kv-heads", "1", "--head-dim", "8", "--dtype", "bf16", "--page-tokens", "1"],
               check=True, capture_output=True)
check(sorted(os.listdir(f"{MNT}/wide")) == [f"{i:03d}" for i in range(101)],
      "101 layers: 000..100")
os.mkdir(f"{MNT}/free")
os.mkdir(f"{MNT}/free/7")
os.mkdir(f"{MNT}/free/0012")
check(errno_of(os.mkdir, f"{MNT}/free/12") == errno.EEXIST, "a second directory for 12: EEXIST")
check(errno_of(os.mkdir, f"{MNT}/free/100000") == errno.EINVAL, "six digits: EINVAL")
check(errno_of(os.mkdir, f"{MNT}/free/l1") == errno.EINVAL, "not a number: EINVAL")
ffd = os.open(f"{MNT}/free", os.O_RDONLY | os.O_DIRECTORY)
frid, _ = register(ffd, mfd)
put(mem, 0, layer=12, dst_off=MiB, dst_len=5000, **name(mem, 4096, b"p"))
put(mem, 1, layer=7, dst_off=MiB, dst_len=3000, **name(mem, 4097, b"q"))
put(mem, 2, layer=9, dst_off=MiB, dst_len=3000, **name(mem, 4098, b"r"))
batch(ffd, WRITE, frid, 3)
st = [got(mem, i)["status"] for i in range(3)]
check(st == [0, 0, -errno.ENOENT], f"layers 12 (\"0012\"), 7 (\"7\"), 9 (none): {st}")
check(os.path.getsize(f"{MNT}/free/0012/p") == 5000, "layer 12's page is in 0012")
unregister(ffd, frid)

# -- punched memory: -EFAULT per descriptor, EFAULT for the array --
put(mem, 0, handle=h2, dst_off=4 * MiB, dst_len=PAGE)
put(mem, 1, handle=h2, dst_off=6 * MiB, dst_len=PAGE)
fallocate(mfd, PUNCH, 4 * MiB, MiB)
done, failed, _ = batch(dfd, READ, rid, 2)
check([got(mem, i)["status"] for i in range(2)] == [-errno.EFAULT, 0] and done == 1,
      f"punched destination: -EFAULT, the other read: {got(mem, 0)}")
# Punched again (the read above may have pinned the region on a new ring),
# then allocated without touching: still refused.
fallocate(mfd, PUNCH, 4 * MiB, MiB)
fallocate(mfd, 0, 4 * MiB, MiB)
batch(dfd, READ, rid, 1)
check(got(mem, 0)["status"] == -errno.EFAULT, "fallocated again, not touched: still -EFAULT")
mem[4 * MiB:5 * MiB] = bytes(MiB)          # touch it
batch(dfd, READ, rid, 2)
check(got(mem, 0)["status"] == 0 and mem[4 * MiB:4 * MiB + PAGE] == ref, "touched: read")
fallocate(mfd, PUNCH, 4 * MiB, MiB)
put(mem, 0, layer=5, dst_off=4 * MiB, dst_len=PAGE, **name(mem, 4096, b"py-0007"))
batch(dfd, WRITE, rid, 1)
check(got(mem, 0)["status"] == -errno.EFAULT, "punched source: -EFAULT")
mem[4 * MiB:5 * MiB] = bytes(MiB)
put(mem, 0, layer=3, **name(mem, 8192, b"blk-0001"))
fallocate(mfd, PUNCH, 8192, 4096)
batch(dfd, LOOKUP, rid, 1)
check(got(mem, 0)["status"] == -errno.EFAULT, "punched name: -EFAULT")
fallocate(mfd, PUNCH, 0, 4096)
check(errno_of(batch, dfd, LOOKUP, rid, 1) == errno.EFAULT, "punched descriptor array: EFAULT")
put(mem, 0, layer=3, **name(mem, 4096, b"blk-0001"))
check(errno_of(batch, dfd, LOOKUP, rid, 1) == 0 and got(mem, 0)["status"] == 0,
      "descriptors written again: the region still works")

# -- PREFETCH with the RAM tier off (this mount: ram_cache=0) --
dropped = metric("kvfs_ram_prefetch_dropped_total")
put(mem, 0, layer=3, **name(mem, 4096, b"blk-0001"))
put(mem, 1, layer=3, dst_len=PAGE, **name(mem, 4096, b"blk-0001"))
done, failed, nbytes = batch(dfd, PREFETCH, rid, 2)
check(got(mem, 0)["status"] == 0 and got(mem, 0)["out_flags"] == 0 and done == 1
      and nbytes == PAGE, f"prefetch without a tier: status 0, no flags: {got(mem, 0)}")
check(got(mem, 1)["status"] == -errno.EINVAL, "prefetch with a destination: -EINVAL")
check(metric("kvfs_ram_budget_bytes") == 0, "ram_cache=0: kvfs_ram_budget_bytes 0")
check(metric("kvfs_ram_prefetch_dropped_total") == (dropped or 0) + 1,
      "the prefetched page is counted as dropped")
put(mem, 0, handle=h2, dst_off=4 * MiB, dst_len=PAGE)
batch(dfd, READ, rid, 1)
check(got(mem, 0)["status"] == 0 and not got(mem, 0)["out_flags"] & DESC_CACHED,
      "a read after it: not from the tier")

# -- LOOKUP blocks --
for i, (layer, nm) in enumerate([(3, b"blk-0001"), (5, b"py-0001"),
                                 (3, b"blk-0001"), (5, b"nope")]):
    put(mem, i, layer=layer, **name(mem, 4096 + 16 * i, nm))
done, failed, nbytes = batch(dfd, LOOKUP, rid, 4, group=2)
check((done, failed, nbytes) == (1, 1, 3 * PAGE), f"group 2: one block hit: {done, failed}")
check(errno_of(batch, dfd, LOOKUP, rid, 3, group=2) == errno.EINVAL, "group not dividing: EINVAL")

# -- a region at an offset, and a data region --
pfd = memory(8 * MiB)
pool = mmap.mmap(pfd, 8 * MiB)
check(errno_of(register, dfd, pfd, offset=4097) == errno.EINVAL, "offset not 4 KiB: EINVAL")
check(errno_of(register, dfd, pfd, offset=8 * MiB) == errno.EINVAL, "offset at the end: EINVAL")
check(errno_of(register, dfd, pfd, offset=4096, flags=0) == errno.EINVAL,
      "offset without KVFS_REGION_AT_OFFSET: EINVAL")
check(errno_of(register, dfd, pfd, offset=2 * MiB, length=6 * MiB + 4096) == errno.EINVAL,
      "offset + length past the end: EINVAL")
prid, plen = register(dfd, pfd, offset=2 * MiB)
check(plen == 6 * MiB, f"length 0 at an offset: to the end of the file ({plen})")
# Region offsets count from the region's start: descriptors at file 2 MiB.
put(pool, 0, handle=h2, dst_off=MiB, dst_len=PAGE, base=2 * MiB)
batch(dfd, READ, prid, 1)
check(got(pool, 0, base=2 * MiB)["status"] == 0 and pool[3 * MiB:3 * MiB + PAGE] == ref,
      "read into a region at an offset lands at offset + dst_off")
# Descriptors in the main region, data in the pool's: dst_off 0 does not
# collide with the descriptor array, which is in the other region.
pool[2 * MiB:3 * MiB] = bytes(MiB)
put(mem, 0, handle=h2, dst_off=0, dst_len=PAGE)
put(mem, 1, handle=h2, dst_off=6 * MiB - 4096, dst_len=PAGE)
done, failed, _ = batch(dfd, READ, rid, 2, flags=DATA_REGION, data=prid)
check(got(mem, 0)["status"] == 0 and pool[2 * MiB:2 * MiB + PAGE] == ref,
      f"read with KVFS_BATCH_DATA_REGION: {got(mem, 0)}")
check(got(mem, 1)["status"] == -errno.ERANGE, "destination outside the data region: -ERANGE")
pool[5 * MiB:5 * MiB + PAGE] = pattern(3)
put(mem, 0, layer=5, dst_off=3 * MiB, dst_len=PAGE, **name(mem, 4096, b"py-pool"))
done, _, _ = batch(dfd, WRITE, rid, 1, flags=DATA_REGION | DURABLE, data=prid)
with open(f"{MODEL}/05/py-pool", "rb") as f:
    check(done == 1 and f.read() == pattern(3), "write from a data region, bit-exact")
for what, kw, want in [
        ("flag without data_region_id", dict(flags=DATA_REGION), errno.EINVAL),
        ("data_region_id without the flag", dict(data=prid), errno.EINVAL),
        ("unknown data region", dict(flags=DATA_REGION, data=12345), errno.ENOENT)]:
    check(errno_of(batch, dfd, READ, rid, 1, **kw) == want, f"read, {what}")
for cmd, nm in [(LOOKUP, "lookup"), (PREFETCH, "prefetch")]:
    check(errno_of(batch, dfd, cmd, rid, 1, flags=DATA_REGION, data=prid) == errno.EINVAL,
          f"KVFS_BATCH_DATA_REGION on a {nm}: EINVAL")

# -- whole-call errors --
put(mem, 0, layer=3, **name(mem, 4096, b"blk-0001"))
layer_fd = os.open(f"{MODEL}/03", os.O_RDONLY | os.O_DIRECTORY)
unknown_cmd = (3 << 30) | (64 << 16) | (0xCF << 8) | 99
for what, fn, want in [
        ("abi 2", lambda: batch(dfd, LOOKUP, rid, 1, abi=2), errno.EPROTO),
        ("on a layer directory", lambda: batch(layer_fd, LOOKUP, rid, 1), errno.ENOTTY),
        ("unknown command", lambda: fcntl.ioctl(dfd, unknown_cmd, bytearray(64), True),
         errno.ENOTTY),
        ("count 0", lambda: batch(dfd, LOOKUP, rid, 0), errno.EINVAL),
        ("count past KVFS_BATCH_MAX", lambda: batch(dfd, LOOKUP, rid, (1 << 20) + 1),
         errno.E2BIG),
        ("desc_off 4", lambda: batch(dfd, LOOKUP, rid, 1, desc_off=4), errno.EINVAL),
        ("array past the region", lambda: batch(dfd, LOOKUP, rid, 2, desc_off=R - 64),
         errno.ERANGE),
        ("lookup flags 1", lambda: batch(dfd, LOOKUP, rid, 1, flags=1), errno.EINVAL),
        ("read group 1", lambda: batch(dfd, READ, rid, 1, group=1), errno.EINVAL),
        ("reserved1", lambda: batch(dfd, LOOKUP, rid, 1, reserved1=1), errno.EINVAL),
        ("unknown region", lambda: batch(dfd, LOOKUP, 12345, 1), errno.ENOENT)]:
    got_errno = errno_of(fn)
    check(got_errno == want, f"{what}: {errno.errorcode.get(got_errno, got_errno)}")


# -- ownership and limits, in child processes --
def child(fn):
    pid = os.fork()
    if pid == 0:
        try:
            code = fn()
        except BaseException as e:      # noqa: B036 (report anything)
            print(f"child: {e!r}", file=sys.stderr)
            code = 99
        os._exit(code)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


check(child(lambda: errno_of(batch, dfd, LOOKUP, rid, 1)) == errno.EPERM,
      "a forked child using the parent's region: EPERM")


def sixty_five():
    fd = memory(4096)
    for i in range(64):
        if errno_of(register, dfd, fd) != 0:
            return 100 + i
    return errno_of(register, dfd, fd)


check(child(sixty_five) == errno.EMFILE, "the 65th region of a process: EMFILE")


def nobody():
    os.setgroups([])
    os.setgid(65534)
    os.setuid(65534)
    d = os.open(MODEL, os.O_RDONLY | os.O_DIRECTORY)
    fd = memory(2 * MiB)
    m = mmap.mmap(fd, 2 * MiB)
    r, _ = register(d, fd)
    put(m, 0, layer=3, dst_off=MiB, dst_len=PAGE, **name(m, 4096, b"blk-0001"))
    batch(d, READ, r, 1)
    if got(m, 0)["status"] or m[MiB:MiB + PAGE] != ref:
        return 1
    put(m, 0, layer=3, dst_off=MiB, dst_len=PAGE, **name(m, 4096, b"mine"))
    batch(d, WRITE, r, 1)
    return 0 if got(m, 0)["status"] == -errno.EACCES else 2


if os.geteuid() == 0:
    check(child(nobody) == 0, "uid 65534 (allow_other) reads; writing in root's layer: -EACCES")

# -- refusals: counted, logged rate-limited --
before = metric("kvfs_fast_refused_total") or 0
for _ in range(40):
    errno_of(batch, dfd, LOOKUP, rid, 1, flags=0x40)
after = metric("kvfs_fast_refused_total") or 0
check(after - before >= 40, f"40 refusals counted: {after - before}")
with open(LOG, errors="replace") as f:
    lines = [ln for ln in f if f"LOOKUP from pid {os.getpid()} " in ln and "refused" in ln]
check(len(lines) <= 10, f"refusals logged at most 10 per 5 s: {len(lines)} lines")

unregister(dfd, rid)
check(errno_of(batch, dfd, LOOKUP, rid, 1) == errno.ENOENT, "after unregistering: ENOENT")
check(errno_of(unregister, dfd, rid) == errno.ENOENT, "unregistering twice: ENOENT")

if failures:
    print(f"{len(failures)} checks failed", file=sys.stderr)
    sys.exit(1)
print("abi.md: the example and every documented case behave as written")
