"""MOUNT/.kvfs/events through a real mount (phases run by events.sh).

main: stored records for FUSE and fast-path writes, replaced (fast-path
      KVFS_WRITE_REPLACE and rename over a page), removed (unlink), in order
      with consecutive sequence numbers; a page whose payload write fails is
      never announced, a retried transaction announces once; poll and a
      blocked read wake when a record arrives; 16 readers blocked in read
      while ls, stat and a write still answer, and interrupted readers exit;
      a reader that does not read gets an exact overflow record. Prints the
      last sequence number.
remount LAST: the numbering goes on from LAST; a small capacity turns a
      write flood into evicted records, one per eviction the daemon counts,
      each naming a page that is gone.

usage: events.py MNT main
       events.py MNT remount LAST
"""
import json
import mmap
import os
import select
import signal
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(__file__))
import kvfsabi as abi  # noqa: E402

MNT = sys.argv[1]
EVENTS = os.path.join(MNT, '.kvfs', 'events')
M = os.path.join(MNT, 'm')
WAIT = 10.0


def fail(msg):
    print('FAIL:', msg, file=sys.stderr)
    sys.exit(1)


def stats():
    with open(os.path.join(MNT, '.kvfs', 'stats')) as f:
        return json.load(f)['events']


class Reader:
    """One open of the events file; records parsed from its JSON lines."""

    def __init__(self):
        self.fd = os.open(EVENTS, os.O_RDONLY)
        self.buf = b''

    def close(self):
        os.close(self.fd)

    def ready(self, timeout):
        p = select.poll()
        p.register(self.fd, select.POLLIN)
        return bool(p.poll(int(timeout * 1000)))

    def _read(self):
        self.buf += os.read(self.fd, 1 << 16)
        lines = self.buf.split(b'\n')
        self.buf = lines.pop()
        return [json.loads(line) for line in lines]

    def drain(self):
        """Everything readable now (never blocks)."""
        out = []
        while self.ready(0):
            out += self._read()
        return out

    def take(self, n, what):
        """Exactly the next n records (fails after WAIT seconds)."""
        out, end = [], time.monotonic() + WAIT
        while len(out) < n:
            left = end - time.monotonic()
            if left <= 0 or not self.ready(left):
                fail(f'{what}: {len(out)} of {n} records after {WAIT} s: {out}')
            out += self._read()
        if len(out) > n:
            fail(f'{what}: {len(out)} records, want {n}: {out}')
        return out

    def quiet(self, what, secs=0.5):
        if self.ready(secs):
            fail(f'{what}: unexpected records {self.drain()}')


def expect(rec, typ, layer, name, size, model='m'):
    want = {'type': typ, 'model': model, 'layer': str(layer), 'name': name, 'size': size}
    got = {k: rec.get(k) for k in want}
    if got != want:
        fail(f'record {rec}: want {want}')
    if not isinstance(rec.get('seq'), int) or not isinstance(rec.get('time_ns'), int):
        fail(f'record {rec}: seq and time_ns must be integers')
    if abs(rec['time_ns'] / 1e9 - time.time()) > 60:
        fail(f'record {rec}: time_ns is not now')


def consecutive(recs, what):
    seqs = [r['seq'] for r in recs]
    if seqs != list(range(seqs[0], seqs[0] + len(seqs))):
        fail(f'{what}: sequence numbers are not consecutive: {seqs}')


def fuse_write(layer, name, data):
    with open(os.path.join(M, str(layer), name), 'wb') as f:
        f.write(data)


class Region:
    """A registered memfd to stage fast-path writes in."""

    def __init__(self, size=16 << 20):
        self.dirfd = os.open(M, os.O_RDONLY | os.O_DIRECTORY)
        self.fd = abi.memfd(size)
        self.mem = mmap.mmap(self.fd, size)
        self.rid, _ = abi.register(self.dirfd, self.fd)

    def write(self, pages, flags=0):
        """KVFS_IOC_WRITE of (layer, name, bytes) pages."""
        ds, off = [], 2 << 20
        for layer, name, data in pages:
            self.mem[off:off + len(data)] = data
            ds.append(abi.Desc(layer, name, dst_off=off, dst_len=len(data)))
            off += (len(data) + 4095) // 4096 * 4096
        abi.place(self.mem, ds, 0, 1 << 20)
        res = abi.batch(self.dirfd, abi.WRITE, self.rid, 0, len(ds), flags=flags)
        abi.collect(self.mem, ds, 0)
        return res, ds


def set_fault(spec):
    os.setxattr(MNT, 'user.kvfs.fault', spec.encode())


