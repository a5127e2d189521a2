"""POSIX semantics through a real mount (driven by semantics.sh): a write
that can never succeed fails at once and evicts nothing, times and modes
given before the seal survive it, directories' times follow their
entries, an unlinked open page has no links, and a sealed page's
metadata (not its content) can change. Each step is a subcommand; the
shell script mounts and remounts between them.
"""
import errno
import json
import os
import stat
import subprocess
import sys
import time

PAGE = 1 << 20


def fail(msg):
    print(f'FAIL: {msg}', file=sys.stderr)
    sys.exit(1)


def stats(mnt):
    with open(os.path.join(mnt, '.kvfs', 'stats')) as f:
        return json.load(f)


def layer(mnt):
    return os.path.join(mnt, 'm', '0')


def fill(mnt):
    """24 pages of 1 MiB in a 32 MiB store: under the high watermark."""
    os.makedirs(layer(mnt), exist_ok=True)
    for i in range(24):
        with open(os.path.join(layer(mnt), f'p{i:02d}'), 'wb') as f:
            f.write(bytes([i]) * PAGE)


def refused_at_once(mnt, name, offset, want):
    """One byte at offset: refused with want within 100 ms, nothing evicted."""
    before = stats(mnt)['ssd']
    fd = os.open(os.path.join(layer(mnt), name), os.O_CREAT | os.O_WRONLY, 0o644)
    t0 = time.monotonic()
    try:
        os.pwrite(fd, b'x', offset)
        fail(f'1-byte write at {offset} succeeded')
    except OSError as e:
        took = time.monotonic() - t0
        if e.errno != want:
            fail(f'write at {offset}: {errno.errorcode.get(e.errno)}, want {errno.errorcode[want]}')
    finally:
        try:
            os.close(fd)
        except OSError:
            pass     # the close reports the lost page
    if took > 0.1:
        fail(f'write at {offset} took {took * 1000:.0f} ms to be refused (limit 100 ms)')
    after = stats(mnt)['ssd']
    if after['evictions'] != before['evictions'] or after['eviction_runs'] != before['eviction_runs']:
        fail(f'write at {offset} evicted: {before["evictions"]} -> {after["evictions"]} pages, '
             f'{before["eviction_runs"]} -> {after["eviction_runs"]} runs')
    names = sorted(os.listdir(layer(mnt)))
    if names != [f'p{i:02d}' for i in range(24)]:
        fail(f'pages after a refused write at {offset}: {names}')


def wipe(mnt):
    fill(mnt)
    # Past max_page (64 MiB) and the capacity: the reported store-wipe.
    refused_at_once(mnt, 'w1', 3 << 30, errno.EFBIG)
    # Under max_page but past the whole capacity: no eviction can help.
    refused_at_once(mnt, 'w2', 48 << 20, errno.EFBIG)
    for i in range(24):
        with open(os.path.join(layer(mnt), f'p{i:02d}'), 'rb') as f:
            if f.read() != bytes([i]) * PAGE:
                fail(f'p{i:02d} changed')


def dirty_bytes(mnt):
    raw = os.getxattr(mnt, 'user.kvfs.stats').decode()
    return int(dict(line.split() for line in raw.splitlines())['dirty_bytes'])


def truncate_refused(mnt):
    """An ftruncate past max_page is refused as a write there is: the page
    is never stored, later writes, truncates and reads get the error and
    so does the close; and its bytes leave the write-back budget at once,
    not at the close (held open, they once stayed charged to no one)."""
    fd = os.open(os.path.join(layer(mnt), 'tr'), os.O_CREAT | os.O_RDWR, 0o644)
    os.write(fd, b'a' * (3 << 20))
    for _ in range(100):              # the earlier steps' pages drain
        if dirty_bytes(mnt) <= 3 << 20:
            break
        time.sleep(0.05)
    if dirty_bytes(mnt) != 3 << 20:
        fail(f'dirty_bytes {dirty_bytes(mnt)} with one 3 MiB page being written')
    try:
        os.ftruncate(fd, 100 << 20)
        fail('ftruncate to 100 MiB (past max_page) succeeded')
    except OSError as e:
        if e.errno != errno.EFBIG:
            fail(f'ftruncate past max_page: {errno.errorcode.get(e.errno)}, want EFBIG')
    if dirty_bytes(mnt) != 0:
        fail(f'dirty_bytes {dirty_bytes(mnt)} after the page was doomed, still open')
    for what, call in (('write', lambda: os.write(fd, b'b' * 10)),
                       ('ftruncate down', lambda: os.ftruncate(fd, 10)),
                       ('read', lambda: os.pread(fd, 10, 0))):
        try:
            call()
            fail(f'a {what} after a refused ftruncate succeeded')
        except OSError as e:
            if e.errno != errno.EFBIG:
                fail(f'{what} after a refused ftruncate: {errno.errorcode.get(e.errno)}, '
                     f'want EFBIG')
    try:
        os.close(fd)
        fail('the close of a page whose ftruncate was refused returned 0')
    except OSError as e:
        if e.errno != errno.EFBIG:
            fail(f'close after a refused ftruncate: {errno.errorcode.get(e.errno)}, want EFBIG')
    if 'tr' in os.listdir(layer(mnt)):
        fail('a page whose ftruncate was refused was stored')


