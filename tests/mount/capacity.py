"""Capacity and eviction through a real mount (driven by capacity.sh).

Each step is a subcommand; the shell script mounts and remounts between
them. Pages are 256 KiB, the store's capacity 32 MiB (128 pages).
"""
import errno
import hashlib
import json
import multiprocessing
import os
import sys
import threading
import time

PAGE = 256 * 1024
CAP = 32 << 20


def fail(msg):
    print(f'FAIL: {msg}', file=sys.stderr)
    sys.exit(1)


def payload(tag):
    """256 KiB that differ for every tag (and are the same for equal tags)."""
    seed = hashlib.sha256(tag.encode()).digest()
    return (seed * (PAGE // len(seed) + 1))[:PAGE]


def stats(mnt):
    with open(os.path.join(mnt, '.kvfs', 'stats')) as f:
        return json.load(f)


def write(mnt, name, tag=None):
    with open(os.path.join(mnt, 'm', '0', name), 'wb') as f:
        f.write(payload(tag or name))


def present(mnt, name):
    return os.path.exists(os.path.join(mnt, 'm', '0', name))


def read_ok(mnt, name, tag=None):
    with open(os.path.join(mnt, 'm', '0', name), 'rb') as f:
        return f.read() == payload(tag or name)


def settled(mnt):
    """The evictor runs behind the writers: wait until it is idle below
    the high watermark, and return the ssd stats."""
    for _ in range(100):
        s = stats(mnt)['ssd']
        if s['physical_bytes'] + s['reserved_bytes'] <= s['high_watermark_bytes']:
            return s
        time.sleep(0.05)
    fail(f'usage stays above the high watermark: {s}')


def used(mnt):
    st = os.statvfs(mnt)
    return (st.f_blocks - st.f_bfree) * st.f_frsize


def on_disk(store):
    """Blocks of the segment files (preallocated tails included), and how
    many files: ext4 also counts an extent-tree block per file there."""
    d = os.path.join(store, 'stripe0')
    total = n = 0
    for name in os.listdir(d):
        if name.startswith('seg-'):
            try:
                total += os.stat(os.path.join(d, name)).st_blocks * 512
                n += 1
            except FileNotFoundError:
                pass
    return total, n


def step_fill(mnt):
    """A: 60 pages, two of them twins (shared); then read the first ten,
    so that they are more recently used than the rest."""
    os.makedirs(os.path.join(mnt, 'm', '0'), exist_ok=True)
    for i in range(60):
        write(mnt, f'a{i:03d}', 'twin' if i in (10, 11) else None)
    # a030 is never read, but pinned: it goes last.
    path = os.path.join(mnt, 'm', '0', 'a030')
    os.setxattr(path, 'user.kvfs.pinned', b'1')
    if os.getxattr(path, 'user.kvfs.pinned') != b'1' or not os.stat(path).st_mode & 0o1000:
        fail('a030 did not become pinned (xattr, sticky bit)')
    try:
        os.setxattr(path, 'user.kvfs.pinned', b'yes')
        fail('a bad pinned value was accepted')
    except OSError as e:
        if e.errno != errno.EINVAL:
            fail(f'bad pinned value: {e}, wanted EINVAL')
    time.sleep(1.2)       # access times have a one-second grain
    for i in range(10):
        if not read_ok(mnt, f'a{i:03d}'):
            fail(f'a{i:03d} read back wrong')
    st = os.statvfs(mnt)
    if st.f_blocks * st.f_frsize != CAP:
        fail(f'df size {st.f_blocks * st.f_frsize} is not the capacity {CAP}')
    time.sleep(1.2)


def step_evict(mnt):
    """B: 70 more pages pass the high watermark. The unread A pages go,
    oldest first, the shared twins together in their place; the read ones,
    the pinned one, the one held open and every B page stay."""
    held = open(os.path.join(mnt, 'm', '0', 'a050'), 'rb')
    for i in range(70):
        write(mnt, f'b{i:03d}')
    s = settled(mnt)
    if s['evictions'] == 0:
        fail(f'no eviction counted: {s}')
    if used(mnt) > CAP or s['physical_bytes'] > CAP:
        fail(f'over capacity: df {used(mnt)}, store {s["physical_bytes"]}')
    for i in range(70):
        if not present(mnt, f'b{i:03d}'):
            fail(f'b{i:03d} evicted although newer than every A page')
    for i in range(10):
        if not present(mnt, f'a{i:03d}'):
            fail(f'a{i:03d} evicted although read after the other A pages')
    if not present(mnt, 'a030'):
        fail('pinned page a030 evicted before unpinned ones')
    gone = [i for i in range(10, 60) if not present(mnt, f'a{i:03d}')]
    # The twins share one extent and are the oldest unread pages: both
    # names go, by the newer one's time (shared pages once went last).
    if present(mnt, 'a010') or present(mnt, 'a011'):
        fail(f'the shared twins, the oldest unread pages, outlived newer ones: gone {gone}')
    if not gone:
        fail('no unread A page was evicted')
    if 50 in gone or held.read() != payload('a050'):
        fail('a page held open was evicted')
    held.close()
    # Evicted names fail cleanly, everywhere.
    name = f'a{gone[0]:03d}'
    try:
        open(os.path.join(mnt, 'm', '0', name), 'rb')
        fail(f'evicted {name} still opens')
    except FileNotFoundError:
        pass
    if name in os.listdir(os.path.join(mnt, 'm', '0')):
        fail(f'evicted {name} still listed')
    print(f'evicted {len(gone)} unread A pages, {s["evictions"]} in all')


def step_after_remount(mnt):
    """Access times survived the restart: new writes evict the unread A
    pages before the ten read in step_fill, although those ten were
    created first (without the saved times they would go first)."""
    path = os.path.join(mnt, 'm', '0', 'a030')
    if os.getxattr(path, 'user.kvfs.pinned') != b'1':
        fail('the pin did not survive a restart')
    left = [i for i in range(10, 60) if i not in (30, 10, 11) and present(mnt, f'a{i:03d}')]
    if not left:
        fail('no unread A page left to test the order with')
    for i in range(200):
        write(mnt, f'c{i:03d}')
        if any(not present(mnt, f'a{j:03d}') for j in left):
            break
    else:
        fail('200 more pages evicted none of the unread A pages')
    for i in range(10):
        if not present(mnt, f'a{i:03d}'):
            fail(f'a{i:03d} (read before the restart) evicted before unread pages: '
                 'access times were not kept')
        if not read_ok(mnt, f'a{i:03d}'):
            fail(f'a{i:03d} reads back wrong')
    if used(mnt) > CAP:
        fail(f'over capacity: {used(mnt)}')


def flood_writer(mnt, w, n, out):
    """Writer 0 uses the fast path (batches of 8 pages), the others FUSE.
    Reports its failed writes, or n if it could not run at all."""
    try:
        flood_writes(mnt, w, n, out)
    except BaseException as e:
        print(f'writer {w} died: {e!r}', file=sys.stderr)
        out.put(n)


def flood_writes(mnt, w, n, out):
    errs = 0
    if w == 0:
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                        '..', '..', 'client', 'python'))
        import kvfs
        with kvfs.Client(os.path.join(mnt, 'm')) as c:
            for i in range(0, n, 8):
                names = [f'f{w}-{j:04d}' for j in range(i, min(i + 8, n))]
                try:
                    c.write_pages([(0, nm, payload(nm)) for nm in names])
                except OSError as e:
                    errs += 1
                    print(f'writer {w}: {e}', file=sys.stderr)
        out.put(errs)
        return
    for i in range(n):
        try:
            write(mnt, f'f{w}-{i:04d}')
        except OSError as e:
            errs += 1
            print(f'writer {w}: {e}', file=sys.stderr)
    out.put(errs)


