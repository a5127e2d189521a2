"""KVFS_IOC_WRITE through a real mount, raw (no libkvfs): pages written by
the batch read back bit-exact through FUSE read(2) and the fast-path READ,
right after the call returns; EEXIST without KVFS_WRITE_REPLACE and
replacement with it (the old bytes are never served again, whichever path
reads); each per-descriptor error next to good descriptors in the same
batch; whole-call errors; the permission checks open(O_CREAT) would make,
as another uid; and durability across kill -9 (the phases run by
fastwrite.sh around killing the daemon).

usage: fastwrite.py MNT LOG TMPDIR main
       fastwrite.py MNT LOG TMPDIR crash DAEMON_PID   (writes, then kill -9)
       fastwrite.py MNT LOG TMPDIR verify            (after the remount)
"""
import errno
import mmap
import os
import signal
import stat
import struct
import sys

sys.path.insert(0, os.path.dirname(__file__))
import kvfsabi as abi  # noqa: E402
from kvfsabi import expect_err, fail, in_child  # noqa: E402
from pagetool import content  # noqa: E402

MNT, LOG, TMP = sys.argv[1:4]
M = os.path.join(MNT, 'm')          # no geometry; max_page=1M (fastwrite.sh)
TINY = os.path.join(MNT, 'tiny')    # geometry: 256-byte pages
K = os.path.join(MNT, 'k')          # the kill -9 model
MB = 1 << 20
MAX_PAGE = MB
DESC_OFF, NAMES_OFF, DATA_OFF = 0, MB // 2, 2 * MB


def fuse_read(model, layer, name):
    """A page through open/read; layer directories are '0'.. in M and K,
    '00'.. in TINY (made by kvfs model create)."""
    ldir = '%02d' % layer if model == TINY else str(layer)
    with open(os.path.join(model, ldir, name), 'rb') as f:
        return f.read()


def stats():
    text = os.getxattr(MNT, 'user.kvfs.stats').decode()
    return {k: int(v) for k, v in (line.split() for line in text.splitlines())}


class Region:
    """A registered memfd; pages' bytes are laid out from DATA_OFF on."""

    def __init__(self, dirfd, size=32 * MB):
        self.fd = abi.memfd(size)
        self.mem = mmap.mmap(self.fd, size)
        self.rid, self.len = abi.register(dirfd, self.fd)
        self.dirfd = dirfd

    def run(self, cmd, descs, dirfd=None, desc_off=DESC_OFF, names_off=NAMES_OFF, **kw):
        abi.place(self.mem, descs, desc_off, names_off)
        res = abi.batch(self.dirfd if dirfd is None else dirfd, cmd, self.rid,
                        desc_off, len(descs), **kw)
        abi.collect(self.mem, descs, desc_off)
        return res

    def stage(self, pages, off=DATA_OFF, align=4096, skew=0):
        """Copy (layer, name, bytes) pages into the region; return write
        descriptors whose sources are those copies."""
        ds = []
        for layer, name, data in pages:
            self.mem[off + skew:off + skew + len(data)] = data
            ds.append(abi.Desc(layer, name, dst_off=off + skew, dst_len=len(data)))
            off += (len(data) + skew + align - 1) // align * align
        return ds

    def write(self, pages, flags=0, dirfd=None, skew=0):
        ds = self.stage(pages, skew=skew)
        res = self.run(abi.WRITE, ds, dirfd=dirfd, flags=flags)
        return res, ds

    def fast_read(self, layer, name=None, handle=0, size=2 * MB, dirfd=None):
        """One page through KVFS_IOC_READ: (status, bytes)."""
        off = self.len - size
        self.mem[off:off + size] = b'\xee' * size
        d = abi.Desc(layer, name or b'', handle=handle, dst_off=off, dst_len=size)
        self.run(abi.READ, [d], dirfd=dirfd, desc_off=self.len - size - 4096,
                 names_off=self.len - size - 2048)
        return d.status, bytes(self.mem[off:off + d.bytes]) if d.status == 0 else None