def proportional(mnt):
    """A valid write that needs space evicts about what its bytes need, not
    the store: a 12 MiB page into a full 32 MiB store of 1 MiB pages."""
    d = layer(mnt)
    names = [n for n in os.listdir(d) if n.startswith('p')]
    if len(names) != 24:
        fail(f'proportional: expected the 24 pages of wipe, found {len(names)}')
    before = stats(mnt)['ssd']
    big = 12 << 20
    with open(os.path.join(d, 'big'), 'wb') as f:
        f.write(b'B' * big)
    # The eviction the write caused has run by the time its close returns
    # (the page was charged before it sealed).
    after = stats(mnt)['ssd']
    evicted = after['evictions'] - before['evictions']
    need = big // PAGE
    if evicted == 0:
        fail('a 12 MiB page fit into a full 32 MiB store without evicting')
    if evicted > need + 1:
        fail(f'one 12 MiB page evicted {evicted} pages of 1 MiB (its bytes need {need})')
    left = [n for n in os.listdir(d) if n.startswith('p')]
    if len(left) < 24 - (need + 1):
        fail(f'{24 - len(left)} pages gone for one 12 MiB page')
    with open(os.path.join(d, 'big'), 'rb') as f:
        if f.read() != b'B' * big:
            fail('the big page')
    os.unlink(os.path.join(d, 'big'))


T_PAST = 1_000_000_000 * 1_500_000_000 + 123456789     # 2017, with nanoseconds


def times(mnt):
    """futimens and fchmod before the close that seals must survive it."""
    d = layer(mnt)
    fd = os.open(os.path.join(d, 't1'), os.O_CREAT | os.O_WRONLY, 0o600)
    os.write(fd, b'a' * 5000)
    os.utime(fd, ns=(T_PAST, T_PAST))
    os.fchmod(fd, 0o640)
    os.close(fd)
    check_t1(mnt)


def check_t1(mnt):
    st = os.stat(os.path.join(layer(mnt), 't1'))
    if st.st_mtime_ns != T_PAST:
        fail(f'mtime of t1 is {st.st_mtime_ns}, set to {T_PAST} before the seal')
    if stat.S_IMODE(st.st_mode) != 0o640:
        fail(f'mode of t1 is {oct(st.st_mode)}, set to 0640 before the seal')


def dirs(mnt):
    d = layer(mnt)
    m = os.path.join(mnt, 'm')

    def changed(path, before, what):
        st = os.stat(path)
        if st.st_mtime_ns <= before.st_mtime_ns or st.st_ctime_ns <= before.st_ctime_ns:
            fail(f'{what}: {path} mtime/ctime did not change')
        return st

    b = os.stat(d)
    time.sleep(0.02)
    with open(os.path.join(d, 'd1'), 'wb') as f:
        f.write(b'1')
    b = changed(d, b, 'create')
    time.sleep(0.02)
    os.rename(os.path.join(d, 'd1'), os.path.join(d, 'd2'))
    b = changed(d, b, 'rename')
    os.mkdir(os.path.join(m, '1'))
    bm = os.stat(m)
    b1 = os.stat(os.path.join(m, '1'))
    time.sleep(0.02)
    os.rename(os.path.join(d, 'd2'), os.path.join(m, '1', 'd3'))
    b = changed(d, b, 'rename out')
    b1 = changed(os.path.join(m, '1'), b1, 'rename in')
    time.sleep(0.02)
    os.unlink(os.path.join(m, '1', 'd3'))
    changed(os.path.join(m, '1'), b1, 'unlink')
    time.sleep(0.02)
    os.rmdir(os.path.join(m, '1'))
    changed(m, bm, 'rmdir')
    time.sleep(0.02)
    with open(os.path.join(d, 'd4'), 'wb') as f:
        f.write(b'4')
    changed(d, b, 'create')


