"""One uid's pages still being written hold at most half the write-back
budget (dirtyshare.sh). argv: MNT BUDGET

As uid 65534, in layer m/0 (mode 777):
  1. four 1 MiB pages written and held open: half the budget;
  2. a fifth page's write waits (at most about 2 s) and fails with EDQUOT;
  3. 20 threads write a new page each at once: every one EDQUOT, while
     root writes 1 MiB pages in m/1, each well under the old 2 s stall,
     and stat answers; the budget is never passed;
     (also a page grown by ftruncate, and a page whose write was refused
     takes no later write);
  4. the four are closed (sealed); a new page then goes in, and so does
     one page of 6 MiB alone (past half the budget, but the only one);
     three 3 MiB pages written together: at least one is stored.
Root, trusted with the whole budget, holds six 1 MiB pages open at once."""
import errno
import os
import sys
import threading
import time

MNT, BUDGET = sys.argv[1], int(sys.argv[2])
MIB = 1 << 20
NOBODY = 65534
L0, L1 = os.path.join(MNT, 'm', '0'), os.path.join(MNT, 'm', '1')


def fail(msg):
    print('FAIL:', msg, file=sys.stderr)
    sys.exit(1)


def stats():
    raw = os.getxattr(MNT, 'user.kvfs.stats').decode()
    return {k: int(v) for k, v in (line.split() for line in raw.splitlines())}


def write_page(path, size, keep=False):
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        os.write(fd, b'\x5a' * size)
    except OSError:
        os.close(fd)
        raise
    if keep:
        return fd
    os.close(fd)
    return None


def as_nobody():
    """Fork; the child becomes uid 65534 and runs the checks on its side."""
    r, w = os.pipe()
    pid = os.fork()
    if pid:
        os.close(w)
        return pid, r
    os.close(r)
    os.setgroups([])
    os.setgid(NOBODY)
    os.setuid(NOBODY)
    try:
        nobody_side(w)
    except BaseException as e:  # noqa: B902
        print('uid %d: %r' % (NOBODY, e), file=sys.stderr)
        os._exit(1)
    os._exit(0)


def say(w, what):
    os.write(w, (what + '\n').encode())


