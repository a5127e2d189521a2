"""An unprivileged caller abuses the fast path (fastabuse.sh); the daemon's
memory stays bounded, its log small, and root is still served.

Phases, each as uid 65534 unless said otherwise:
  huge      4 concurrent WRITE calls of 2^20 descriptors each, all naming
            the same 255-byte name from a 64 MiB region
  flood     64 threads loop 1024-descriptor READs at once
  regions   5 processes register regions until refused
  punched   a fully allocated 256 MiB memfd is registered, punched whole,
            then read into: every descriptor -EFAULT, nothing allocated
  refused   one thread loops a malformed call for 7 s
then root registers a region and reads a page back bit-exact.

usage: fastabuse.py MNT LOG DAEMON_PID [check|skip]   (the RSS bound)
"""
import ctypes
import errno
import mmap
import os
import struct
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(__file__))
import kvfsabi as abi  # noqa: E402
from kvfsabi import fail  # noqa: E402

MNT, LOG, DPID = sys.argv[1], sys.argv[2], int(sys.argv[3])
CHECK_RSS = len(sys.argv) < 5 or sys.argv[4] != 'skip'
MODEL = os.path.join(MNT, 'm')
NOBODY = 65534
MB = 1 << 20
# What docs/abi.md promises about daemon memory for fast-path calls: one
# uid's running calls hold at most 512 MiB (estimated), one call of any
# size may run alone. Measured as growth of the daemon's peak RSS.
RSS_BOUND = 640 * MB
LOG_BOUND = 1 * MB
libc = ctypes.CDLL(None, use_errno=True)
libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_long, ctypes.c_long]


def daemon_kb(field):
    with open('/proc/%d/status' % DPID) as f:
        for line in f:
            if line.startswith(field + ':'):
                return int(line.split()[1]) * 1024
    fail('daemon has no %s (did it die?)' % field)


def as_nobody(fn):
    pid = os.fork()
    if pid == 0:
        try:
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            rc = fn()
        except BaseException as e:  # noqa: B902
            print('child:', repr(e), file=sys.stderr)
            rc = 99
        os._exit(rc or 0)
    return pid