def check_back(r, model, layer, name, want, handle=None, dirfd=None):
    """The page reads back bit-exact by both paths (and by handle)."""
    got = fuse_read(model, layer, name.decode())
    if got != want:
        fail(f'FUSE read of {model}/{layer}/{name}: {len(got)} bytes differ from what was written')
    st, got = r.fast_read(layer, name, dirfd=dirfd)
    if st != 0 or got != want:
        fail(f'fast READ of {layer}/{name}: status {st}, bytes {"differ" if got else None}')
    if handle is not None:
        st, got = r.fast_read(layer, handle=handle)
        if st != 0 or got != want:
            fail(f'fast READ of {layer}/{name} by its write handle: status {st}')


# ---- success ----

def test_round_trip(r):
    sizes = [1, 4095, 4096, 5000, 65536, 300001, MAX_PAGE]
    pages = [(i % 2, b'rt%d' % i, os.urandom(n)) for i, n in enumerate(sizes)]
    before = stats()
    res, ds = r.write(pages)
    if res != {'done': len(pages), 'failed': 0, 'bytes': sum(sizes)}:
        fail(f'round trip: {res} statuses {[d.status for d in ds]}')
    for d, (layer, name, data) in zip(ds, pages):
        if d.status or d.bytes != len(data) or d.handle == 0:
            fail(f'{name}: status {d.status} bytes {d.bytes} handle {d.handle}')
    # The daemon copied the sources: the engine may reuse them at once.
    r.mem[DATA_OFF:DATA_OFF + 4 * MB] = b'\x5a' * (4 * MB)
    for d, (layer, name, data) in zip(ds, pages):
        check_back(r, M, layer, name, data, d.handle)
        st = os.stat(os.path.join(M, str(layer), name.decode()))
        if st.st_size != len(data) or stat.S_IMODE(st.st_mode) != 0o444 or st.st_uid != os.getuid():
            fail(f'{name}: size {st.st_size} mode {oct(st.st_mode)} uid {st.st_uid}')
    # The handle a write returns is the one a lookup gives.
    look = [abi.Desc(layer, name) for layer, name, _ in pages]
    r.run(abi.LOOKUP, look)
    if [d.handle for d in look] != [d.handle for d in ds]:
        fail('write handles differ from lookup handles')
    after = stats()
    if after['fast_write_batches'] != before['fast_write_batches'] + 1 or \
       after['fast_pages_written'] != before['fast_pages_written'] + len(pages):
        fail(f'stats: {before} -> {after}')


def test_setgid_layer(r):
    """A page written into a setgid layer takes its group, as a file."""
    layer = os.path.join(M, '1')
    st0 = os.stat(layer)
    os.chown(layer, -1, 456)
    os.chmod(layer, stat.S_IMODE(st0.st_mode) | stat.S_ISGID)
    try:
        res, ds = r.write([(1, b'sgid', b'g' * 4096)])
        if ds[0].status:
            fail(f'write into a setgid layer: {ds[0].status}')
        gid = os.stat(os.path.join(layer, 'sgid')).st_gid
        if gid != 456:
            fail(f'fast-path page in a setgid layer of group 456: gid {gid}')
    finally:
        os.chmod(layer, stat.S_IMODE(st0.st_mode))
        os.chown(layer, -1, st0.st_gid)


def test_unaligned_sources(r):
    """Sources need no alignment: the daemon copies them."""
    pages = [(0, b'odd%d' % i, os.urandom(7000 + i)) for i in range(5)]
    res, ds = r.write(pages, skew=3)
    if res['done'] != 5:
        fail(f'unaligned sources: {[d.status for d in ds]}')
    for layer, name, data in pages:
        check_back(r, M, layer, name, data)