def step_flood(mnt):
    """4 writers (one through the fast path) push 3x the capacity; a
    sampler watches df and the store's own counter: neither may ever pass
    the capacity, and no write fails."""
    peak = {'df': 0, 'store': 0, 'samples': 0, 'disk': 0, 'prealloc': 0, 'files': 1}
    store = os.environ['KVFS_STORE']
    stop = threading.Event()

    def sample():
        while not stop.is_set():
            peak['df'] = max(peak['df'], used(mnt))
            disk, files = on_disk(store)
            peak['disk'] = max(peak['disk'], disk)
            peak['files'] = max(peak['files'], files)
            try:
                ssd = stats(mnt)['ssd']
                peak['store'] = max(peak['store'], ssd['physical_bytes'])
                peak['prealloc'] = max(peak['prealloc'], ssd['prealloc_bytes'])
            except (OSError, ValueError):
                pass
            peak['samples'] += 1
            time.sleep(0.01)

    t = threading.Thread(target=sample)
    t.start()
    q = multiprocessing.Queue()
    per = 3 * CAP // PAGE // 4
    ps = [multiprocessing.Process(target=flood_writer, args=(mnt, w, per, q))
          for w in range(4)]
    for p in ps:
        p.start()
    errs = sum(q.get(timeout=240) for _ in ps)
    for p in ps:
        p.join()
    stop.set()
    t.join()
    s = settled(mnt)
    print(f'flood: {4 * per} pages of {PAGE} into {CAP}: peak df {peak["df"]}, '
          f'peak store {peak["store"]} ({peak["samples"]} samples), '
          f'peak on disk {peak["disk"]} (preallocated up to {peak["prealloc"]}), '
          f'{s["evictions"]} evictions, {s["space_waits"]} waits')
    if errs:
        fail(f'{errs} writes failed in cache mode')
    lost = stats(mnt)['pages']['lost']
    if lost:
        fail(f'{lost} pages lost after close (a write took room held for another)')
    if peak['df'] > CAP or peak['store'] > CAP:
        fail(f'capacity passed: {peak}')
    # the segment files, preallocation included, stay within the budget
    # too (one 4 KiB extent-tree block per file is ext4's, not data)
    if peak['disk'] > CAP + 4096 * peak['files']:
        fail(f'the segment files took {peak["disk"]} bytes on disk, capacity {CAP}: {peak}')
    if peak['samples'] < 10:
        fail('the sampler barely ran')
    # Whatever survived is whole: every page left reads back bit-exact.
    left = [n for n in os.listdir(os.path.join(mnt, 'm', '0')) if n.startswith('f')]
    if len(left) < (CAP // PAGE) * 3 // 4:
        fail(f'only {len(left)} flood pages left in a store for {CAP // PAGE}')
    for n in left:
        try:
            ok = read_ok(mnt, n)
        except FileNotFoundError:
            continue      # the evictor, still working down to the low mark
        if not ok:
            fail(f'{n} reads back wrong')


def step_lowered(mnt):
    """Mounted with a high watermark below what the store holds: the
    evictor brings usage down without a write to set it off (it used to
    wait for the next writer, so a store left above the mark, by a lower
    -o evict_high or by writers that passed the check together, stayed
    there while idle)."""
    s = stats(mnt)['ssd']
    if s['physical_bytes'] <= s['high_watermark_bytes']:
        fail(f'the store is not above the lowered high watermark: {s}')
    for _ in range(100):
        s = stats(mnt)['ssd']
        if s['physical_bytes'] <= s['low_watermark_bytes']:
            return
        time.sleep(0.1)
    fail(f'idle above the high watermark, nothing evicted in 10 s: {s}')


def step_authoritative(mnt):
    """Authoritative mode: nothing is evicted, a full store says ENOSPC."""
    before = sorted(os.listdir(os.path.join(mnt, 'm', '0')))
    ev0 = stats(mnt)['ssd']['evictions']
    refused = 0
    for i in range(200):
        try:
            write(mnt, f'z{i:03d}')
        except OSError as e:
            if e.errno != errno.ENOSPC:
                fail(f'z{i:03d}: {e} (wanted ENOSPC)')
            refused += 1
            try:
                os.unlink(os.path.join(mnt, 'm', '0', f'z{i:03d}'))
            except FileNotFoundError:
                pass
            break
    s = stats(mnt)['ssd']
    if not refused:
        fail('authoritative mode never refused a write')
    if s['evictions'] != ev0:
        fail('authoritative mode evicted pages')
    after = set(os.listdir(os.path.join(mnt, 'm', '0')))
    if not set(before) <= after:
        fail('pages disappeared in authoritative mode')
    if s['enospc'] == 0:
        fail('ENOSPC not counted')
    if used(mnt) > CAP:
        fail(f'over capacity: {used(mnt)}')


if __name__ == '__main__':
    globals()['step_' + sys.argv[1].replace('-', '_')](sys.argv[2])
