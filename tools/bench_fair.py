"""CPU shares between uids on the fast path (docs/benchmarks/engines.md,
"One uid's many calls against another's one"): root's single stream of
LOOKUP calls, timed alone and then while PROCS processes of uid 65534,
THREADS threads each, loop the same calls as fast as the daemon answers.
The ratio alone/contended is the share root kept; on a 2-vCPU machine an
even split of the daemon's CPU between the two uids is about 0.5.

Every call is a LOOKUP of DESCS descriptors over the 1,000 pages of model
`fair`, layer 0 (made here if missing): CPU work in the daemon, no I/O.
With --fuse, root's side is instead CALLS rounds of ordinary file
operations through FUSE (a stat of a page, a stat of a missing name, a
read of a page, a listing of the layer), and the figures are per round.
argv: MNT [--calls N] [--descs N] [--procs N] [--threads N] [--label L] [--fuse]"""
import mmap
import os
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), '..', 'tests', 'mount'))
import kvfsabi as abi  # noqa: E402

NOBODY = 65534
PAGES = 1000


def opt(name, default):
    return type(default)(sys.argv[sys.argv.index(name) + 1]) if name in sys.argv else default


def make_pages(layer_dir):
    os.makedirs(layer_dir, exist_ok=True)
    for i in range(PAGES):
        path = os.path.join(layer_dir, 'p%04d' % i)
        if not os.path.exists(path):
            with open(path, 'wb') as f:
                f.write(bytes([i & 255]) * 4096)


class Lookups:
    """A region of DESCS descriptors naming the pages in turn, and the
    call that looks them up."""

    def __init__(self, model, descs):
        self.dirfd = os.open(model, os.O_RDONLY | os.O_DIRECTORY)
        size = descs * 64 + PAGES * 8 + 4096
        fd = abi.memfd(size)
        self.mem = mmap.mmap(fd, size)
        self.rid, _ = abi.register(self.dirfd, fd)
        os.close(fd)
        names_off = descs * 64
        offs = []
        for i in range(PAGES):
            name = b'p%04d' % i
            self.mem[names_off + 5 * i:names_off + 5 * i + 5] = name
            offs.append(names_off + 5 * i)
        abi.place(self.mem, [abi.Desc(0, b'p%04d' % (i % PAGES), name_off=offs[i % PAGES])
                             for i in range(descs)], 0, names_off)
        self.descs = descs

    def call(self):
        r = abi.batch(self.dirfd, abi.LOOKUP, self.rid, 0, self.descs)
        if r['failed']:
            raise SystemExit('bench_fair: %d of %d lookups failed' % (r['failed'], self.descs))


def timed_calls(model, descs, calls):
    lk = Lookups(model, descs)
    t0 = time.perf_counter()
    for _ in range(calls):
        lk.call()
    return time.perf_counter() - t0


ROUNDS = []          # --fuse: each round's seconds, of the last timed_fuse


def timed_fuse(model, descs, calls):
    layer = os.path.join(model, '0')
    ROUNDS.clear()
    t0 = time.perf_counter()
    for i in range(calls):
        r0 = time.perf_counter()
        os.stat(os.path.join(layer, 'p%04d' % (i % PAGES)))
        try:
            os.stat(os.path.join(layer, 'missing%d' % i))
        except FileNotFoundError:
            pass
        with open(os.path.join(layer, 'p%04d' % ((i * 7) % PAGES)), 'rb') as f:
            f.read()
        os.listdir(layer)
        ROUNDS.append(time.perf_counter() - r0)
    return time.perf_counter() - t0


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] * 1000


def nobody_proc(model, descs, threads, stop_path, count_fd):
    os.setgroups([])
    os.setgid(NOBODY)
    os.setuid(NOBODY)
    done = [0] * threads

    def loop(t):
        lk = Lookups(model, descs)
        while not os.path.exists(stop_path):
            try:
                lk.call()
                done[t] += 1
            except BlockingIOError:      # EAGAIN: its queue is full
                time.sleep(0.001)

    ts = [threading.Thread(target=loop, args=(t,)) for t in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    os.write(count_fd, b'%d\n' % sum(done))
    os._exit(0)


def metric(mnt, name):
    with open(os.path.join(mnt, '.kvfs', 'metrics')) as f:
        for line in f:
            if line.startswith(name + ' '):
                return line.split()[1]
    return 'absent'


def main():
    mnt = sys.argv[1]
    calls, descs = opt('--calls', 60), opt('--descs', 60000)
    procs, threads, label = opt('--procs', 4), opt('--threads', 6), opt('--label', '')
    fuse = '--fuse' in sys.argv
    model = os.path.join(mnt, 'fair')
    make_pages(os.path.join(model, '0'))
    os.chmod(model, 0o755)
    root_side = timed_fuse if fuse else timed_calls
    alone = root_side(model, descs, calls)
    p_alone = (pct(ROUNDS, 0.5), pct(ROUNDS, 0.99)) if fuse else None
    stop_path = os.path.join('/tmp', 'bench_fair.stop.%d' % os.getpid())
    r, w = os.pipe()
    pids = []
    for _ in range(procs):
        pid = os.fork()
        if pid == 0:
            os.close(r)
            nobody_proc(model, descs, threads, stop_path, w)
        pids.append(pid)
    os.close(w)
    t0 = time.perf_counter()
    time.sleep(2.0)                      # every nobody thread is calling
    contended = root_side(model, descs, calls)
    weighting = metric(mnt, 'kvfs_fast_uid_weighting')
    open(stop_path, 'w').close()
    for pid in pids:
        os.waitpid(pid, 0)
    span = time.perf_counter() - t0
    os.unlink(stop_path)
    with os.fdopen(r) as f:
        nobody_calls = sum(int(x) for x in f.read().split())
    if fuse:
        print('%sroot: %d rounds of stat, stat missing, read, ls (1,000 names) alone %.3f s '
              '(round p50 %.2f ms, p99 %.2f ms), against %d x %d uid-%d threads of LOOKUPs '
              'of %d %.3f s (p50 %.2f ms, p99 %.2f ms); kept %.3f; uid %d: %.1f calls/s '
              'over %.1f s; kvfs_fast_uid_weighting %s'
              % (label, calls, alone, p_alone[0], p_alone[1], procs, threads, NOBODY, descs,
                 contended, pct(ROUNDS, 0.5), pct(ROUNDS, 0.99), alone / contended, NOBODY,
                 nobody_calls / span, span, weighting))
        return
    print('%sroot: %d LOOKUPs of %d alone %.3f s, against %d x %d uid-%d threads %.3f s; '
          'kept %.3f; uid %d: %.0f calls/s over %.1f s; kvfs_fast_uid_weighting %s'
          % (label, calls, descs, alone, procs, threads, NOBODY, contended, alone / contended,
             NOBODY, nobody_calls / span, span, weighting))


if __name__ == '__main__':
    main()