# ---- main ----

def test_changes(reg):
    rd = Reader()
    recs = []
    fuse_write(0, 'a', b'A' * 100)
    recs += rd.take(1, 'FUSE write')
    expect(recs[-1], 'stored', 0, 'a', 100)
    if recs[0]['seq'] != 1:
        fail(f'the first record on a new store is seq {recs[0]["seq"]}, not 1')

    res, ds = reg.write([(1, b'f1', b'f' * 5000)])
    if ds[0].status:
        fail(f'fast write: status {ds[0].status}')
    recs += rd.take(1, 'fast-path write')
    expect(recs[-1], 'stored', 1, 'f1', 5000)

    res, ds = reg.write([(1, b'f1', b'g' * 777)], flags=abi.WRITE_REPLACE)
    if ds[0].status:
        fail(f'fast write with KVFS_WRITE_REPLACE: status {ds[0].status}')
    recs += rd.take(1, 'fast-path replace')
    expect(recs[-1], 'replaced', 1, 'f1', 777)

    fuse_write(0, 'b', b'B' * 33)
    recs += rd.take(1, 'second FUSE write')
    expect(recs[-1], 'stored', 0, 'b', 33)
    os.rename(os.path.join(M, '0', 'b'), os.path.join(M, '0', 'a'))
    recs += rd.take(2, 'rename over a page')
    expect(recs[-2], 'removed', 0, 'b', 33)
    expect(recs[-1], 'replaced', 0, 'a', 33)
    os.rename(os.path.join(M, '0', 'a'), os.path.join(M, '1', 'moved'))
    recs += rd.take(2, 'rename to a free name')
    expect(recs[-2], 'removed', 0, 'a', 33)
    expect(recs[-1], 'stored', 1, 'moved', 33)

    os.unlink(os.path.join(M, '1', 'moved'))
    recs += rd.take(1, 'unlink')
    expect(recs[-1], 'removed', 1, 'moved', 33)
    consecutive(recs, 'changes')

    # A page being written is not announced until it is sealed.
    f = open(os.path.join(M, '0', 'slow'), 'wb')
    f.write(b'S' * 10)
    f.flush()
    rd.quiet('a page still being written')
    f.close()
    recs += rd.take(1, 'sealed at close')
    expect(recs[-1], 'stored', 0, 'slow', 10)

    # Only durable changes are announced: a page whose payload write
    # fails is withdrawn and never appears; the next one follows on.
    # The first commit after it fails too and is retried a second later,
    # so the page is sealed, and looked up as such, well before it is
    # withdrawn: the kernel caches that entry for the entry timeout (an
    # hour) unless the withdrawal tells it to forget the name.
    set_fault('store write 1 EIO')
    set_fault('manifest commit 1 EIO')
    fuse_write(0, 'lost', b'L' * 10)
    for _ in range(10):     # looked up while sealed, not yet withdrawn
        try:
            os.stat(os.path.join(M, '0', 'lost'))
        except FileNotFoundError:
            break   # already withdrawn (the commit fault went elsewhere)
        time.sleep(0.05)
    # The page goes once its write-back fails, which a slow daemon (a
    # sanitizer build) reaches after the fsync of the layer returns.
    end = time.monotonic() + WAIT
    while True:
        fd = os.open(os.path.join(M, '0'), os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        except OSError:
            pass        # EIO: the withdrawn page
        os.close(fd)
        if not os.path.exists(os.path.join(M, '0', 'lost')):
            break
        if time.monotonic() > end:
            fail('the page whose write failed is still there')
        time.sleep(0.1)
    rd.quiet('a withdrawn page')
    # A transaction that fails is retried: its records come out once.
    set_fault('manifest commit 1 EIO')
    fuse_write(0, 'retried', b'R' * 11)
    recs += rd.take(1, 'page committed on the second try')
    expect(recs[-1], 'stored', 0, 'retried', 11)
    rd.quiet('a retried transaction', 1.5)
    consecutive(recs, 'changes, fault and retry')

    # When a durable write returns, its records are already out.
    res, ds = reg.write([(1, b'dur', b'd' * 64)], flags=abi.WRITE_DURABLE)
    if stats()['last_seq'] != recs[-1]['seq'] + 1:
        fail(f'a durable write returned before its record: {stats()}')
    recs += rd.take(1, 'durable write')
    expect(recs[-1], 'stored', 1, 'dur', 64)
    # A new reader starts from the oldest record kept.
    r2 = Reader()
    old = r2.take(len(recs), 'a second reader from the oldest record')
    if [x['seq'] for x in old] != [x['seq'] for x in recs]:
        fail(f'second reader: {old} != {recs}')
    r2.close()
    rd.close()


def test_wakeups():
    rd = Reader()
    rd.drain()
    if rd.ready(0.3):
        fail('poll reports a reader with nothing to read as readable')
    t0 = time.monotonic()
    threading.Timer(0.5, fuse_write, (0, 'p1', b'p')).start()
    if not rd.ready(WAIT):
        fail('poll did not wake when a record arrived')
    if time.monotonic() - t0 < 0.4:
        fail('poll returned before the record was written')
    expect(rd.take(1, 'after poll')[0], 'stored', 0, 'p1', 1)

    got = []
    th = threading.Thread(target=lambda: got.append(os.read(rd.fd, 1 << 16)))
    th.start()
    th.join(0.5)
    if not th.is_alive():
        fail(f'read with nothing to read returned {got}')
    fuse_write(0, 'p2', b'pp')
    th.join(WAIT)
    if th.is_alive():
        fail('a blocked read did not wake when a record arrived')
    expect(json.loads(got[0]), 'stored', 0, 'p2', 2)

    # A read smaller than a record gets it in pieces, nothing lost.
    fuse_write(0, 'p3', b'ppp')
    rd.ready(WAIT)
    line = b''
    while not line.endswith(b'\n'):
        piece = os.read(rd.fd, 7)
        if not piece or len(piece) > 7:
            fail(f'7-byte read returned {piece!r}')
        line += piece
    expect(json.loads(line), 'stored', 0, 'p3', 3)
    rd.close()


BLOCKED = r'''
import os, select, sys
fd = os.open(sys.argv[1], os.O_RDONLY)
p = select.poll(); p.register(fd, select.POLLIN)
while p.poll(0):
    os.read(fd, 1 << 16)
print('ready', flush=True)
sys.stdout.write(os.read(fd, 1 << 16).decode())
'''


def blocked_readers(n):
    procs = [subprocess.Popen([sys.executable, '-c', BLOCKED, EVENTS], text=True,
                              stdout=subprocess.PIPE) for _ in range(n)]
    for p in procs:
        if p.stdout.readline() != 'ready\n':
            fail('a blocked reader did not start')
    time.sleep(0.5)
    if any(p.poll() is not None for p in procs):
        fail('a reader with nothing to read did not block')
    return procs


def bounded(argv, what):
    try:
        subprocess.run(argv, check=True, timeout=WAIT, stdout=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        fail(f'{what} hung while readers were blocked on events')


def test_blocked_readers():
    before = stats()['readers']
    procs = blocked_readers(16)
    # No FUSE worker is held by them: the namespace still answers, and
    # with more parallel requests than the daemon has workers (16). Only
    # from children with a time limit: a mount whose workers are all
    # held would hang this process.
    bounded(['ls', '-l', os.path.join(M, '0')], 'ls')
    bounded(['stat', M, os.path.join(M, '0', 'p1')], 'stat')
    many = [subprocess.Popen(['stat', '-c', '%s', os.path.join(M, '0', 'p1')],
                             stdout=subprocess.DEVNULL) for _ in range(24)]
    for p in many:
        try:
            if p.wait(WAIT):
                fail('stat failed while readers were blocked')
        except subprocess.TimeoutExpired:
            fail('stat hung while readers were blocked on events')
    if stats()['readers'] != before + 16:     # safe now: ls answered
        fail(f'readers: {stats()["readers"]}, want {before + 16}')
    # The write wakes them: after it, readers leave.
    bounded([sys.executable, '-c', 'import sys; open(sys.argv[1], "w").write("x")',
             os.path.join(M, '0', 'during')], 'a write')
    for p in procs:
        try:
            out, _ = p.communicate(timeout=WAIT)
        except subprocess.TimeoutExpired:
            fail('a blocked reader did not get the new record')
        expect(json.loads(out.splitlines()[0]), 'stored', 0, 'during', 1)
    # Interrupted: a signal ends a blocked read, the reader goes away.
    procs = blocked_readers(4)
    for p in procs:
        p.send_signal(signal.SIGTERM)
    for p in procs:
        try:
            p.wait(WAIT)
        except subprocess.TimeoutExpired:
            fail('a reader blocked on events did not die of SIGTERM')
    end = time.monotonic() + WAIT
    while stats()['readers'] != before and time.monotonic() < end:
        time.sleep(0.1)
    if stats()['readers'] != before:
        fail(f'readers after they exited: {stats()["readers"]}, want {before}')


def test_overflow(reg, ring):
    last = stats()['last_seq']
    kept = stats()['retained']
    slow = Reader()                # cursor at the oldest record kept
    oldest = last - kept + 1
    n = ring * 3
    res, ds = reg.write([(2, b'o%04d' % i, b'o' * 16) for i in range(n)],
                        flags=abi.WRITE_DURABLE)
    if res['done'] != n:
        fail(f'overflow batch: {res}')
    if stats()['last_seq'] != last + n:
        fail(f'last_seq {stats()["last_seq"]} after {n} pages, want {last + n}')
    missed0 = stats()['missed']
    recs = slow.take(ring + 1, 'a reader that fell behind')
    ov = recs[0]
    first_kept = last + n - ring + 1
    want = {'type': 'overflow', 'missed': first_kept - oldest,
            'first_missed': oldest, 'last_missed': first_kept - 1}
    if {k: ov.get(k) for k in want} != want:
        fail(f'overflow record {ov}, want {want}')
    if recs[1]['seq'] != first_kept or recs[-1]['seq'] != last + n:
        fail(f'after the overflow: seqs {recs[1]["seq"]}..{recs[-1]["seq"]}, '
             f'want {first_kept}..{last + n}')
    consecutive(recs[1:], 'after the overflow')
    for rec, i in zip(recs[1:], range(n - ring, n)):
        expect(rec, 'stored', 2, 'o%04d' % i, 16)
    st = stats()
    if st['missed'] != missed0 + want['missed'] or st['overflows'] < 1:
        fail(f'metrics after the overflow: {st}')
    slow.quiet('a reader that caught up')
    slow.close()


def main_phase(ring):
    for d in ('', '0', '1', '2'):
        os.makedirs(os.path.join(M, d), exist_ok=True)
    reg = Region()
    test_changes(reg)
    test_wakeups()
    test_blocked_readers()
    test_overflow(reg, ring)
    print(stats()['last_seq'])


def remount_phase(last):
    if stats()['last_seq'] != last:
        fail(f'after the remount last_seq is {stats()["last_seq"]}, want {last}')
    rd = Reader()
    rd.quiet('a new mount: nothing from the last one is kept')
    fuse_write(0, 'again', b'x')
    rec = rd.take(1, 'first change after the remount')[0]
    expect(rec, 'stored', 0, 'again', 1)
    if rec['seq'] != last + 1:
        fail(f'first record after the remount is seq {rec["seq"]}, want {last + 1}')

    # Capacity 4M (events.sh): 64 pages of 128 KiB do not fit.
    os.makedirs(os.path.join(M, '3'))
    reg = Region()
    size = 128 << 10
    for b in range(8):
        # Bytes of their own: identical pages would share one extent
        # (dedup) and, depending on commit timing, never fill the store.
        res, ds = reg.write([(3, b'e%02d_%d' % (b, i),
                              (b'e%02d_%d.' % (b, i) * size)[:size]) for i in range(8)])
        if res['done'] != 8:
            fail(f'eviction flood: {res} {[d.status for d in ds]}')
    # The evictor runs on its own: wait until every eviction it counted
    # was committed, and match records to that count.
    recs, end = [], time.monotonic() + WAIT
    while True:
        fd = os.open(M, os.O_RDONLY | os.O_DIRECTORY)
        os.fsync(fd)
        os.close(fd)
        with open(os.path.join(MNT, '.kvfs', 'stats')) as f:
            evictions = json.load(f)['ssd']['evictions']
        recs += rd.drain()
        gone = [x for x in recs if x['type'] == 'evicted']
        if evictions and len(gone) == evictions or time.monotonic() > end:
            break
        time.sleep(0.2)
    if evictions == 0:
        fail('nothing was evicted: the test proves nothing')
    if len(gone) != evictions:
        fail(f'{len(gone)} evicted records, the daemon counts {evictions} evictions')
    if any(x['type'] == 'overflow' for x in recs):
        fail('overflow with the default ring')
    consecutive([rec] + recs, 'flood')
    for x in gone:
        if os.path.exists(os.path.join(MNT, x['model'], x['layer'], x['name'])):
            fail(f'evicted record for a page that is still there: {x}')
        if x['layer'] == '3' and x['size'] != size:
            fail(f'evicted record with the wrong size: {x}')
    stored = [x for x in recs if x['type'] == 'stored']
    if len(stored) != 64 or any(x['size'] != size for x in stored):
        fail(f'{len(stored)} stored records for 64 pages of {size} bytes')
    rd.close()


if __name__ == '__main__':
    if sys.argv[2] == 'main':
        main_phase(int(sys.argv[3]))
    else:
        remount_phase(int(sys.argv[3]))