def test_shared_sources(r):
    """Two pages may come from the same source bytes (sources overlap)."""
    data = os.urandom(20000)
    r.mem[DATA_OFF:DATA_OFF + len(data)] = data
    ds = [abi.Desc(1, b'same-a', dst_off=DATA_OFF, dst_len=len(data)),
          abi.Desc(1, b'same-b', dst_off=DATA_OFF + 100, dst_len=len(data) - 100)]
    res = r.run(abi.WRITE, ds)
    if res['done'] != 2:
        fail(f'overlapping sources: {[d.status for d in ds]}')
    check_back(r, M, 1, b'same-a', data)
    check_back(r, M, 1, b'same-b', data[100:])


def test_exists_and_replace(r):
    old = os.urandom(40000)
    _, ds = r.write([(0, b'rep', old)])
    old_handle = ds[0].handle
    check_back(r, M, 0, b'rep', old)          # the kernel now caches the name
    res, ds = r.write([(0, b'rep', os.urandom(40000))])
    if ds[0].status != -errno.EEXIST or res['failed'] != 1 or ds[0].handle != 0:
        fail(f'existing name without REPLACE: status {ds[0].status} handle {ds[0].handle}')
    check_back(r, M, 0, b'rep', old)
    # Replace it again and again: after each return, both paths give the new
    # bytes and never the old ones, and the old handle names nothing.
    for k in range(20):
        new = os.urandom(40000 + k)
        res, ds = r.write([(0, b'rep', new)], flags=abi.WRITE_REPLACE)
        if ds[0].status != 0 or ds[0].handle in (0, old_handle):
            fail(f'replace {k}: status {ds[0].status} handle {ds[0].handle}')
        check_back(r, M, 0, b'rep', new, ds[0].handle)
        st, _ = r.fast_read(0, handle=old_handle)
        if st != -errno.ENOENT:
            fail(f'replace {k}: the replaced page\'s handle gave {st}, want ENOENT')
        old_handle = ds[0].handle
    # REPLACE of a name that does not exist just creates it.
    _, ds = r.write([(0, b'rep-new', b'n' * 10)], flags=abi.WRITE_REPLACE)
    if ds[0].status:
        fail(f'REPLACE of a new name: {ds[0].status}')
    # A page still being written through FUSE is its writer's: EBUSY.
    with open(os.path.join(M, '0', 'busy'), 'wb') as f:
        f.write(b'x' * 10)
        f.flush()
        _, ds = r.write([(0, b'busy', b'y' * 10)], flags=abi.WRITE_REPLACE)
        if ds[0].status != -errno.EBUSY:
            fail(f'replacing a page being written: {ds[0].status}, want EBUSY')
    if fuse_read(M, 0, 'busy') != b'x' * 10:
        fail('the page being written was changed')


def test_replace_same_bytes(r):
    """Replacing a page with its own bytes (dedup would find the very extent
    being released) and with a twin's bytes: refcounts stay right in the
    manifest (the clean remount in fastwrite.sh loads and checks them)."""
    data = os.urandom(24576)
    for flags in (abi.WRITE_DURABLE, abi.WRITE_DURABLE | abi.WRITE_REPLACE,
                  abi.WRITE_DURABLE | abi.WRITE_REPLACE):
        _, ds = r.write([(0, b'same-rep', data)], flags=flags)
        if ds[0].status:
            fail(f'replace with the same bytes: {ds[0].status}')
        check_back(r, M, 0, b'same-rep', data, ds[0].handle)
    _, ds = r.write([(1, b'same-twin', data)], flags=abi.WRITE_DURABLE)
    twin = os.path.join(M, '1', 'same-twin')
    rep = os.path.join(M, '0', 'same-rep')
    if os.getxattr(twin, 'user.kvfs.extent') != os.getxattr(rep, 'user.kvfs.extent'):
        fail('a twin written after the page is durable does not share its extent')
    _, ds = r.write([(0, b'same-rep', data)], flags=abi.WRITE_DURABLE | abi.WRITE_REPLACE)
    if ds[0].status:
        fail(f'replace of a shared page with its own bytes: {ds[0].status}')
    if os.getxattr(twin, 'user.kvfs.extent') != os.getxattr(rep, 'user.kvfs.extent'):
        fail('the twin still holds the extent: the replacement should share it')
    for p in (twin, rep):
        if fuse_read(M, int(p.split('/')[-2]), p.split('/')[-1]) != data:
            fail(f'{p}: wrong bytes after replace')