def dirs_after(mnt):
    with open(os.environ['T'] + '/dir_mtime') as f:
        want = int(f.read())
    got = os.stat(layer(mnt)).st_mtime_ns
    if got != want:
        fail(f'layer mtime after remount {got}, before {want}')


def nlink(mnt):
    p = os.path.join(layer(mnt), 'n1')
    with open(p, 'wb') as f:
        f.write(b'n' * 100)
    fd = os.open(p, os.O_RDONLY)
    try:
        if os.fstat(fd).st_nlink != 1:
            fail('a linked page has st_nlink != 1')
        os.unlink(p)
        st = os.fstat(fd)
        if st.st_nlink != 0:
            fail(f'an unlinked open page has st_nlink {st.st_nlink}, not 0')
        if os.read(fd, 200) != b'n' * 100:
            fail('an unlinked open page lost its bytes')
    finally:
        os.close(fd)


def write_times(mnt):
    """A write moves mtime and ctime; an ftruncate moves both too (ext4)."""
    p = os.path.join(layer(mnt), 'w1')
    fd = os.open(p, os.O_CREAT | os.O_WRONLY, 0o600)
    try:
        before = os.fstat(fd)
        time.sleep(0.05)
        os.write(fd, b'w' * 100)
        st = os.fstat(fd)
        if st.st_mtime_ns <= before.st_mtime_ns or st.st_ctime_ns <= before.st_ctime_ns:
            fail(f'a write left mtime/ctime {st.st_mtime_ns}/{st.st_ctime_ns} '
                 f'(before {before.st_mtime_ns}/{before.st_ctime_ns})')
        time.sleep(0.05)
        os.ftruncate(fd, 50)
        t = os.fstat(fd)
        if t.st_mtime_ns <= st.st_mtime_ns or t.st_ctime_ns <= st.st_ctime_ns:
            fail(f'an ftruncate left mtime/ctime {t.st_mtime_ns}/{t.st_ctime_ns} '
                 f'(before {st.st_mtime_ns}/{st.st_ctime_ns})')
    finally:
        os.close(fd)


def fallocate(mnt):
    """fallocate(2) mode 0 grows a page being written (zeros, as ftruncate
    up); a range inside it is a no-op; KEEP_SIZE is EOPNOTSUPP. The call
    itself, not glibc's posix_fallocate, which falls back to writes."""
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]
    p = os.path.join(layer(mnt), 'f1')
    fd = os.open(p, os.O_CREAT | os.O_WRONLY, 0o600)
    try:
        os.write(fd, b'ab')
        if libc.fallocate(fd, 0, 0, 8192) != 0:
            fail(f'fallocate mode 0: {os.strerror(ctypes.get_errno())}')
        if libc.fallocate(fd, 0, 100, 100) != 0:
            fail(f'fallocate inside the page: {os.strerror(ctypes.get_errno())}')
        if libc.fallocate(fd, 1, 0, 16384) == 0 or ctypes.get_errno() != errno.EOPNOTSUPP:
            fail(f'fallocate KEEP_SIZE: {os.strerror(ctypes.get_errno())}, not EOPNOTSUPP')
        if os.fstat(fd).st_size != 8192:
            fail(f'size {os.fstat(fd).st_size} after fallocate to 8192')
    finally:
        os.close(fd)
    with open(p, 'rb') as f:
        if f.read() != b'ab' + bytes(8190):
            fail('a page grown by fallocate reads back wrong')


