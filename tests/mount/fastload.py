"""Many engines at once never stall the mount (fastload.sh).

WRITERS REPLACE-writers (KVFS_IOC_WRITE with KVFS_WRITE_REPLACE, 8 pages a
call) loop over the same names in one layer, from PROCS processes, while
LOOKERS threads in another process stat names the kernel has not cached
(fresh names, and the pages being replaced, whose entries the daemon makes
the kernel drop) and list the layer. Every stat and listing is timed; the
longest must stay under STALL_MAX seconds. At the end every page holds the
bytes of the last generation its writer stored, read through FUSE.

Before fast-path calls left the FUSE workers, this load deadlocked the
mount: every worker sat in the kernel's name invalidation, waiting for the
layer directory's lock, held by a LOOKUP that no worker was left to serve.

usage: fastload.py MNT TMPDIR SECONDS [STALL_MAX]
"""
import json
import mmap
import os
import struct
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(__file__))
import kvfsabi as abi  # noqa: E402
from kvfsabi import fail  # noqa: E402

MNT, TMP, SECONDS = sys.argv[1], sys.argv[2], float(sys.argv[3])
STALL_MAX = float(sys.argv[4]) if len(sys.argv) > 4 else 1.0
MODEL = os.path.join(MNT, 'm')
LAYER = os.path.join(MODEL, '0')
PROCS, THREADS, PAGES = 8, 8, 8       # 64 writers, 8 pages a call
LOOKERS = 8
PAGE = 4096
SLICE = 64 << 10                        # one writer's part of its process's region


def content(name, gen):
    seed = ('%s/%d' % (name, gen)).encode()
    return (seed * (PAGE // len(seed) + 1))[:PAGE]


def writer_proc(p, deadline):
    """PROCS of these: THREADS writers sharing one region."""
    dirfd = os.open(MODEL, os.O_RDONLY | os.O_DIRECTORY)
    size = THREADS * SLICE
    fd = abi.memfd(size)
    mem = mmap.mmap(fd, size)
    rid, _ = abi.register(dirfd, fd)
    last = {}
    errors = []

    def run(t):
        base = t * SLICE
        names = [b'p%d-t%d-k%d' % (p, t, k) for k in range(PAGES)]
        gen = 0
        while time.monotonic() < deadline:
            gen += 1
            descs = []
            for k, name in enumerate(names):
                off = base + 8192 + k * PAGE
                mem[off:off + PAGE] = content(name.decode(), gen)
                descs.append(abi.Desc(layer=0, name=name, dst_off=off, dst_len=PAGE))
            abi.place(mem, descs, base, base + 4096)
            try:
                res = abi.batch(dirfd, abi.WRITE, rid, base, PAGES, flags=abi.WRITE_REPLACE)
            except OSError as e:
                errors.append('WRITE: %s' % e)
                return
            abi.collect(mem, descs, base)
            for d in descs:
                if d.status == 0:
                    last[d.name.decode()] = gen
                elif d.status not in (-16, -28):   # EBUSY (a reader), ENOSPC
                    errors.append('%s: status %d' % (d.name, d.status))
            if res['done'] + res['failed'] != PAGES:
                errors.append('done+failed %r' % res)

    ts = [threading.Thread(target=run, args=(t,)) for t in range(THREADS)]
    for th in ts:
        th.start()
    for th in ts:
        th.join()
    with open(os.path.join(TMP, 'gens-%d.json' % p), 'w') as f:
        json.dump({'last': last, 'errors': errors}, f)
    return 1 if errors else 0


def looker_proc(deadline):
    worst = {'stat': 0.0, 'ls': 0.0}
    counts = {'stat': 0, 'ls': 0}
    lock = threading.Lock()

    def note(kind, dt):
        with lock:
            worst[kind] = max(worst[kind], dt)
            counts[kind] += 1

    def run(t):
        i = 0
        while time.monotonic() < deadline:
            i += 1
            # A name never seen (a real LOOKUP), then a page being replaced.
            for name in ('nx-%d-%d' % (t, i), 'p%d-t%d-k%d' % (i % PROCS, t, i % PAGES)):
                t0 = time.monotonic()
                try:
                    os.stat(os.path.join(LAYER, name))
                except FileNotFoundError:
                    pass
                note('stat', time.monotonic() - t0)
            if i % 16 == 0:
                t0 = time.monotonic()
                os.listdir(LAYER)
                note('ls', time.monotonic() - t0)

    ts = [threading.Thread(target=run, args=(t,)) for t in range(LOOKERS)]
    for th in ts:
        th.start()
    for th in ts:
        th.join()
    with open(os.path.join(TMP, 'lookers.json'), 'w') as f:
        json.dump({'worst': worst, 'counts': counts}, f)
    return 0


def fork(fn, *args):
    pid = os.fork()
    if pid == 0:
        try:
            rc = fn(*args)
        except BaseException as e:  # noqa: B902
            print('child:', repr(e), file=sys.stderr)
            rc = 99
        os._exit(rc)
    return pid


def main():
    os.makedirs(LAYER, exist_ok=True)
    deadline = time.monotonic() + SECONDS
    pids = [fork(writer_proc, p, deadline) for p in range(PROCS)]
    pids.append(fork(looker_proc, deadline))
    for pid in pids:
        _, st = os.waitpid(pid, 0)
        if os.waitstatus_to_exitcode(st) != 0:
            fail('a load process failed (exit %d)' % os.waitstatus_to_exitcode(st))
    with open(os.path.join(TMP, 'lookers.json')) as f:
        look = json.load(f)
    print('fastload: %d stats (worst %.3f s), %d listings (worst %.3f s)' % (
        look['counts']['stat'], look['worst']['stat'], look['counts']['ls'],
        look['worst']['ls']))
    if look['counts']['stat'] < 100 or look['counts']['ls'] < 4:
        fail('the lookers made too little progress: %r' % look['counts'])
    if max(look['worst'].values()) > STALL_MAX:
        fail('a stat or listing stalled for %.3f s (bound %.1f s)' % (
            max(look['worst'].values()), STALL_MAX))
    pages = 0
    for p in range(PROCS):
        with open(os.path.join(TMP, 'gens-%d.json' % p)) as f:
            g = json.load(f)
        if g['errors']:
            fail('writer process %d: %s' % (p, g['errors'][:5]))
        if len(g['last']) != THREADS * PAGES:
            fail('writer process %d stored %d of %d names' % (p, len(g['last']), THREADS * PAGES))
        for name, gen in g['last'].items():
            with open(os.path.join(LAYER, name), 'rb') as f:
                got = f.read()
            if got != content(name, gen):
                fail('%s: not the bytes of generation %d' % (name, gen))
            pages += 1
    print('fastload: %d pages bit-exact at their last generation' % pages)


main()
