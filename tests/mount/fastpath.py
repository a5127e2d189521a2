"""Every fast-path ioctl through a real mount, raw (no libkvfs): success
paths, each per-descriptor error next to good descriptors in the same batch,
each whole-call error, the confused-deputy checks, and what happens when the
engine dies or shrinks its memory. argv: MNT LOG TMPDIR."""
import errno
import mmap
import os
import struct
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
import kvfsabi as abi  # noqa: E402
from kvfsabi import expect_err, fail, in_child  # noqa: E402

MNT, LOG, TMP = sys.argv[1:4]
M = os.path.join(MNT, 'm')
MB = 1 << 20


def page_bytes(layer, name):
    with open(os.path.join(M, str(layer), name), 'rb') as f:
        return f.read()


class Region:
    def __init__(self, dirfd, size=16 * MB):
        self.fd = abi.memfd(size)
        self.mem = mmap.mmap(self.fd, size)
        self.rid, self.len = abi.register(dirfd, self.fd)
        self.dirfd = dirfd

    def run(self, cmd, descs, desc_off=0, names_off=MB // 2, **kw):
        abi.place(self.mem, descs, desc_off, names_off)
        res = abi.batch(self.dirfd, cmd, self.rid, desc_off, len(descs), **kw)
        abi.collect(self.mem, descs, desc_off)
        return res


def test_register(dfd):
    r = Region(dfd)
    if r.rid == 0 or r.len != 16 * MB:
        fail(f'register returned id {r.rid:#x} length {r.len}')
    expect_err(errno.EPROTO, abi.register, dfd, r.fd, abi=2)
    expect_err(errno.EINVAL, abi.register, dfd, r.fd, flags=4)            # unknown flag
    expect_err(errno.EINVAL, abi.register, dfd, r.fd, offset=4096)        # offset without its flag
    expect_err(errno.EINVAL, abi.register, dfd, r.fd, flags=1, offset=100)  # not page-aligned
    expect_err(errno.EBADF, abi.register, dfd, 999)
    expect_err(errno.EINVAL, abi.register, dfd, r.fd, length=32 * MB)
    with open(os.path.join(TMP, 'disk-file'), 'w+b') as f:      # not memory
        f.truncate(MB)
        expect_err(errno.EINVAL, abi.register, dfd, f.fileno())
    ro = os.open(f'/proc/self/fd/{r.fd}', os.O_RDONLY)          # not writable
    expect_err(errno.EACCES, abi.register, dfd, ro)
    os.close(ro)
    sparse = abi.memfd(MB, allocate=False)                       # not allocated
    expect_err(errno.EINVAL, abi.register, dfd, sparse)
    os.close(sparse)
    try:                                                         # hugetlbfs
        huge = os.memfd_create('kvfs-huge', os.MFD_HUGETLB)
        os.ftruncate(huge, 2 * MB)
    except OSError:
        huge = None
    if huge is not None:
        expect_err(errno.EINVAL, abi.register, dfd, huge, length=65536)
        os.close(huge)
    rid2, _ = abi.register(dfd, r.fd, length=MB)                 # a prefix
    abi.unregister(dfd, rid2)
    expect_err(errno.ENOENT, abi.unregister, dfd, rid2)
    expect_err(errno.EPROTO, abi.unregister, dfd, r.rid, abi=0)
    # /dev/shm files are memory too.
    shm = f'/dev/shm/kvfs-test-{os.getpid()}'
    fd = os.open(shm, os.O_RDWR | os.O_CREAT, 0o600)
    os.ftruncate(fd, MB)
    os.posix_fallocate(fd, 0, MB)
    rid3, _ = abi.register(dfd, fd)
    abi.unregister(dfd, rid3)
    os.close(fd)
    os.unlink(shm)
    return r


def test_lookup(r):
    names = [b'p%d' % i for i in range(10)] + [b'missing', b'p5']
    ds = [abi.Desc(0, n) for n in names]
    res = r.run(abi.LOOKUP, ds)
    if res['done'] != 10 or res['failed'] != 1:
        fail(f'lookup: {res}')
    for d in ds[:10] + ds[11:]:
        want = len(page_bytes(0, d.name.decode()))
        if d.status != 0 or d.handle == 0 or d.bytes != want:
            fail(f'lookup {d.name}: status {d.status} handle {d.handle} bytes {d.bytes} (want {want})')
    if ds[10].status != -errno.ENOENT or ds[10].handle != 0:
        fail(f'lookup of a missing page: status {ds[10].status} handle {ds[10].handle}')
    if res['bytes'] != sum(d.bytes for d in ds):
        fail(f'lookup bytes {res["bytes"]}')
    # All layers: blocks of (layer 0, layer 1); layer 1 has p0..p4 only.
    ds = [abi.Desc(layer, b'p%d' % i) for i in range(8) for layer in (0, 1)]
    res = r.run(abi.LOOKUP, ds, group=2)
    if res['done'] != 5:
        fail(f'all-layer prefix hit {res["done"]}, want 5')
    expect_err(errno.EINVAL, r.run, abi.LOOKUP, ds[:3], group=2)
    return {d.name: d.handle for d in ds if d.layer == 0 and d.status == 0}


def test_read(r, handles):
    names = [b'p%d' % i for i in range(10)]
    # By name into 4 KiB-aligned destinations (direct), by handle, and into
    # an odd offset (bounced).
    ds = [abi.Desc(0, n, dst_off=2 * MB + i * 128 * 1024, dst_len=128 * 1024)
          for i, n in enumerate(names)]
    ds.append(abi.Desc(handle=handles[b'p3'], dst_off=4 * MB, dst_len=80000))
    ds.append(abi.Desc(0, b'p4', dst_off=5 * MB + 1, dst_len=90000))
    res = r.run(abi.READ, ds)
    if res['done'] != len(ds) or res['failed'] != 0:
        fail(f'read: {res} statuses {[d.status for d in ds]}')
    total = 0
    for d in ds:
        name = d.name.decode() if d.name else 'p3'
        want = page_bytes(0, name)
        got = bytes(r.mem[d.dst_off:d.dst_off + len(want)])
        if got != want or d.bytes != len(want):
            fail(f'read {name} at {d.dst_off}: bytes differ from cat (bytes={d.bytes})')
        total += len(want)
    if res['bytes'] != total:
        fail(f'read bytes {res["bytes"]} != {total}')
    if not ds[-1].out_flags & abi.DESC_BOUNCED or ds[0].out_flags & abi.DESC_BOUNCED:
        fail(f'bounce flags: {ds[0].out_flags} {ds[-1].out_flags}')


def test_layers_by_number(r):
    """Layers are found by number under any of their names ("00007" is
    layer 7), one batch may name many (the daemon keeps those it has looked
    up in a table that grows), and a handle reads from any of them."""
    os.mkdir(os.path.join(M, '00007'))
    with open(os.path.join(M, '00007', 'q'), 'wb') as f:
        f.write(b'seven' * 1000)
    layers = list(range(100, 140))
    for n in layers:
        os.mkdir(os.path.join(M, str(n)))
        with open(os.path.join(M, str(n), 'q'), 'wb') as f:
            f.write(bytes([n]) * (1000 + n))
    ds = [abi.Desc(7, b'q'), abi.Desc(8, b'q'), abi.Desc(70, b'q')]
    ds += [abi.Desc(n, b'q') for n in layers] + [abi.Desc(n, b'q') for n in (7, 99999, 100, 1 << 31)]
    r.run(abi.LOOKUP, ds)
    want = [0, -errno.ENOENT, -errno.ENOENT] + [0] * len(layers) + [0, -errno.ENOENT, 0, -errno.ENOENT]
    if [d.status for d in ds] != want:
        fail(f'lookup by layer number: {[d.status for d in ds]}')
    if ds[0].bytes != 5000 or any(d.bytes != 1000 + d.layer for d in ds[3:3 + len(layers)]):
        fail('lookup by layer number: sizes')
    # By handle, in reverse (each layer found from its inode, after the
    # table grew), into 64 KiB slots.
    found = [d for d in ds if d.status == 0][::-1]
    rd = [abi.Desc(handle=d.handle, dst_off=8 * MB + i * 65536, dst_len=65536)
          for i, d in enumerate(found)]
    res = r.run(abi.READ, rd)
    if res['failed']:
        fail(f'read by handle across layers: {[d.status for d in rd]}')
    for d, src in zip(rd, found):
        want = b'seven' * 1000 if src.layer == 7 else bytes([src.layer]) * (1000 + src.layer)
        if bytes(r.mem[d.dst_off:d.dst_off + d.bytes]) != want:
            fail(f'read by handle, layer {src.layer}: bytes differ')


def test_data_region(dfd):
    """Descriptors and names in one region, page bytes in another: a host
    pool registered at an offset of its file (as a tensor-parallel rank
    maps its part of one pool). Reads and writes land there bit-exact; the
    descriptor region is never written but for the statuses."""
    pool = abi.memfd(8 * MB)
    pmem = mmap.mmap(pool, 8 * MB)
    pmem[:] = b'\xee' * (8 * MB)
    prid, plen = abi.register(dfd, pool, flags=abi.REGION_AT_OFFSET, offset=2 * MB,
                              length=4 * MB)
    if plen != 4 * MB:
        fail(f'region at offset: mapped {plen}')
    ctl = Region(dfd, MB)
    names = [b'p%d' % i for i in range(4)]
    # Destination offsets count from the region's start (file offset 2 MiB);
    # offset 0 of each region holds descriptors there / pool bytes here.
    ds = [abi.Desc(0, n, dst_off=i * MB, dst_len=MB) for i, n in enumerate(names)]
    abi.place(ctl.mem, ds, 0, 65536)
    res = abi.batch(dfd, abi.READ, ctl.rid, 0, len(ds), data_rid=prid)
    abi.collect(ctl.mem, ds, 0)
    if res['done'] != 4:
        fail(f'read into a data region: {res} {[d.status for d in ds]}')
    for i, n in enumerate(names):
        want = page_bytes(0, n.decode())
        at = 2 * MB + i * MB
        if bytes(pmem[at:at + len(want)]) != want:
            fail(f'data region: {n} not at file offset {at}')
    if bytes(pmem[:2 * MB]) != b'\xee' * (2 * MB):
        fail('data region: bytes before the registered offset changed')
    # Writes from the pool: new pages with the pool's bytes.
    wd = [abi.Desc(1, b'dr%d' % i, dst_off=i * MB, dst_len=4096) for i in range(2)]
    abi.place(ctl.mem, wd, 0, 65536)
    res = abi.batch(dfd, abi.WRITE, ctl.rid, 0, 2, flags=abi.WRITE_DURABLE, data_rid=prid)
    abi.collect(ctl.mem, wd, 0)
    if res['done'] != 2:
        fail(f'write from a data region: {res} {[d.status for d in wd]}')
    for i in range(2):
        with open(os.path.join(M, '1', 'dr%d' % i), 'rb') as f:
            if f.read() != bytes(pmem[2 * MB + i * MB:2 * MB + i * MB + 4096]):
                fail('write from a data region: stored bytes differ')
    # Ranges are checked against the data region; bad combinations refused.
    bad = [abi.Desc(0, b'p0', dst_off=4 * MB - 4096, dst_len=MB)]
    abi.place(ctl.mem, bad, 0, 65536)
    abi.batch(dfd, abi.READ, ctl.rid, 0, 1, data_rid=prid)
    abi.collect(ctl.mem, bad, 0)
    if bad[0].status != -errno.ERANGE:
        fail(f'destination past the data region: {bad[0].status}')
    expect_err(errno.EINVAL, abi.batch, dfd, abi.READ, ctl.rid, 0, 1, reserved=prid)
    expect_err(errno.EINVAL, abi.batch, dfd, abi.LOOKUP, ctl.rid, 0, 1, data_rid=prid)
    expect_err(errno.ENOENT, abi.batch, dfd, abi.READ, ctl.rid, 0, 1, data_rid=12345)
    abi.unregister(dfd, prid)
    abi.unregister(dfd, ctl.rid)


def test_bad_descriptors(r, other_handle):
    page = len(page_bytes(0, 'p1'))
    D = 2 * MB
    ds = [
        abi.Desc(0, b'p1', dst_off=D, dst_len=page),                    # good
        abi.Desc(0, b'nope', dst_off=D + MB, dst_len=page),              # ENOENT
        abi.Desc(7, b'p1', dst_off=D + 2 * MB, dst_len=page),            # no layer 7
        abi.Desc(0, b'p2', dst_off=D + 3 * MB, dst_len=100),             # ENOBUFS
        abi.Desc(0, b'p2', dst_off=r.len - 100, dst_len=page),           # ERANGE
        abi.Desc(0, b'p2', dst_off=2 ** 64 - 4096, dst_len=8192),        # overflow
        abi.Desc(0, b'p2', dst_off=D + 10, dst_len=page),                # overlaps #0
        abi.Desc(0, b'x' * 256, dst_off=D + 4 * MB, dst_len=page),       # ENAMETOOLONG
        abi.Desc(0, b'a/b', dst_off=D + 5 * MB, dst_len=page),           # EINVAL
        abi.Desc(0, b'..', dst_off=D + 6 * MB, dst_len=page),            # EINVAL
        abi.Desc(0, b'', dst_off=D + 7 * MB, dst_len=page),              # EINVAL
        abi.Desc(0, b'p2', dst_off=D + 8 * MB, dst_len=page, reserved=1),  # EINVAL
        abi.Desc(handle=other_handle, dst_off=D + 9 * MB, dst_len=page),  # other model
        abi.Desc(handle=2 ** 63, dst_off=D + 10 * MB, dst_len=page),     # no such handle
        abi.Desc(0, b'p2', name_off=r.len - 1, name_len=2, dst_off=D + 11 * MB, dst_len=page),
        abi.Desc(0, b'p2', dst_off=MB // 4 - 4096, dst_len=page),         # over the descriptors
        abi.Desc(0, b'p1', dst_off=D + 12 * MB, dst_len=page),           # good
    ]
    want = [0, -errno.ENOENT, -errno.ENOENT, -errno.ENOBUFS, -errno.ERANGE,
            -errno.ERANGE, -errno.EINVAL, -errno.ENAMETOOLONG, -errno.EINVAL,
            -errno.EINVAL, -errno.EINVAL, -errno.EINVAL, -errno.ENOENT,
            -errno.ENOENT, -errno.ERANGE, -errno.EINVAL, 0]
    r.mem[D + 12 * MB:D + 13 * MB] = b'\xee' * MB
    res = r.run(abi.READ, ds, desc_off=MB // 4, names_off=MB // 2)
    got = [d.status for d in ds]
    if got != want:
        fail(f'statuses {got}\n   want {want}')
    if res['done'] != 2 or res['failed'] != len(ds) - 2:
        fail(f'counts {res}')
    if ds[3].bytes != len(page_bytes(0, 'p2')):
        fail(f'ENOBUFS should report the page size, got {ds[3].bytes}')
    if bytes(r.mem[D:D + page]) != page_bytes(0, 'p1') or \
       bytes(r.mem[D + 12 * MB:D + 12 * MB + page]) != page_bytes(0, 'p1'):
        fail('good descriptors next to bad ones were not delivered')


def test_bad_calls(r, dfd):
    d = [abi.Desc(0, b'p1', dst_off=2 * MB, dst_len=MB)]
    abi.place(r.mem, d, 0, MB // 2)
    for want, kw in [
            (errno.EPROTO, dict(abi=0)),
            (errno.EINVAL, dict(flags=4)),
            (errno.EINVAL, dict(reserved=1)),
            (errno.EINVAL, dict(count=0)),
            (errno.E2BIG, dict(count=abi.BATCH_MAX + 1)),
            (errno.ERANGE, dict(count=abi.BATCH_MAX)),                  # past the region
            (errno.ERANGE, dict(desc_off=r.len)),
            (errno.ERANGE, dict(desc_off=2 ** 64 - 8)),
            (errno.EINVAL, dict(desc_off=4)),
            (errno.EINVAL, dict(group=2)),                              # group is for lookups
            (errno.EINVAL, dict(group=1)),
            (errno.ENOENT, dict(rid=12345)),
    ]:
        args = dict(rid=r.rid, desc_off=0, count=1)
        args.update(kw)
        rid, off, count = args.pop('rid'), args.pop('desc_off'), args.pop('count')
        expect_err(want, abi.batch, dfd, abi.READ, rid, off, count, **args)
    # The wrong kind of file, and an unknown command.
    for path in (MNT, os.path.join(M, '0'), os.path.join(M, '0', 'p1')):
        fd = os.open(path, os.O_RDONLY)
        expect_err(errno.ENOTTY, abi.batch, fd, abi.READ, r.rid, 0, 1)
        expect_err(errno.ENOTTY, abi.register, fd, r.fd)
        os.close(fd)
    import fcntl
    expect_err(errno.ENOTTY, fcntl.ioctl, dfd, abi._ioc(3, 9, 64), bytearray(64))


def test_ownership(r):
    def use_parents_region():
        dfd = os.open(M, os.O_RDONLY)
        try:
            abi.batch(dfd, abi.READ, r.rid, 0, 1)
        except OSError as e:
            return 0 if e.errno == errno.EPERM else e.errno
        return 1
    # Another process of the same uid: not its region.
    if in_child(use_parents_region) != 0:
        fail('another process could use a region it did not register')
    # Another uid, even holding the memfd (inherited): not its memory.
    def as_nobody():
        os.setgid(65534)
        os.setuid(65534)
        rc = use_parents_region()
        if rc:
            return 10 + rc
        dfd = os.open(M, os.O_RDONLY)
        try:
            abi.register(dfd, r.fd)
        except OSError as e:
            return 0 if e.errno == errno.EACCES else 20 + e.errno
        return 2
    if os.getuid() == 0 and in_child(as_nobody) != 0:
        fail('uid 65534 used or registered memory it does not own')


def test_permissions():
    """What open(2) refuses, the fast path refuses: layer 1 is 0700 and
    page 'secret' of layer 0 was created 0400, both owned by root."""
    if os.getuid() != 0:
        return
    os.chmod(os.path.join(M, '1'), 0o700)
    def as_nobody():
        os.setgid(65534)
        os.setuid(65534)
        dfd = os.open(M, os.O_RDONLY)
        r = Region(dfd, MB * 4)
        ds = [abi.Desc(0, b'p1', dst_off=MB, dst_len=MB),
              abi.Desc(0, b'secret', dst_off=2 * MB, dst_len=MB),
              abi.Desc(1, b'p1', dst_off=3 * MB, dst_len=MB)]
        r.run(abi.READ, ds, names_off=MB // 2)
        st = [d.status for d in ds]
        if st != [0, -errno.EACCES, -errno.EACCES]:
            print('statuses', st, file=sys.stderr)
            return 3
        try:
            open(os.path.join(M, '0', 'secret'), 'rb')
        except PermissionError:
            return 0
        return 4
    rc = in_child(as_nobody)
    os.chmod(os.path.join(M, '1'), 0o755)
    if rc != 0:
        fail(f'permission checks as uid 65534: child exit {rc}')


def test_engine_death():
    """A process that registers and dies leaves nothing behind."""
    pids = []
    def register_and_die():
        dfd = os.open(M, os.O_RDONLY)
        Region(dfd, MB)
        return 0
    pid = os.fork()
    if pid == 0:
        os._exit(register_and_die())
    pids.append(pid)
    os.waitpid(pid, 0)
    for _ in range(50):
        with open(LOG) as f:
            if f'pid {pid} exited, dropping its region' in f.read():
                return
        time.sleep(0.1)
    fail(f'the region of dead pid {pid} was not dropped (daemon log)')


def test_shrunk_region(dfd):
    """The engine truncates its memfd under the daemon: the call fails with
    EFAULT, the daemon survives, and other regions still work."""
    fd = abi.memfd(8 * MB)
    mem = mmap.mmap(fd, 8 * MB)
    rid, _ = abi.register(dfd, fd)
    ds = [abi.Desc(0, b'p%d' % i, dst_off=MB * (1 + i // 2) + (i % 2) * 5, dst_len=200000)
          for i in range(6)]
    abi.place(mem, ds, 0, MB // 2)
    os.ftruncate(fd, 0)
    expect_err(errno.EFAULT, abi.batch, dfd, abi.READ, rid, 0, len(ds))
    expect_err(errno.EFAULT, abi.batch, dfd, abi.LOOKUP, rid, 0, 1)
    abi.unregister(dfd, rid)
    mem.close()
    os.close(fd)


def test_corrupt_page(r):
    """A flipped byte on disk: EIO for that page, its destination zeroed."""
    p = os.path.join(M, '0', 'p7')
    want = page_bytes(0, 'p7')
    seg = os.getxattr(p, 'user.kvfs.segment').decode()
    ext = dict(kv.split('=') for kv in os.getxattr(p, 'user.kvfs.extent').decode().split())
    off = int(ext['offset']) + 100
    with open(seg, 'r+b') as f:
        f.seek(off)
        b = f.read(1)
        f.seek(off)
        f.write(bytes([b[0] ^ 0xff]))
        f.flush()
        os.fsync(f.fileno())
    D = 3 * MB
    r.mem[D:D + 2 * MB] = b'\xaa' * (2 * MB)
    ds = [abi.Desc(0, b'p7', dst_off=D, dst_len=MB), abi.Desc(0, b'p8', dst_off=D + MB, dst_len=MB)]
    res = r.run(abi.READ, ds)
    if ds[0].status != -errno.EIO or ds[1].status != 0 or res['done'] != 1:
        fail(f'corrupt page: statuses {[d.status for d in ds]}')
    if bytes(r.mem[D:D + len(want)]) != bytes(len(want)):
        fail('the destination of a page that failed its checksum was not zeroed')
    with open(seg, 'r+b') as f:    # repair for the rest of the test
        f.seek(off)
        f.write(b)


def test_memory_replaced(r):
    """The engine punches its destination pages out between reads. While
    they are holes the daemon refuses them (-EFAULT: it never allocates the
    engine's memory); once the engine touches them again (fresh pages), a
    ring that registered the old pages must not turn that into a checksum
    failure or lost bytes."""
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_long, ctypes.c_long]
    D = 6 * MB
    for rnd in range(6):      # enough calls to meet the threads that registered
        ds = [abi.Desc(0, b'p%d' % i, dst_off=D + i * 128 * 1024, dst_len=128 * 1024)
              for i in range(4)]
        r.run(abi.READ, ds)
        if [d.status for d in ds] != [0] * 4:
            fail(f'read after the region memory was replaced: {[d.status for d in ds]}')
        for i, d in enumerate(ds):
            if bytes(r.mem[d.dst_off:d.dst_off + d.bytes]) != page_bytes(0, 'p%d' % i):
                fail('bytes after the region memory was replaced')
        if libc.fallocate(r.fd, 3, D, MB) != 0:     # PUNCH_HOLE | KEEP_SIZE
            fail(f'fallocate punch: errno {ctypes.get_errno()}')
        blocks = os.fstat(r.fd).st_blocks
        r.run(abi.READ, ds)
        if [d.status for d in ds] != [-errno.EFAULT] * 4:
            fail(f'read into punched memory: {[d.status for d in ds]}, want EFAULT')
        if os.fstat(r.fd).st_blocks != blocks:
            fail('the daemon allocated punched region memory')
        r.mem[D:D + MB] = bytes(MB) if rnd % 2 else b'\x55' * MB   # the engine's own pages


def main():
    dfd = os.open(M, os.O_RDONLY | os.O_DIRECTORY)
    other = os.open(os.path.join(MNT, 'other'), os.O_RDONLY)
    r = test_register(dfd)
    handles = test_lookup(r)
    ro = Region(other, MB)
    d = [abi.Desc(0, b'x')]
    ro.run(abi.LOOKUP, d, names_off=4096)
    test_read(r, handles)
    test_layers_by_number(r)
    test_data_region(dfd)
    test_bad_descriptors(r, d[0].handle)
    test_bad_calls(r, dfd)
    test_ownership(r)
    test_permissions()
    test_engine_death()
    test_shrunk_region(dfd)
    test_corrupt_page(r)
    test_memory_replaced(r)
    # Still serving after all of that.
    ds = [abi.Desc(0, b'p9', dst_off=2 * MB, dst_len=MB)]
    r.run(abi.READ, ds)
    if ds[0].status or bytes(r.mem[2 * MB:2 * MB + ds[0].bytes]) != page_bytes(0, 'p9'):
        fail('read after the error cases')
    abi.unregister(dfd, r.rid)
    expect_err(errno.ENOENT, abi.batch, dfd, abi.READ, r.rid, 0, 1)
    print('fast path: all checks passed')


main()