def test_durable_flag(r):
    pages = [(1, b'dur%d' % i, os.urandom(8192)) for i in range(16)]
    res, ds = r.write(pages, flags=abi.WRITE_DURABLE)
    if res['done'] != 16:
        fail(f'durable batch: {[d.status for d in ds]}')
    for layer, name, data in pages:
        state = os.getxattr(os.path.join(M, str(layer), name.decode()), 'user.kvfs.state')
        if state != b'durable':
            fail(f'{name} after a DURABLE batch returned: state {state}')
        check_back(r, M, layer, name, data)


def test_large_batch(r):
    """Thousands of pages in one call, more bytes than one chunk stages."""
    n = 3000
    pages = [(i % 2, b'big%05d' % i, content('big%d' % i, 4096 + i % 7)) for i in range(n)]
    ds = r.stage(pages)
    res = r.run(abi.WRITE, ds, desc_off=DESC_OFF, names_off=NAMES_OFF - 128 * 1024,
                flags=abi.WRITE_DURABLE)
    if res['done'] != n or res['failed']:
        fail(f'large batch: {res}')
    for i in range(0, n, 97):
        layer, name, data = pages[i]
        check_back(r, M, layer, name, data)


def test_one_transaction(r):
    """A batch that fits one chunk (half of dirty=4M, commit_batch=1000)
    commits in one manifest transaction."""
    fd = os.open(M, os.O_RDONLY | os.O_DIRECTORY)
    os.fsync(fd)                       # nothing else queued
    os.close(fd)
    n = 200
    pages = [(i % 2, b'tx%05d' % i, content('tx%d' % i, 8192)) for i in range(n)]
    before = stats()['commits']
    res = r.run(abi.WRITE, r.stage(pages), flags=abi.WRITE_DURABLE)
    if res['done'] != n:
        fail(f'one-transaction batch: {res}')
    if stats()['commits'] - before != 1:
        fail(f'{n} pages took {stats()["commits"] - before} transactions, not 1')


# ---- refusals ----

