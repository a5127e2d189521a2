"""The fast-path ABI (client/kvfs_ioctl.h) spelled out in Python, for tests
that must send malformed calls no library would build."""
import errno
import fcntl
import os
import struct
import sys

ABI = 1
NAME_MAX = 255
BATCH_MAX = 1 << 20
REGION_FMT = '<IIiIQQQQ'       # abi flags fd reserved0 length region_id reserved[2]
DESC_FMT = '<QQIIQQiIQQ'       # handle name_off name_len layer dst_off dst_len status out_flags bytes reserved
BATCH_FMT = '<IIQQIIIIQQQ'     # abi flags region_id desc_off count group done failed bytes reserved[2]
assert struct.calcsize(REGION_FMT) == 48
assert struct.calcsize(DESC_FMT) == 64
assert struct.calcsize(BATCH_FMT) == 64
DESC_RAM, DESC_BOUNCED = 1, 2


def _ioc(direction, nr, size):
    return (direction << 30) | (size << 16) | (0xCF << 8) | nr


REGISTER = _ioc(3, 1, 48)
UNREGISTER = _ioc(1, 2, 48)
READ = _ioc(3, 3, 64)
LOOKUP = _ioc(3, 4, 64)
WRITE = _ioc(3, 5, 64)
PREFETCH = _ioc(3, 6, 64)
WRITE_DURABLE, WRITE_REPLACE = 1, 2


REGION_AT_OFFSET = 1
BATCH_DATA_REGION = 1 << 8


def register(dirfd, memfd, length=0, abi=ABI, flags=0, offset=0):
    """offset goes in reserved[0] (KVFS_REGION_AT_OFFSET's field)."""
    buf = bytearray(struct.pack(REGION_FMT, abi, flags, memfd, 0, length, 0, offset, 0))
    fcntl.ioctl(dirfd, REGISTER, buf, True)
    f = struct.unpack(REGION_FMT, buf)
    return f[5], f[4]           # region id, mapped length


def unregister(dirfd, rid, abi=ABI):
    fcntl.ioctl(dirfd, UNREGISTER, struct.pack(REGION_FMT, abi, 0, -1, 0, 0, rid, 0, 0))


def batch(dirfd, cmd, rid, desc_off, count, group=0, abi=ABI, flags=0, reserved=0,
          data_rid=None):
    """data_rid: KVFS_BATCH_DATA_REGION's region (reserved[0])."""
    if data_rid is not None:
        flags |= BATCH_DATA_REGION
        reserved = data_rid
    buf = bytearray(struct.pack(BATCH_FMT, abi, flags, rid, desc_off, count, group,
                                0, 0, 0, reserved, 0))
    fcntl.ioctl(dirfd, cmd, buf, True)
    f = struct.unpack(BATCH_FMT, buf)
    return {'done': f[6], 'failed': f[7], 'bytes': f[8]}


class Desc:
    """A descriptor as the engine writes it, and what the daemon returned."""

    def __init__(self, layer=0, name=b'', handle=0, dst_off=0, dst_len=0,
                 name_off=None, name_len=None, reserved=0):
        self.layer, self.name, self.handle = layer, name, handle
        self.dst_off, self.dst_len, self.reserved = dst_off, dst_len, reserved
        self.name_off, self.name_len = name_off, name_len
        self.status = self.out_flags = self.bytes = None


def place(mem, descs, desc_off, names_off):
    """Write descs at desc_off and their names from names_off on."""
    off = names_off
    for i, d in enumerate(descs):
        if d.name_off is None:
            mem[off:off + len(d.name)] = d.name
            d.name_off = off
            off += len(d.name)
        nl = len(d.name) if d.name_len is None else d.name_len
        struct.pack_into(DESC_FMT, mem, desc_off + 64 * i, d.handle, d.name_off, nl,
                         d.layer, d.dst_off, d.dst_len, 0x7777, 0x7777, 0x7777, d.reserved)


def collect(mem, descs, desc_off):
    for i, d in enumerate(descs):
        f = struct.unpack_from(DESC_FMT, mem, desc_off + 64 * i)
        d.handle, d.status, d.out_flags, d.bytes = f[0], f[6], f[7], f[8]
    return descs


def memfd(size, name='kvfs-test', allocate=True):
    """Memory as an engine would register it: allocated by its owner."""
    fd = os.memfd_create(name, os.MFD_CLOEXEC)
    os.ftruncate(fd, size)
    if allocate:
        os.posix_fallocate(fd, 0, size)
    return fd


# ---- test helpers shared by fastpath.py and fastwrite.py ----

def fail(msg):
    print('FAIL:', msg, file=sys.stderr)
    sys.exit(1)


def expect_err(want, fn, *args, **kw):
    try:
        fn(*args, **kw)
    except OSError as e:
        if e.errno != want:
            fail(f'{fn.__name__}{args}: got {errno.errorcode.get(e.errno)}, want {errno.errorcode[want]}')
        return
    fail(f'{fn.__name__}{args}: succeeded, want {errno.errorcode[want]}')


def in_child(fn):
    """Run fn in a forked child; its exit status is the result."""
    pid = os.fork()
    if pid == 0:
        try:
            rc = fn()
        except BaseException as e:  # noqa: B902
            print('child:', repr(e), file=sys.stderr)
            rc = 99
        os._exit(rc)
    _, st = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(st)