def unlinked_attrs(mnt):
    """An unlinked page still open keeps working through its descriptor, as
    on ext4: fchmod, futimens and fchown of a sealed one; writes, fstat's
    size and ftruncate of one still being written."""
    d = layer(mnt)
    p = os.path.join(d, 'u1')
    with open(p, 'wb') as f:
        f.write(b'u' * 100)
    fd = os.open(p, os.O_RDONLY)
    try:
        os.unlink(p)
        os.fchmod(fd, 0o604)
        os.utime(fd, ns=(T_PAST, T_PAST))
        os.fchown(fd, 65534, 65534)
        st = os.fstat(fd)
        if (stat.S_IMODE(st.st_mode), st.st_mtime_ns, st.st_uid) != (0o604, T_PAST, 65534):
            fail(f'an unlinked sealed page shows {oct(st.st_mode)} {st.st_mtime_ns} '
                 f'{st.st_uid} after fchmod, futimens, fchown')
        if os.pread(fd, 200, 0) != b'u' * 100:
            fail('an unlinked sealed page lost its bytes')
    finally:
        os.close(fd)
    fd = os.open(os.path.join(d, 'u2'), os.O_CREAT | os.O_RDWR, 0o600)
    try:
        os.write(fd, b'hello')
        os.unlink(os.path.join(d, 'u2'))
        os.write(fd, b'XX')
        if os.fstat(fd).st_size != 7:
            fail(f'an unlinked page being written shows size {os.fstat(fd).st_size}, not 7')
        os.ftruncate(fd, 3)
        os.fchmod(fd, 0o640)
        st = os.fstat(fd)
        if (st.st_size, stat.S_IMODE(st.st_mode)) != (3, 0o640):
            fail(f'an unlinked page being written: size {st.st_size}, mode '
                 f'{oct(st.st_mode)} after ftruncate 3 and fchmod 0640')
        if os.pread(fd, 10, 0) != b'hel':
            fail('an unlinked page being written reads back wrong bytes')
    finally:
        os.close(fd)
    if set(os.listdir(d)) & {'u1', 'u2'}:
        fail(f'unlinked pages came back: {sorted(os.listdir(d))}')


def sealed_meta(mnt):
    """A sealed page's mode, owner and times change; its bytes do not."""
    p = os.path.join(layer(mnt), 's1')
    with open(p, 'wb') as f:
        f.write(b's' * 4096)
    os.chmod(p, 0o604)
    os.chown(p, 1234, 5678)
    os.utime(p, ns=(T_PAST, T_PAST))
    st = os.stat(p)
    if (stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid, st.st_mtime_ns) != (0o604, 1234, 5678, T_PAST):
        fail(f'sealed page metadata after chmod/chown/utime: {oct(st.st_mode)} {st.st_uid} {st.st_gid} {st.st_mtime_ns}')
    for flags in (os.O_WRONLY, os.O_RDWR, os.O_WRONLY | os.O_TRUNC):
        try:
            os.close(os.open(p, flags))
            fail(f'sealed page opened with flags {flags:#o}')
        except OSError as e:
            if e.errno != errno.EPERM:
                fail(f'open for writing of a sealed page: {e}, want EPERM')
    try:
        os.truncate(p, 10)
        fail('truncate of a sealed page succeeded')
    except OSError as e:
        if e.errno != errno.EPERM:
            fail(f'truncate of a sealed page: {e}, want EPERM')
    # chmod +t is pinning, as user.kvfs.pinned.
    os.chmod(p, 0o1604)
    if os.getxattr(p, 'user.kvfs.pinned') != b'1':
        fail('chmod +t did not pin the page')
    os.chmod(p, 0o604)
    # ... and user.kvfs.pinned is the sticky bit: ls -l shows it at once,
    # though the kernel had the mode cached (the chmod's reply). stat -c %A
    # asks for the mode alone, as ls -l asks no ctime: the kernel's own
    # invalidation after a setxattr covers only ctime.
    for pin, want in ((b'1', '-rw----r-T'), (b'0', '-rw----r--')):
        os.setxattr(p, 'user.kvfs.pinned', pin)
        got = subprocess.run(['stat', '-c', '%A', p], capture_output=True,
                             text=True).stdout.strip()
        if got != want:
            fail(f'ls -l after user.kvfs.pinned={pin.decode()}: {got}, want {want}')
    with open(os.environ['T'] + '/dir_mtime', 'w') as f:
        f.write(str(os.stat(layer(mnt)).st_mtime_ns))


def sealed_meta_after(mnt):
    st = os.stat(os.path.join(layer(mnt), 's1'))
    if (stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid, st.st_mtime_ns) != (0o604, 1234, 5678, T_PAST):
        fail(f's1 metadata after remount: {oct(st.st_mode)} {st.st_uid} {st.st_gid} {st.st_mtime_ns}')
    with open(os.path.join(layer(mnt), 's1'), 'rb') as f:
        if f.read() != b's' * 4096:
            fail('s1 bytes after remount')
    check_t1(mnt)
    dirs_after(mnt)


def as_nobody(fn):
    """fn() as uid 65534 in a child; its exit status is the child's."""
    pid = os.fork()
    if pid == 0:
        try:
            os.setgroups([])
            os.setgid(65534)
            os.setuid(65534)
            fn()
        except BaseException as e:  # noqa: B902
            print('uid 65534:', repr(e), file=sys.stderr)
            os._exit(1)
        os._exit(0)
    return os.waitpid(pid, 0)[1]