def run_threads(fn, n):
    """fn(i) on n threads at once; returns when all are done."""
    ts = [threading.Thread(target=fn, args=(i,)) for i in range(n)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()


def wait_all(pids, what):
    for pid in pids:
        _, st = os.waitpid(pid, 0)
        rc = os.waitstatus_to_exitcode(st)
        if rc != 0:
            fail('%s: a child failed (exit %d)' % (what, rc))


def huge():
    """2^20 descriptors naming one 255-byte name: all EINVAL (named twice)."""
    dirfd = os.open(MODEL, os.O_RDONLY | os.O_DIRECTORY)
    fd = abi.memfd(64 * MB + MB)
    mem = mmap.mmap(fd, 64 * MB + MB)
    rid, _ = abi.register(dirfd, fd)
    n = abi.BATCH_MAX
    name_off = 64 * MB
    mem[name_off:name_off + 255] = b'n' * 255
    one = struct.pack(abi.DESC_FMT, 0, name_off, 255, 0, name_off + 4096, 4096, 0, 0, 0, 0)
    mem[0:64 * n] = one * n
    results = []

    def call(_):
        try:
            results.append(abi.batch(dirfd, abi.WRITE, rid, 0, n))
        except OSError as e:
            results.append(e.errno)

    run_threads(call, 4)
    for r in results:
        if not isinstance(r, dict) or r['done'] != 0 or r['failed'] != n:
            print('huge: unexpected result %r' % (r,), file=sys.stderr)
            return 1
    return 0


def flood():
    """64 threads, 1024-descriptor READs of missing pages, all at once."""
    dirfd = os.open(MODEL, os.O_RDONLY | os.O_DIRECTORY)
    fd = abi.memfd(64 * 128 * 1024)
    mem = mmap.mmap(fd, 64 * 128 * 1024)
    rid, _ = abi.register(dirfd, fd)
    errs = []

    def run(t):
        base = t * 128 * 1024
        ds = [abi.Desc(0, b'missing-%d' % i, dst_off=base + 65536 + i * 64, dst_len=64)
              for i in range(1024)]
        abi.place(mem, ds, base, base + 65536 - 16384)
        for _ in range(20):
            try:
                r = abi.batch(dirfd, abi.READ, rid, base, 1024)
                if r['failed'] != 1024:
                    errs.append(r)
            except OSError as e:
                if e.errno != errno.EAGAIN:   # a full queue may refuse
                    errs.append(e)

    run_threads(run, 64)
    if errs:
        print('flood:', errs[:3], file=sys.stderr)
    return 1 if errs else 0


def regions(hold_r, go_w):
    """Register 4 KiB regions until refused, then hold them until told."""
    dirfd = os.open(MODEL, os.O_RDONLY | os.O_DIRECTORY)
    held = 0
    while True:
        fd = abi.memfd(4096)
        try:
            abi.register(dirfd, fd)
        except OSError as e:
            if e.errno != errno.EMFILE:
                print('regions: %s' % e, file=sys.stderr)
                return 1
            break
        held += 1
    os.write(go_w, struct.pack('<I', held))
    os.read(hold_r, 1)
    return 0


def punched():
    size = 256 * MB
    dirfd = os.open(MODEL, os.O_RDONLY | os.O_DIRECTORY)
    fd = abi.memfd(size)
    mem = mmap.mmap(fd, size)
    rid, _ = abi.register(dirfd, fd)
    # Descriptors in the first MiB (kept); destinations in the rest (punched).
    ds = [abi.Desc(0, b'page', dst_off=MB + i * MB, dst_len=MB) for i in range(255)]
    abi.place(mem, ds, 0, 64 * 255)
    if libc.fallocate(fd, 3, MB, size - MB) != 0:
        print('punch: errno %d' % ctypes.get_errno(), file=sys.stderr)
        return 1
    blocks = os.fstat(fd).st_blocks
    r = abi.batch(dirfd, abi.READ, rid, 0, len(ds))
    abi.collect(mem, ds, 0)
    bad = [d.status for d in ds if d.status != -errno.EFAULT]
    if bad or r['done'] != 0:
        print('punched: statuses %r' % bad[:5], file=sys.stderr)
        return 1
    if os.fstat(fd).st_blocks != blocks:
        print('punched: the daemon allocated the punched memory', file=sys.stderr)
        return 1
    # Reads into the part still populated, from many threads (each executor
    # thread has its own ring, which must not pin, and so fault in, the
    # whole region). A region small enough for the rings to register.
    size = 64 * MB
    fd = abi.memfd(size)
    mem = mmap.mmap(fd, size)
    rid, _ = abi.register(dirfd, fd)
    if libc.fallocate(fd, 3, MB, size - MB) != 0:
        print('punch: errno %d' % ctypes.get_errno(), file=sys.stderr)
        return 1
    blocks = os.fstat(fd).st_blocks
    one = [abi.Desc(0, b'page', dst_off=512 * 1024, dst_len=65536)]
    errs = []

    def reader(t):
        base = 4096 * (t + 1)
        abi.place(mem, one, base, 256 * 1024 + 512 * t)
        for _ in range(10):
            r = abi.batch(dirfd, abi.READ, rid, base, 1)
            if r['done'] != 1:
                errs.append(r)
    run_threads(reader, 16)
    if errs or os.fstat(fd).st_blocks != blocks:
        print('punched: reads into the populated part: %r, blocks %d -> %d' % (
            errs[:2], blocks, os.fstat(fd).st_blocks), file=sys.stderr)
        return 1
    return 0


def refused():
    dirfd = os.open(MODEL, os.O_RDONLY | os.O_DIRECTORY)
    n = 0
    end = time.monotonic() + 7     # past one rate-limit window (5 s)
    while time.monotonic() < end:
        try:
            abi.batch(dirfd, abi.READ, 1, 0, 1, abi=99)
        except OSError as e:
            if e.errno != errno.EPROTO:
                return 1
        n += 1
    print('refused: %d malformed calls' % n)
    return 0 if n > 1000 else 1


def root_still_served():
    dirfd = os.open(MODEL, os.O_RDONLY | os.O_DIRECTORY)
    fd = abi.memfd(MB)
    mem = mmap.mmap(fd, MB)
    rid, _ = abi.register(dirfd, fd)
    ds = [abi.Desc(0, b'page', dst_off=65536, dst_len=65536)]
    abi.place(mem, ds, 0, 4096)
    abi.batch(dirfd, abi.READ, rid, 0, 1)
    abi.collect(mem, ds, 0)
    with open(os.path.join(MODEL, '0', 'page'), 'rb') as f:
        want = f.read()
    if ds[0].status != 0 or bytes(mem[65536:65536 + len(want)]) != want:
        fail('root could not read a page after the abuse: status %r' % ds[0].status)
    abi.unregister(dirfd, rid)


def main():
    rss0 = daemon_kb('VmRSS')
    log0 = os.path.getsize(LOG)
    t0 = time.monotonic()
    wait_all([as_nobody(huge)], 'huge')
    print('huge: %.1f s, daemon peak RSS +%d MiB' % (
        time.monotonic() - t0, (daemon_kb('VmHWM') - rss0) // MB))
    wait_all([as_nobody(flood)], 'flood')
    hold_r, hold_w = os.pipe()
    go_r, go_w = os.pipe()
    pids = [as_nobody(lambda: regions(hold_r, go_w)) for _ in range(5)]
    held = sum(struct.unpack('<I', os.read(go_r, 4))[0] for _ in pids)
    print('regions: uid %d holds %d' % (NOBODY, held))
    if held > 256:
        fail('one uid registered %d regions (cap 256)' % held)
    root_still_served()     # with nobody's regions still held
    os.write(hold_w, b'x' * len(pids))
    wait_all(pids, 'regions')
    wait_all([as_nobody(punched)], 'punched')
    wait_all([as_nobody(refused)], 'refused')
    root_still_served()
    grew = daemon_kb('VmHWM') - rss0
    logged = os.path.getsize(LOG) - log0
    print('daemon peak RSS +%d MiB (bound %d), log +%d bytes (bound %d)' % (
        grew // MB, RSS_BOUND // MB, logged, LOG_BOUND))
    if CHECK_RSS and grew > RSS_BOUND:
        fail('daemon memory grew by %d MiB' % (grew // MB))
    if logged > LOG_BOUND:
        fail('the log grew by %d bytes' % logged)
    with open(LOG, errors='replace') as f:
        if 'suppressed' not in f.read()[log0:]:
            fail('no "suppressed N similar lines" after a flood of refusals')


main()
