"""Page files held open unsealed by one user, against root's writes and
the mount's answers (docs/benchmarks/engines.md, "Pages held open by one
uid"): THREADS threads of uid 65534 each loop for SECS seconds: create a
page, write one byte at offset SIZE - 1 (the daemon charges SIZE to the
write-back budget) and keep the descriptor. Meanwhile root, in its own
layer, writes 4 KiB pages (open, write, close) and stats a page, and the
daemon's VmRSS is sampled. Prints root's latencies, the attacker's pages
held and refused, and the daemon's RSS growth.
argv: MNT DAEMON_PID [--threads N] [--secs S] [--size BYTES] [--label L]"""
import errno
import os
import sys
import threading
import time

NOBODY = 65534


def opt(name, default):
    return type(default)(sys.argv[sys.argv.index(name) + 1]) if name in sys.argv else default


def rss(pid):
    with open('/proc/%d/status' % pid) as f:
        for line in f:
            if line.startswith('VmRSS:'):
                return int(line.split()[1]) * 1024
    return 0


def attacker(layer, threads, secs, size, out_fd):
    os.setgroups([])
    os.setgid(NOBODY)
    os.setuid(NOBODY)
    held, refused, other = [0] * threads, [0] * threads, [0] * threads
    fds = []
    end = time.monotonic() + secs

    def loop(t):
        i = 0
        while time.monotonic() < end:
            try:
                fd = os.open(os.path.join(layer, 'h%d-%d' % (t, i)),
                             os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            except OSError:
                other[t] += 1
                time.sleep(0.01)
                continue
            i += 1
            try:
                os.pwrite(fd, b'x', size - 1)
                fds.append(fd)
                held[t] += 1
            except OSError as e:
                refused[t] += e.errno == errno.EDQUOT
                other[t] += e.errno != errno.EDQUOT
                try:
                    os.close(fd)
                except OSError:
                    pass

    ts = [threading.Thread(target=loop, args=(t,)) for t in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    os.write(out_fd, b'%d %d %d\n' % (sum(held), sum(refused), sum(other)))
    for fd in fds:                 # sealed at exit: keep them, as the
        try:                       # attacker's pages, until unmount
            os.close(fd)
        except OSError:
            pass
    os._exit(0)


def pct(v, q):
    v = sorted(v)
    return v[min(len(v) - 1, int(len(v) * q))] if v else float('nan')


def main():
    mnt, dpid = sys.argv[1], int(sys.argv[2])
    threads, secs = opt('--threads', 8), opt('--secs', 20.0)
    size, label = opt('--size', 64 << 20), opt('--label', '')
    open_layer, root_layer = os.path.join(mnt, 'hold', '0'), os.path.join(mnt, 'hold', '1')
    os.makedirs(open_layer, exist_ok=True)
    os.makedirs(root_layer, exist_ok=True)
    os.chmod(open_layer, 0o777)
    with open(os.path.join(root_layer, 'probe'), 'wb') as f:
        f.write(b'p' * 4096)
    rss0, peak = rss(dpid), 0
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        attacker(open_layer, threads, secs, size, w)
    os.close(w)
    t_end = time.monotonic() + secs
    wlat, slat, n = [], [], 0
    while time.monotonic() < t_end:
        t0 = time.monotonic()
        os.stat(os.path.join(root_layer, 'probe'))
        slat.append(time.monotonic() - t0)
        t0 = time.monotonic()
        with open(os.path.join(root_layer, 'w%d' % n), 'wb') as f:
            f.write(b'r' * 4096)
        wlat.append(time.monotonic() - t0)
        os.unlink(os.path.join(root_layer, 'w%d' % n))
        n += 1
        peak = max(peak, rss(dpid))
        time.sleep(0.05)
    held, refused, other = (int(x) for x in os.read(r, 100).split())
    os.waitpid(pid, 0)
    print('%sroot: %d writes of 4 KiB, p50 %.4f s, max %.3f s; stat p50 %.4f s, max %.3f s; '
          'uid %d, %d threads: %d pages of %d MiB held open, %d writes refused (EDQUOT), '
          '%d other errors; daemon RSS +%d MiB at peak'
          % (label, len(wlat), pct(wlat, 0.5), max(wlat), pct(slat, 0.5), max(slat), NOBODY,
             threads, held, size >> 20, refused, other, (peak - rss0) >> 20))


if __name__ == '__main__':
    main()