def nobody_side(w):
    held = [write_page(os.path.join(L0, 'hold%d' % i), MIB, keep=True) for i in range(4)]
    t0 = time.monotonic()
    try:
        write_page(os.path.join(L0, 'fifth'), MIB)
        raise SystemExit('a fifth page past half the budget was taken')
    except OSError as e:
        if e.errno != errno.EDQUOT:
            raise
    waited = time.monotonic() - t0
    if waited > 10:
        raise SystemExit('EDQUOT after %.1f s' % waited)
    # Growing a page by ftruncate holds its zeros in RAM: charged alike.
    fd = os.open(os.path.join(L0, 'grown'), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        os.ftruncate(fd, MIB)
        raise SystemExit('a page grown by ftruncate past half the budget')
    except OSError as e:
        if e.errno != errno.EDQUOT:
            raise
    # ... and doomed, as a page whose write was refused: its close says so.
    try:
        os.close(fd)
        raise SystemExit('the close of a page whose ftruncate was refused returned 0')
    except OSError as e:
        if e.errno != errno.EDQUOT:
            raise
    # A page whose write was refused is doomed: later writes fail too.
    doomed = os.open(os.path.join(L0, 'doomed'), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        os.write(doomed, b'd' * MIB)
        raise SystemExit('a page past half the budget was written')
    except OSError as e:
        if e.errno != errno.EDQUOT:
            raise
    say(w, 'holding')
    errs = []

    def flood(i):
        try:
            write_page(os.path.join(L0, 'flood%d' % i), MIB)
            errs.append('flood%d taken' % i)
        except OSError as e:
            if e.errno != errno.EDQUOT:
                errs.append(repr(e))

    ts = [threading.Thread(target=flood, args=(i,)) for i in range(20)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    if errs:
        raise SystemExit('flood: %s' % errs[:3])
    say(w, 'flooded')
    for fd in held:
        os.close(fd)
    try:
        os.write(doomed, b'd' * 4096)
        raise SystemExit('a doomed page took a write once there was room')
    except OSError as e:
        if e.errno != errno.EDQUOT:
            raise
    try:
        os.close(doomed)          # reports the loss
    except OSError:
        pass
    write_page(os.path.join(L0, 'after'), MIB)
    write_page(os.path.join(L0, 'big'), 6 * MIB)
    # Three pages of 3 MiB written together, 9 MiB past the 4 MiB share:
    # writers that wait only for each other would all time out; the last
    # to wait is refused at once and the others go on.
    stored, errs = [], []

    def chunked(i):
        fd = os.open(os.path.join(L0, 'c%d' % i), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        t0 = time.monotonic()
        try:
            for _ in range(48):
                os.write(fd, b'c' * 65536)
            os.close(fd)
            stored.append(i)
        except OSError as e:
            if e.errno != errno.EDQUOT:
                errs.append(repr(e))
            elif time.monotonic() - t0 > 1.5:   # not the 2 s wait for its own pages
                errs.append('EDQUOT after %.1f s' % (time.monotonic() - t0))
            try:
                os.close(fd)
            except OSError:
                pass

    ts = [threading.Thread(target=chunked, args=(i,)) for i in range(3)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    if errs or not stored:
        raise SystemExit('three big pages together: stored %s, errors %s' % (stored, errs))
    print('three 3 MiB pages together: %d stored' % len(stored))
    say(w, 'done')


def past_share_alone():
    """A uid's one page of any size, alone, past its share: root's writes
    do not wait for it (it counts against them up to the share only).
    Before, a uid 65534 page of twice the budget held open made each of
    root's writes wait for the 2 s stall rule and pass as an overrun."""
    r, w = os.pipe()
    go_r, go_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        os.close(go_w)
        os.setgroups([])
        os.setgid(NOBODY)
        os.setuid(NOBODY)
        path = os.path.join(L0, 'huge')
        fd = write_page(path, 2 * BUDGET, keep=True)
        os.write(w, b'held\n')
        os.read(go_r, 1)
        os.close(fd)
        os.unlink(path)
        os._exit(0)
    os.close(w)
    os.close(go_r)
    if os.read(r, 5) != b'held\n':
        fail('uid %d did not get to hold a page of twice the budget' % NOBODY)
    before = stats()
    for k in range(4):
        write_page(os.path.join(L1, 'beside%d' % k), 65536)
    after = stats()
    os.write(go_w, b'g')
    _, status = os.waitpid(pid, 0)
    if status:
        fail('uid %d holding a page past its share exited %d' % (NOBODY, status))
    if (after['dirty_waits'], after['dirty_overruns']) != \
       (before['dirty_waits'], before['dirty_overruns']):
        fail('root waited beside a page of uid %d past its share: waits %d -> %d, '
             'overruns %d -> %d' % (NOBODY, before['dirty_waits'], after['dirty_waits'],
                                    before['dirty_overruns'], after['dirty_overruns']))


def main():
    pid, r = as_nobody()
    lines = os.fdopen(r)
    if lines.readline().strip() != 'holding':
        os.waitpid(pid, 0)
        fail('uid %d did not get to hold its pages' % NOBODY)
    # Root writes while uid 65534 holds half and floods.
    lat, peak, i = [], 0, 0
    done = threading.Event()

    def watcher():
        nonlocal peak
        while not done.is_set():
            peak = max(peak, stats()['dirty_bytes'])
            os.stat(os.path.join(L0, 'hold0'))
            time.sleep(0.01)

    wt = threading.Thread(target=watcher)
    wt.start()
    flooded = threading.Thread(target=lambda: lines.readline())
    flooded.start()
    while flooded.is_alive() or i < 5:
        t0 = time.monotonic()
        write_page(os.path.join(L1, 'root%d' % i), MIB)
        lat.append(time.monotonic() - t0)
        i += 1
    done.set()
    wt.join()
    if lines.readline().strip() != 'done':
        os.waitpid(pid, 0)
        fail('uid %d side failed' % NOBODY)
    _, status = os.waitpid(pid, 0)
    if status:
        fail('uid %d side exited %d' % (NOBODY, status))
    print('root: %d pages of 1 MiB beside uid %d, slowest %.3f s; dirty peak %d of %d'
          % (len(lat), NOBODY, max(lat), peak, BUDGET))
    if max(lat) > 1.5:
        fail('a root write took %.2f s while uid %d held half the budget' % (max(lat), NOBODY))
    if peak > BUDGET or stats()['dirty_peak'] > BUDGET + 6 * MIB:
        fail('write-back peak %d (sampled %d) past the budget %d'
             % (stats()['dirty_peak'], peak, BUDGET))
    past_share_alone()
    # Root is trusted with the whole budget: six 1 MiB pages open at once.
    fds = [write_page(os.path.join(L1, 'rhold%d' % k), MIB, keep=True) for k in range(6)]
    for fd in fds:
        os.close(fd)


if __name__ == '__main__':
    main()
