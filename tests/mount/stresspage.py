"""Self-verifying pages and file helpers for stress.py.

Every page is self-verifying, whatever its name: a 32-byte header (magic,
flags, seed, total length, writer id), a body derived from the seed alone
and a 16-byte BLAKE2b of header and body at the end, so a reader can tell a
complete, correct page from a wrong, torn or truncated one at any moment.
"""
import errno
import hashlib
import os
import random
import struct
import sys

MAGIC = b'KVST'
HDR = struct.Struct('<4sIQQQ')      # magic, flags, seed, length, writer id
TRAILER = 16
FLAG_TWIN = 1                       # same seed under two names (dedup)
MODEL = 's'
CHURN = [0, 1, 2, 3]
FSYNC_LAYER = 5
HOLD_BASE = 10
N_HOLDERS = 2
SIZES = [4096, 8192, 12345, 65536, 100000, 131072, 200003, 262144]
MAXPAGE = 262144
ALLOWED_READ = (errno.ENOENT, errno.EBUSY)


def die(msg):
    print(f'FAIL: {msg}', file=sys.stderr)
    sys.exit(1)


# ---- self-verifying pages ----

def make_page(seed, length, wid=0, flags=0):
    hdr = HDR.pack(MAGIC, flags, seed, length, wid)
    body = random.Random(seed).randbytes(length - HDR.size - TRAILER)
    return hdr + body + hashlib.blake2b(hdr + body, digest_size=TRAILER).digest()


def check_page(buf):
    """(seed, None) for a complete, correct page, else (None, reason)."""
    buf = bytes(buf)
    if len(buf) < HDR.size + TRAILER:
        return None, f'{len(buf)} bytes: too short for a page'
    magic, flags, seed, length, wid = HDR.unpack_from(buf)
    if magic != MAGIC:
        return None, f'bad magic {magic!r} ({len(buf)} bytes)'
    if length != len(buf):
        return None, f'{len(buf)} bytes, the header says {length}'
    if hashlib.blake2b(buf[:-TRAILER], digest_size=TRAILER).digest() != buf[-TRAILER:]:
        return None, f'digest mismatch (seed {seed:#x}, {length} bytes)'
    if buf != make_page(seed, length, wid, flags):
        return None, f'body is not the one of seed {seed:#x}'
    return seed, None


def layer_dir(mnt, layer):
    return os.path.join(mnt, MODEL, f'{layer:02d}')


def is_tmp(name):
    return name.startswith('.t')


def names_of(mnt, layer, tmp=False):
    try:
        return [n for n in os.listdir(layer_dir(mnt, layer)) if tmp or not is_tmp(n)]
    except FileNotFoundError:
        return []


def read_fuse(path, drop=True):
    """The page's bytes through open/read; drop the kernel's cached copy
    first so that the daemon serves them."""
    fd = os.open(path, os.O_RDONLY)
    try:
        return read_fd(fd, drop)
    finally:
        os.close(fd)


def read_fd(fd, drop=True):
    if drop:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    size = os.fstat(fd).st_size
    chunks, off = [], 0
    while True:
        b = os.pread(fd, max(size - off, 0) + 65536, off)
        if not b:
            break
        chunks.append(b)
        off += len(b)
    data = b''.join(chunks)
    if len(data) != size:
        raise AssertionError(f'read {len(data)} bytes, st_size {size}')
    return data


def write_fuse(path, data, fsync=False):
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        off = 0
        while off < len(data):      # in pieces, as a copying tool would
            off += os.write(fd, data[off:off + random.choice((4096, 65536, 1 << 20))])
        if fsync:
            os.fsync(fd)
    finally:
        os.close(fd)


def kvfs_module():
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                    '..', '..', 'client', 'python'))
    import kvfs
    return kvfs
