"""Every fault seam, armed from outside through user.kvfs.fault (the mount
has -o fault_injection,ram_cache=0), one at a time. For each: the failing
operation reports a clear error (errno to the client, a log line), nothing
acknowledged before is lost, nothing half-written becomes visible, short
transfers are invisible, and the daemon keeps serving.

usage: faults.py MNT LOG run      (then faults.sh remounts)
       faults.py MNT LOG verify   (after a clean remount)
"""
import errno
import json
import mmap
import os
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(__file__))
import kvfsabi as abi  # noqa: E402
from kvfsabi import fail  # noqa: E402
from pagetool import content  # noqa: E402

MNT, LOG, MODE = sys.argv[1:4]
D = f'{MNT}/m/0'
STATE = f'{MNT}/../faults.json'      # acknowledged and failed pages, for verify
MB = 1 << 20


def arm(spec):
    os.setxattr(MNT, 'user.kvfs.fault', spec.encode())


def drop_caches():
    """So that reads reach the daemon (the RAM tier is off)."""
    with open('/proc/sys/vm/drop_caches', 'w') as f:
        f.write('3')


def write(name, size=70000, fsync=True):
    """A new page; 0 or the errno of the first call that failed."""
    data = content(name, size)
    try:
        fd = os.open(f'{D}/{name}', os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except OSError as e:
        return e.errno
    try:
        os.write(fd, data)
        if fsync:
            os.fsync(fd)
        return 0
    except OSError as e:
        return e.errno
    finally:
        try:
            os.close(fd)
        except OSError:
            pass


def read(name):
    with open(f'{D}/{name}', 'rb') as f:
        return f.read()


def log_has(text):
    with open(LOG, errors='replace') as f:
        return text in f.read()


class Run:
    def __init__(self):
        self.acked, self.failed, self.maybe = [], [], []

    def ok(self, name, **kw):
        rc = write(name, **kw)
        if rc:
            fail(f'{name}: {errno.errorcode[rc]} with no fault armed')
        if kw.get('fsync', True):
            self.acked.append(name)

    def must_fail(self, name, spec, want=(errno.EIO,), log=None):
        """Arm spec, write name with fsync: it fails with one of want, and
        the page is not visible afterwards (withdrawn, never half there)."""
        arm(spec)
        rc = write(name)
        if rc not in want:
            fail(f'{spec}: fsync of {name} gave {errno.errorcode.get(rc, rc)}, '
                 f'want {[errno.errorcode[w] for w in want]}')
        if os.path.exists(f'{D}/{name}'):
            fail(f'{spec}: page {name} whose payload failed is visible')
        if log and not log_has(log):
            fail(f'{spec}: no log line containing {log!r}')
        self.failed.append(name)

    def check_acked(self, why):
        drop_caches()
        for name in self.acked:
            if read(name) != content(name, 70000):
                fail(f'after {why}: acknowledged page {name} has wrong bytes')

    # ---- the seams ----

    def spec_errors(self):
        for bad in ('store write 0 EIO', 'disk write 1 EIO', 'store write 1 EBADF',
                    'manifest commit 1 short', 'store open 1 EIO', 'store write 1 EIO 0',
                    '', 'x' * 200):
            try:
                arm(bad)
                fail(f'fault spec {bad!r} accepted')
            except OSError as e:
                if e.errno != errno.EINVAL:
                    fail(f'fault spec {bad!r}: {e}, want EINVAL')
        if os.getxattr(MNT, 'user.kvfs.fault') != b'off':
            fail('a refused spec left something armed')

    def store_writes(self):
        self.must_fail('w-eio', 'store write 1 EIO', log='lost: writing its payload failed')
        self.ok('after-w-eio')
        self.must_fail('w-nospc', 'store write 1 ENOSPC', want=(errno.EIO, errno.ENOSPC))
        self.must_fail('fsync-eio', 'store fsync 1 EIO', log='fdatasync')
        self.ok('after-fsync-eio')
        arm('store write 1 short')      # retried by the store: unseen
        self.ok('w-short')
        drop_caches()
        if read('w-short') != content('w-short', 70000):
            fail('a page written through a short transfer reads back wrong')

    def store_reads(self):
        drop_caches()
        # The kernel retries a failed readahead with a read of its own:
        # fail both (and a few more) so the client sees the error.
        arm('store read 1 EIO 4')
        try:
            read('base1')
            fail('read of base1 succeeded through an injected EIO')
        except OSError as e:
            if e.errno != errno.EIO:
                fail(f'injected read EIO gave {e}')
        arm('off')
        if read('base1') != content('base1', 70000):      # served again
            fail('base1 after a failed read')
        drop_caches()
        arm('store read 1 short')
        if read('base2') != content('base2', 70000):
            fail('a short read was not retried into the right bytes')

    def fast_path(self):
        """A durable batch whose first payload write fails: every page of it
        reports EIO and none is visible; a READ batch with one failing page
        zeroes that destination and serves the others."""
        dfd = os.open(f'{MNT}/m', os.O_RDONLY | os.O_DIRECTORY)
        mfd = abi.memfd(8 * MB)
        mem = mmap.mmap(mfd, 8 * MB)
        rid, _ = abi.register(dfd, mfd)
        names = [b'fp-a', b'fp-b', b'fp-c']
        ds = []
        for i, n in enumerate(names):
            data = content(n.decode(), 70000)
            off = 2 * MB + i * 128 * 1024
            mem[off:off + len(data)] = data
            ds.append(abi.Desc(0, n, dst_off=2 * MB + i * 128 * 1024, dst_len=len(data)))
        arm('store write 1 EIO')
        abi.place(mem, ds, 0, MB)
        abi.batch(dfd, abi.WRITE, rid, 0, len(ds), flags=abi.WRITE_DURABLE)
        abi.collect(mem, ds, 0)
        if [d.status for d in ds] != [-errno.EIO] * 3:
            fail(f'durable batch with a failed write: statuses {[d.status for d in ds]}')
        # The page whose write failed is withdrawn; its batch mates were
        # written fine and may stay (EIO promised no durability, not
        # absence), but only whole.
        gone = [n.decode() for n in names if not os.path.exists(f'{D}/{n.decode()}')]
        if len(gone) != 1:
            fail(f'durable batch with one failed write: {gone} withdrawn, want exactly one')
        self.failed += gone
        for n in names:
            if n.decode() not in gone:
                if read(n.decode()) != content(n.decode(), 70000):
                    fail(f'batch mate {n} of a failed page reads back wrong')
                self.maybe.append(n.decode())
        # READ: base3, base4, base5 into three destinations; the 2nd fails
        drop_caches()
        rs = [abi.Desc(0, f'base{i}'.encode(), dst_off=4 * MB + k * 128 * 1024,
                       dst_len=128 * 1024) for k, i in enumerate((3, 4, 5))]
        mem[4 * MB:5 * MB] = b'\xee' * MB
        arm('store read 2 EIO')
        abi.place(mem, rs, 0, MB)
        abi.batch(dfd, abi.READ, rid, 0, len(rs))
        abi.collect(mem, rs, 0)
        bad = [d for d in rs if d.status == -errno.EIO]
        if len(bad) != 1 or any(d.status not in (0, -errno.EIO) for d in rs):
            fail(f'READ batch with one failing page: statuses {[d.status for d in rs]}')
        for d in rs:
            got = bytes(mem[d.dst_off:d.dst_off + 70000])
            if d.status == 0 and got != content(d.name.decode(), 70000):
                fail(f'fast READ of {d.name} next to a failed page: wrong bytes')
            if d.status != 0 and got != bytes(70000):
                fail(f'the failed page {d.name} left non-zero bytes in its destination')
        abi.unregister(dfd, rid)
        os.close(dfd)

    def manifest(self):
        """A failed commit fails the fsync waiting on it, and is retried:
        the page stays visible, whole, and becomes durable a second later.
        While the manifest keeps failing the daemon still serves."""
        arm('manifest commit 1 EIO')
        rc = write('mc-1')
        if rc != errno.EIO:
            fail(f'fsync through a failed manifest commit gave {errno.errorcode.get(rc)}')
        if not log_has('committing: Input/output error (injected fault)'):
            fail('no log line for the failed commit')
        if read('mc-1') != content('mc-1', 70000):
            fail('page whose commit failed (and is retried) reads back wrong')
        arm('manifest write 1 EIO')
        if write('mw-1') != errno.EIO:
            fail('fsync through a failed row change did not fail')
        # Four failures in a row: four seconds of retries; serving goes on.
        arm('manifest commit 1 EIO 4')
        t = threading.Thread(target=lambda: setattr(self, 'slow', write('mc-slow')))
        t.start()
        time.sleep(0.3)
        start = time.monotonic()
        self.check_acked('a failing manifest (reads)')
        self.ok('during-failures', fsync=False)
        os.listdir(D)
        if time.monotonic() - start > 2:
            fail('reads and writes stalled while the manifest was failing')
        t.join()
        if self.slow != errno.EIO:
            fail(f'fsync during repeated commit failures gave {self.slow}')
        if not log_has('manifest transaction failed'):
            fail('no log line for the retried transaction')
        # Retried once a second: durable once the four failures are past.
        deadline = time.monotonic() + 20
        for name in ('mc-1', 'mw-1', 'mc-slow', 'during-failures'):
            while True:
                fd = os.open(f'{D}/{name}', os.O_RDONLY)
                try:
                    os.fsync(fd)
                    break
                except OSError as e:
                    if e.errno != errno.EIO or time.monotonic() > deadline:
                        fail(f'{name} never became durable after the manifest recovered: {e}')
                    time.sleep(0.2)
                finally:
                    os.close(fd)
            self.acked.append(name)

    def run(self):
        os.makedirs(D, exist_ok=True)
        for i in range(1, 6):
            self.ok(f'base{i}')
        self.spec_errors()
        self.store_writes()
        self.check_acked('store write faults')
        self.store_reads()
        self.fast_path()
        self.check_acked('fast-path faults')
        self.manifest()
        self.check_acked('manifest faults')
        arm('off')
        with open(STATE, 'w') as f:
            json.dump({'acked': self.acked, 'failed': self.failed, 'maybe': self.maybe}, f)
        print(f'faults: {len(self.acked)} acknowledged pages kept, '
              f'{len(self.failed)} failed pages withdrawn')


def verify():
    with open(STATE) as f:
        st = json.load(f)
    for name in st['acked']:
        if read(name) != content(name, 70000):
            fail(f'after remount: acknowledged page {name} wrong or missing')
    for name in st['failed']:
        if os.path.exists(f'{D}/{name}'):
            fail(f'after remount: failed page {name} came back')
    for name in st['maybe']:
        if os.path.exists(f'{D}/{name}') and read(name) != content(name, 70000):
            fail(f'after remount: page {name} is there with wrong bytes')


if __name__ == '__main__':
    if MODE == 'run':
        Run().run()
    else:
        verify()