def setid(mnt):
    """Set-id bits as on ext4: a setgid model hands its group and setgid
    bit down; a page keeps the set-id bits of its create mode, not the
    sticky bit (the pin); a write by an unprivileged owner clears them."""
    sg = os.path.join(mnt, 'sg')
    os.mkdir(sg)
    os.chown(sg, 0, 456)
    os.chmod(sg, 0o2775)
    old = os.umask(0o022)
    try:
        os.mkdir(os.path.join(sg, '0'))
    finally:
        os.umask(old)
    st = os.stat(os.path.join(sg, '0'))
    if (stat.S_IMODE(st.st_mode), st.st_gid) != (0o2755, 456):
        fail(f'layer in a setgid model: {oct(st.st_mode)} gid {st.st_gid}, want 02755 gid 456')
    os.chmod(os.path.join(sg, '0'), 0o2777)
    old = os.umask(0)
    try:
        fd = os.open(os.path.join(sg, '0', 'suid'), os.O_WRONLY | os.O_CREAT, 0o4755)
        os.write(fd, b'u' * 4096)        # root keeps them (CAP_FSETID)
        os.close(fd)
        os.close(os.open(os.path.join(sg, '0', 'sticky'), os.O_WRONLY | os.O_CREAT, 0o1644))
    finally:
        os.umask(old)
    st = os.stat(os.path.join(sg, '0', 'suid'))
    if (stat.S_IMODE(st.st_mode), st.st_gid) != (0o4755, 456):
        fail(f'page created 04755 in a setgid layer: {oct(st.st_mode)} gid {st.st_gid}')
    st = os.stat(os.path.join(sg, '0', 'sticky'))
    if stat.S_IMODE(st.st_mode) != 0o644 or \
            os.getxattr(os.path.join(sg, '0', 'sticky'), 'user.kvfs.pinned') != b'0':
        fail(f'page created 01644: {oct(st.st_mode)}, want 0644 (not pinned)')

    def unprivileged_write():
        p = os.path.join(sg, '0', 'byuser')
        fd = os.open(p, os.O_WRONLY | os.O_CREAT, 0o755)
        os.fchmod(fd, 0o6775)
        os.write(fd, b'n' * 4096)
        os.close(fd)
        mode = stat.S_IMODE(os.stat(p).st_mode)
        if mode != 0o775:
            raise SystemExit(f'set-id bits after a write by their owner: {oct(mode)}, want 0775')
        # Not in group 456: a setgid page of that group is not given.
        old = os.umask(0)
        try:
            os.close(os.open(os.path.join(sg, '0', 'notmember'), os.O_WRONLY | os.O_CREAT, 0o2775))
        finally:
            os.umask(old)
        st = os.stat(os.path.join(sg, '0', 'notmember'))
        if (stat.S_IMODE(st.st_mode), st.st_gid) != (0o775, 456):
            raise SystemExit(f'setgid page by a non-member: {oct(st.st_mode)} gid {st.st_gid}')
        # Pins are root's: the owner's chmod +t leaves the page unpinned,
        # user.kvfs.pinned from it is EPERM (it could otherwise push every
        # other user's pages out of the store and the RAM tier first).
        os.chmod(p, 0o1775)
        if stat.S_IMODE(os.stat(p).st_mode) != 0o775 or \
                os.getxattr(p, 'user.kvfs.pinned') != b'0':
            raise SystemExit(f'chmod +t by uid 65534 pinned its page: {oct(os.stat(p).st_mode)}')
        try:
            os.setxattr(p, 'user.kvfs.pinned', b'1')
            raise SystemExit('user.kvfs.pinned=1 by uid 65534 was taken')
        except PermissionError:
            pass

    if as_nobody(unprivileged_write):
        fail('a write by uid 65534 kept set-id bits, or it pinned its page')


def setid_after(mnt):
    l0 = os.path.join(mnt, 'sg', '0')
    want = {'': (0o2777, 456), 'suid': (0o4755, 456), 'sticky': (0o644, 456),
            'byuser': (0o775, 456), 'notmember': (0o775, 456)}
    for name, (mode, gid) in want.items():
        st = os.stat(os.path.join(l0, name))
        if (stat.S_IMODE(st.st_mode), st.st_gid) != (mode, gid):
            fail(f'sg/0/{name} after remount: {oct(st.st_mode)} gid {st.st_gid}, '
                 f'want {oct(mode)} gid {gid}')


if __name__ == '__main__':
    globals()[sys.argv[1]](sys.argv[2])