def test_bad_descriptors(r, tiny_fd):
    good = os.urandom(5000)
    D = DATA_OFF
    r.mem[D:D + MAX_PAGE + 1] = os.urandom(MAX_PAGE + 1)
    mk = abi.Desc
    ds = [
        mk(0, b'g1', dst_off=D, dst_len=5000),                          # good
        mk(0, b'', dst_off=D, dst_len=100),                             # EINVAL
        mk(0, b'a/b', dst_off=D, dst_len=100),                          # EINVAL
        mk(0, b'..', dst_off=D, dst_len=100),                           # EINVAL
        mk(0, b'nul\0x', dst_off=D, dst_len=100),                       # EINVAL
        mk(0, b'x' * 256, dst_off=D, dst_len=100),                      # ENAMETOOLONG
        mk(7, b'nolayer', dst_off=D, dst_len=100),                      # ENOENT
        mk(0, b'twice', dst_off=D, dst_len=100),                        # EINVAL (dup)
        mk(0, b'twice', dst_off=D + 8192, dst_len=200),                 # EINVAL (dup)
        mk(1, b'twice', dst_off=D, dst_len=300),                        # good: other layer
        mk(0, b'outside', dst_off=r.len - 100, dst_len=200),            # ERANGE
        mk(0, b'wrap', dst_off=2 ** 64 - 4096, dst_len=8192),           # ERANGE
        mk(0, b'nm', name_off=r.len - 1, name_len=2, dst_off=D, dst_len=10),  # ERANGE
        mk(0, b'hdl', handle=12345, dst_off=D, dst_len=100),            # EINVAL
        mk(0, b'rsv', dst_off=D, dst_len=100, reserved=1),              # EINVAL
        mk(0, b'empty', dst_off=D, dst_len=0),                          # EINVAL
        mk(0, b'overdesc', dst_off=DESC_OFF + 64, dst_len=100),         # EINVAL
        mk(0, b'rt0', dst_off=D, dst_len=100),                          # EEXIST
        mk(0, b'huge', dst_off=D, dst_len=MAX_PAGE + 1),                # EFBIG
        mk(1, b'g2', dst_off=D + 100, dst_len=4000),                    # good
    ]
    want = [0, -errno.EINVAL, -errno.EINVAL, -errno.EINVAL, -errno.EINVAL,
            -errno.ENAMETOOLONG, -errno.ENOENT, -errno.EINVAL, -errno.EINVAL, 0,
            -errno.ERANGE, -errno.ERANGE, -errno.ERANGE, -errno.EINVAL, -errno.EINVAL,
            -errno.EINVAL, -errno.EINVAL, -errno.EEXIST, -errno.EFBIG, 0]
    r.mem[D:D + 5000] = good
    res = r.run(abi.WRITE, ds)
    got = [d.status for d in ds]
    if got != want:
        fail(f'statuses {got}\n   want {want}')
    if res['done'] != 3 or res['failed'] != len(ds) - 3 or res['bytes'] != 5000 + 300 + 4000:
        fail(f'counts {res}')
    for d, w in zip(ds, want):
        if w and (d.handle or d.bytes):
            fail(f'failed descriptor {d.name} reports handle {d.handle} bytes {d.bytes}')
    check_back(r, M, 0, b'g1', good)
    check_back(r, M, 1, b'g2', good[100:4100])
    for name in ('twice', 'outside', 'wrap', 'hdl', 'rsv', 'empty', 'overdesc', 'huge'):
        if os.path.exists(os.path.join(M, '0', name)):
            fail(f'refused descriptor {name} left a page behind')
    # The model's geometry decides the size: 256 bytes exactly.
    g = os.urandom(256)
    r.mem[D:D + 257] = g + b'!'
    ds = [mk(0, b'ok', dst_off=D, dst_len=256), mk(0, b'short', dst_off=D, dst_len=255),
          mk(1, b'long', dst_off=D, dst_len=257), mk(2, b'nolayer', dst_off=D, dst_len=256)]
    r.run(abi.WRITE, ds, dirfd=tiny_fd)
    if [d.status for d in ds] != [0, -errno.EINVAL, -errno.EINVAL, -errno.ENOENT]:
        fail(f'geometry statuses {[d.status for d in ds]}')
    check_back(r, TINY, 0, b'ok', g, dirfd=tiny_fd)


def test_bad_calls(r, dfd):
    d = r.stage([(0, b'bc', b'z' * 100)])
    abi.place(r.mem, d, DESC_OFF, NAMES_OFF)
    for want, kw in [
            (errno.EPROTO, dict(abi=0)),
            (errno.EINVAL, dict(flags=4)),
            (errno.EINVAL, dict(flags=1 << 31)),
            (errno.EINVAL, dict(reserved=1)),
            (errno.EINVAL, dict(count=0)),
            (errno.E2BIG, dict(count=abi.BATCH_MAX + 1)),
            (errno.ERANGE, dict(desc_off=r.len)),
            (errno.EINVAL, dict(desc_off=4)),
            (errno.EINVAL, dict(group=1)),
            (errno.ENOENT, dict(rid=12345)),
    ]:
        args = dict(rid=r.rid, desc_off=DESC_OFF, count=1)
        args.update(kw)
        rid, off, count = args.pop('rid'), args.pop('desc_off'), args.pop('count')
        expect_err(want, abi.batch, dfd, abi.WRITE, rid, off, count, **args)
    if os.path.exists(os.path.join(M, '0', 'bc')):
        fail('a refused call stored a page')
    for path in (MNT, os.path.join(M, '0'), os.path.join(M, '0', 'rt0')):
        fd = os.open(path, os.O_RDONLY)
        expect_err(errno.ENOTTY, abi.batch, fd, abi.WRITE, r.rid, DESC_OFF, 1)
        os.close(fd)
    # READ and LOOKUP still refuse the write flags.
    expect_err(errno.EINVAL, abi.batch, dfd, abi.READ, r.rid, DESC_OFF, 1, flags=abi.WRITE_DURABLE)


def test_shrunk_region(dfd):
    """Sources the engine truncated away: EFAULT, the daemon keeps serving."""
    fd = abi.memfd(4 * MB)
    mem = mmap.mmap(fd, 4 * MB)
    rid, _ = abi.register(dfd, fd)
    ds = [abi.Desc(0, b'shrunk%d' % i, dst_off=2 * MB + i * 8192, dst_len=8192) for i in range(3)]
    abi.place(mem, ds, 0, MB // 2)
    os.ftruncate(fd, 0)
    expect_err(errno.EFAULT, abi.batch, dfd, abi.WRITE, rid, 0, len(ds))
    abi.unregister(dfd, rid)
    mem.close()
    os.close(fd)


# ---- permissions, as another uid ----

def as_user(uid, gid, groups, fn):
    def child():
        os.setgroups(groups)
        os.setresgid(gid, gid, gid)
        os.setresuid(uid, uid, uid)
        dfd = os.open(M, os.O_RDONLY)
        return fn(Region(dfd, 4 * MB))
    return in_child(child)


def test_permissions():
    """Layer 2 is root's 0755: nobody may not create there. Layer 3 is
    0775 group 4242: a member of that supplementary group may. Layer 4 is
    sticky 01777: nobody may add pages but not replace root's."""
    if os.getuid() != 0:
        return
    for layer, mode, gid in (('2', 0o755, 0), ('3', 0o775, 4242), ('4', 0o1777, 0)):
        p = os.path.join(M, layer)
        os.chown(p, 0, gid)
        os.chmod(p, mode)
    with open(os.path.join(M, '4', 'roots'), 'wb') as f:
        f.write(b'root')

    def nobody(r):
        ds = r.stage([(2, b'denied', b'a' * 100), (3, b'nogroup', b'b' * 100),
                      (4, b'mine', b'c' * 100), (0, b'p-layer0', b'd' * 100)])
        r.run(abi.WRITE, ds)
        st = [d.status for d in ds]
        if st != [-errno.EACCES, -errno.EACCES, 0, -errno.EACCES]:
            print('nobody statuses', st, file=sys.stderr)
            return 3
        ds = r.stage([(4, b'roots', b'x' * 10), (4, b'mine', b'y' * 10)])
        r.run(abi.WRITE, ds, flags=abi.WRITE_REPLACE)
        st = [d.status for d in ds]
        if st != [-errno.EPERM, 0]:
            print('sticky statuses', st, file=sys.stderr)
            return 4
        return 0

    def member(r):
        ds = r.stage([(3, b'bygroup', b'g' * 100)])
        r.run(abi.WRITE, ds)
        return 0 if ds[0].status == 0 else 5

    os.chmod(os.path.join(M, '0'), 0o755)
    rc = as_user(65534, 65534, [], nobody)
    if rc:
        fail(f'permission checks as uid 65534: child exit {rc}')
    rc = as_user(65534, 65534, [4242], member)
    if rc:
        fail(f'supplementary group 4242 could not create in layer 3: child exit {rc}')
    st = os.stat(os.path.join(M, '3', 'bygroup'))
    if (st.st_uid, st.st_gid) != (65534, 65534):
        fail(f'page written by uid 65534 is owned by {st.st_uid}:{st.st_gid}')
    for name in ('2/denied', '3/nogroup', '0/p-layer0'):
        if os.path.exists(os.path.join(M, name)):
            fail(f'refused write left {name}')
    if fuse_read(M, 4, 'roots') != b'root' or fuse_read(M, 4, 'mine') != b'y' * 10:
        fail('sticky layer contents')
    # The same refusals through open(2) itself, to be sure they are the kernel's.
    def open_create():
        os.setresgid(65534, 65534, 65534)
        os.setresuid(65534, 65534, 65534)
        try:
            os.open(os.path.join(M, '2', 'viaopen'), os.O_CREAT | os.O_WRONLY, 0o644)
        except PermissionError:
            return 0
        return 6
    if in_child(open_create):
        fail('open(O_CREAT) as uid 65534 in a 0755 root layer was allowed')


# ---- kill -9 ----

CRASH_N = 200


def crash_phase(dpid):
    """A durable batch (new pages plus the replacement of a durable page),
    and the daemon killed the moment the ioctl returns."""
    dfd = os.open(K, os.O_RDONLY)
    r = Region(dfd, 64 * MB)
    old = os.path.join(K, '0', 'old')
    with open(old, 'wb') as f:
        f.write(content('old-v1', 12345))
        os.fsync(f.fileno())
    pages = [(0, b'd%06d' % i, content('d%06d' % i, 1 + (i * 7919) % 300000))
             for i in range(CRASH_N)]
    pages.append((0, b'old', content('old-v2', 23456)))
    loose = [(1, b'l%06d' % i, content('l%06d' % i, 65536)) for i in range(50)]
    res, _ = r.write(loose)                       # visible only
    if res['done'] != len(loose):
        fail(f'loose batch: {res}')
    ds = r.stage(pages)
    abi.place(r.mem, ds, DESC_OFF, NAMES_OFF)
    res = abi.batch(dfd, abi.WRITE, r.rid, DESC_OFF, len(ds),
                    flags=abi.WRITE_DURABLE | abi.WRITE_REPLACE)
    os.kill(dpid, signal.SIGKILL)
    if res['done'] != len(ds):
        fail(f'durable batch before the kill: {res}')
    print(f'durable batch of {len(ds)} returned; daemon {dpid} killed')


def verify_phase():
    dfd = os.open(K, os.O_RDONLY)
    r = Region(dfd, 8 * MB)
    for i in range(CRASH_N):
        name = b'd%06d' % i
        try:
            check_back(r, K, 0, name, content(name.decode(), 1 + (i * 7919) % 300000))
        except FileNotFoundError:
            fail(f'durable page {name} lost in the crash')
    check_back(r, K, 0, b'old', content('old-v2', 23456))
    survived = 0
    for i in range(50):      # visible-only pages: absent or complete
        name = 'l%06d' % i
        try:
            data = fuse_read(K, 1, name)
        except FileNotFoundError:
            continue
        if data != content(name, 65536):
            fail(f'visible-only page {name} survived torn')
        survived += 1
    print(f'all {CRASH_N + 1} durable pages back; {survived} of 50 visible-only pages survived')


def main():
    phase = sys.argv[4]
    if phase == 'crash':
        crash_phase(int(sys.argv[5]))
        return
    if phase == 'verify':
        verify_phase()
        return
    dfd = os.open(M, os.O_RDONLY | os.O_DIRECTORY)
    tiny_fd = os.open(TINY, os.O_RDONLY | os.O_DIRECTORY)
    r = Region(dfd)
    test_round_trip(r)
    test_setgid_layer(r)
    test_unaligned_sources(r)
    test_shared_sources(r)
    test_exists_and_replace(r)
    test_durable_flag(r)
    test_replace_same_bytes(r)
    test_large_batch(r)
    test_one_transaction(r)
    test_bad_descriptors(r, tiny_fd)
    test_bad_calls(r, dfd)
    test_shrunk_region(dfd)
    test_permissions()
    # Still serving after all of that.
    res, ds = r.write([(0, b'last', b'L' * 777)], flags=abi.WRITE_DURABLE)
    if ds[0].status:
        fail(f'write after the error cases: {ds[0].status}')
    check_back(r, M, 0, b'last', b'L' * 777)
    print('fast write: all checks passed')


main()
