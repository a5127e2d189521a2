"""Stress through a real mount (driven by stress.sh).

  stress.py run MNT DPID LOG OUT SECONDS   many client processes for SECONDS,
                                           then the end-of-run invariants;
                                           writes OUT/snapshot.json
  stress.py verify MNT OUT                 after a remount: every page reads
                                           back correctly and the namespace is
                                           exactly the snapshot

Every page is self-verifying, whatever its name: a 32-byte header (magic,
flags, seed, total length), a body derived from the seed alone and a
16-byte BLAKE2b of header and body at the end. A reader can tell a
complete, correct page from a wrong, torn or truncated one at any moment;
a rename moves a seed to another name, never changes it.

Workers (one process each) in model "s":
  layers 0-3 (churn): FUSE writers (direct names; tmp name + rename
    publishing), a fast-path batch writer (some batches durable, some
    replacing existing pages), FUSE readers, fast-path batch readers (and
    prefetch), an unlinker, a renamer (within a layer, over existing pages
    and to new names), a walker (scandir + stat, ls -lR, xattrs, and as
    root `kvfs gc --target-size` now and then: eviction by hand).
  layer 5: an fsync writer; nobody else touches it, so each page it wrote
    is there at the end with its seed, or was evicted (debug log).
  layers 10+k: holder k. It writes a page (fsync: durable, so evictable),
    opens it twice, reads one descriptor, then has ANOTHER process unlink
    it or rename another page over it, or leaves it (then it must stay
    listed: a page held open is never evicted), and keeps re-reading it
    (page cache dropped first, so the daemon serves it) for a few seconds
    while the others push the store past its capacity; the second
    descriptor is read for the first time only at the end. Every read must
    give the page's bytes.

The main process samples the daemon's VmRSS/VmHWM all along.
"""
import errno
import json
import multiprocessing
import os
import random
import re
import subprocess
import sys
import threading
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from stresspage import (  # noqa: E402
    FLAG_TWIN, MODEL, CHURN, FSYNC_LAYER, HOLD_BASE,
    N_HOLDERS, SIZES, MAXPAGE, ALLOWED_READ, die, make_page, check_page,
    layer_dir, names_of, read_fuse, read_fd, write_fuse, kvfs_module)

# ---- workers ----

class Worker:
    def __init__(self, kind, wid, mnt, deadline, log):
        self.kind, self.wid, self.mnt, self.deadline, self.log = kind, wid, mnt, deadline, log
        self.counts = {}
        self.failures = []
        self.seeds = []          # seeds of pages this worker stored
        self.fsynced = []        # (layer, name, seed) that must stay or be evicted
        self.twins = []          # seeds stored under two names on purpose
        self.rng = random.Random(wid * 7919 + os.getpid())
        self.nseq = 0

    def count(self, what, n=1):
        self.counts[what] = self.counts.get(what, 0) + n

    def bad(self, msg):
        self.count('FAILURES')
        if len(self.failures) < 20:
            self.failures.append(f'{self.kind}{self.wid}: {msg}')

    def running(self):
        return time.monotonic() < self.deadline

    def new_seed(self):
        self.nseq += 1
        return (self.wid << 40) | self.nseq

    def new_name(self, prefix='p'):
        return f'{prefix}{self.wid}-{self.nseq}'

    def new_page(self, flags=0):
        seed = self.new_seed()
        return seed, make_page(seed, self.rng.choice(SIZES), self.wid, flags)

    def verify(self, what, data, want=None):
        seed, why = check_page(data)
        if why:
            self.bad(f'{what}: wrong bytes: {why}')
            return None
        if want is not None and seed != want:
            self.bad(f'{what}: seed {seed:#x}, expected {want:#x}')
            return None
        return seed

    def read_one(self, layer, name, ok='reads'):
        path = os.path.join(layer_dir(self.mnt, layer), name)
        try:
            data = read_fuse(path, drop=self.rng.random() < 0.7)
        except OSError as e:
            if e.errno in ALLOWED_READ:
                self.count(f'read_{errno.errorcode[e.errno]}')
                return
            self.bad(f'read {layer}/{name}: {e}')
            return
        except AssertionError as e:
            self.bad(f'read {layer}/{name}: {e}')
            return
        if self.verify(f'read {layer}/{name}', data) is not None:
            self.count(ok)

    # FUSE writers: direct names, or tmp + rename (publish); with fsync or not.
    def fuse_writer(self, fsync=False):
        while self.running():
            layer = self.rng.choice(CHURN)
            twin = not fsync and self.rng.random() < 0.05
            seed, data = self.new_page(FLAG_TWIN if twin else 0)
            publish = self.rng.random() < 0.4
            name = self.new_name()
            d = layer_dir(self.mnt, layer)
            target = os.path.join(d, name)
            path = os.path.join(d, '.t' + name) if publish else target
            try:
                write_fuse(path, data, fsync)
                if publish:
                    os.rename(path, target)
                    self.count('published')
                self.count('writes_fsync' if fsync else 'writes')
                self.seeds.append(seed)
                if twin:          # identical bytes under a second name
                    write_fuse(target + 'b', data)
                    self.twins.append(seed)
                    self.count('twins')
            except OSError as e:
                if publish and e.errno == errno.ENOENT:
                    self.count('publish_lost_tmp')   # tmp evicted before the rename
                else:
                    self.bad(f'write {layer}/{name}: {e}')

    def fuse_writer_fsync(self):
        """Only writer of its layer: each page it fsync'ed stays, or is
        evicted (logged). Every tenth write also fsyncs the directory."""
        d = layer_dir(self.mnt, FSYNC_LAYER)
        while self.running():
            seed, data = self.new_page()
            name = self.new_name('d')
            try:
                write_fuse(os.path.join(d, name), data, fsync=True)
                self.seeds.append(seed)
                self.fsynced.append((FSYNC_LAYER, name, seed))
                self.count('writes_fsync')
                if self.nseq % 10 == 0:
                    dfd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
                    os.fsync(dfd)
                    os.close(dfd)
                    self.count('dir_fsyncs')
            except OSError as e:
                self.bad(f'fsync write {name}: {e}')
            # and read back one of its own, maybe evicted meanwhile
            if self.fsynced:
                _, n, s = self.rng.choice(self.fsynced)
                try:
                    self.verify(f'read-back {n}', read_fuse(os.path.join(d, n)), s)
                    self.count('reads')
                except FileNotFoundError:
                    self.count('read_ENOENT')
                except OSError as e:
                    self.bad(f'read-back {n}: {e}')

    def fast_writer(self):
        kvfs = kvfs_module()
        with kvfs.Client(os.path.join(self.mnt, MODEL)) as c:
            while self.running():
                replace = self.rng.random() < 0.25
                pages, seeds = [], []
                for _ in range(self.rng.randint(1, 8)):
                    layer = self.rng.choice(CHURN)
                    name = None
                    if replace:
                        existing = names_of(self.mnt, layer)
                        name = self.rng.choice(existing) if existing else None
                    seed, data = self.new_page()
                    if name is None or any(name == p[1] for p in pages):
                        name = self.new_name('f')
                    pages.append((layer, name, data))
                    seeds.append(seed)
                durable = self.rng.random() < 0.3
                try:
                    c.write_pages(pages, durable=durable, replace=replace)
                    st = [0] * len(pages)
                except kvfs.PageError as e:
                    st = list(e.statuses)
                except OSError as e:
                    self.bad(f'batch write: {e}')
                    continue
                self.count('batches_written')
                for (layer, name, _), seed, s in zip(pages, seeds, st):
                    if s == 0:
                        self.seeds.append(seed)
                        self.count('pages_written_replace' if replace else 'pages_written')
                    elif replace and -s in (errno.ENOENT, errno.EBUSY):
                        # the page to replace went, or is still being
                        # written through FUSE (abi.md)
                        self.count(f'write_{errno.errorcode[-s]}')
                    else:
                        self.bad(f'fast write {layer}/{name}: {errno.errorcode.get(-s, s)}')

    def fast_reader(self):
        kvfs = kvfs_module()
        stride = MAXPAGE
        nmax = 16
        with kvfs.Client(os.path.join(self.mnt, MODEL)) as c:
            ctl = nmax * stride
            r = c.region(ctl + kvfs.Batch.ctl_bytes(nmax) + 4096)
            while self.running():
                layer = self.rng.choice(CHURN)
                names = names_of(self.mnt, layer)
                if not names:
                    time.sleep(0.01)
                    continue
                names = self.rng.sample(names, min(nmax, len(names)))
                if self.rng.random() < 0.2:
                    c.prefetch_layer(layer, names)
                    self.count('prefetches')
                with r.batch(ctl, len(names)) as b:
                    for i, n in enumerate(names):
                        b.add(layer, n, i * stride, stride)
                    try:
                        b.read()
                    except OSError as e:
                        self.bad(f'batch read: {e}')
                        continue
                    self.count('batches_read')
                    for i, n in enumerate(names):
                        s, nbytes = b.status(i)
                        if s == 0:
                            if self.verify(f'fast read {layer}/{n}',
                                           r.buffer(i * stride, nbytes)) is not None:
                                self.count('pages_read')
                        elif -s in ALLOWED_READ:
                            self.count(f'read_{errno.errorcode[-s]}')
                        else:
                            self.bad(f'fast read {layer}/{n}: {errno.errorcode.get(-s, s)}')
            r.close()

    def fuse_reader(self):
        while self.running():
            layer = self.rng.choice(CHURN)
            names = names_of(self.mnt, layer)
            if not names:
                time.sleep(0.01)
                continue
            for n in self.rng.sample(names, min(8, len(names))):
                self.read_one(layer, n)

    def unlinker(self):
        while self.running():
            layer = self.rng.choice(CHURN)
            names = names_of(self.mnt, layer)
            if len(names) < 20:          # leave something to read
                time.sleep(0.05)
                continue
            for n in self.rng.sample(names, min(4, len(names))):
                try:
                    os.unlink(os.path.join(layer_dir(self.mnt, layer), n))
                    self.count('unlinks')
                except FileNotFoundError:
                    self.count('unlink_ENOENT')
                except OSError as e:
                    self.bad(f'unlink {layer}/{n}: {e}')
            time.sleep(0.02)

    def renamer(self):
        while self.running():
            layer = self.rng.choice(CHURN)
            names = names_of(self.mnt, layer)
            if len(names) < 2:
                time.sleep(0.02)
                continue
            a, b = self.rng.sample(names, 2)
            over = self.rng.random() < 0.6
            if not over:
                self.nseq += 1
                b = self.new_name('r')
            d = layer_dir(self.mnt, layer)
            try:
                os.rename(os.path.join(d, a), os.path.join(d, b))
                self.count('renames_over' if over else 'renames')
            except FileNotFoundError:
                self.count('rename_ENOENT')
            except OSError as e:
                if e.errno == errno.EBUSY:    # a page still being written
                    self.count('rename_EBUSY')
                else:
                    self.bad(f'rename {layer}/{a} -> {b}: {e}')
            time.sleep(0.01)

    def walker(self):
        k = 0
        while self.running():
            k += 1
            for layer in CHURN + [FSYNC_LAYER] + [HOLD_BASE + h for h in range(N_HOLDERS)]:
                d = layer_dir(self.mnt, layer)
                try:
                    with os.scandir(d) as it:
                        for e in it:
                            try:
                                st = e.stat(follow_symlinks=False)
                                self.count('stats')
                                if st.st_size > MAXPAGE + 1:
                                    self.bad(f'{layer}/{e.name}: size {st.st_size}')
                            except FileNotFoundError:
                                self.count('stat_ENOENT')
                except OSError as e:
                    self.bad(f'scandir {d}: {e}')
            if k % 5 == 0:
                p = subprocess.run(['ls', '-lR', os.path.join(self.mnt, MODEL)],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
                errs = [ln for ln in p.stderr.splitlines() if 'No such file' not in ln]
                if errs:
                    self.bad(f'ls -lR: {errs[:3]}')
                self.count('ls_runs')
            if k % 40 == 0 and os.geteuid() == 0:
                # eviction by hand too (root only), racing the evictor
                p = subprocess.run([os.environ['KVFS'], 'gc', self.mnt, '--target-size', '20M'],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
                if p.returncode:
                    self.bad(f'kvfs gc: exit {p.returncode}: {p.stderr.strip()}')
                self.count('gc_runs')
            if k % 3 == 0:
                names = names_of(self.mnt, CHURN[k % 4])
                if names:
                    p = os.path.join(layer_dir(self.mnt, CHURN[k % 4]), self.rng.choice(names))
                    try:
                        os.getxattr(p, 'user.kvfs.state')
                        self.count('xattrs')
                    except (FileNotFoundError, OSError) as e:
                        if getattr(e, 'errno', None) not in (errno.ENOENT, errno.ENODATA):
                            self.bad(f'getxattr {p}: {e}')
            time.sleep(0.05)

    def holder(self):
        k = self.wid - 100
        d = layer_dir(self.mnt, HOLD_BASE + k)
        held = []    # dicts: name, seed, fd1, fd2, fate, until
        fates = ['keep', 'unlink', 'rename_over']
        cycle = 0

        def other_process(fn):
            """Run fn in a child process (the unlinker is not the holder)."""
            pid = os.fork()
            if pid == 0:
                try:
                    fn()
                    os._exit(0)
                except BaseException as e:
                    print(f'holder child: {e!r}', file=sys.stderr)
                    os._exit(1)
            _, status = os.waitpid(pid, 0)
            return os.waitstatus_to_exitcode(status) == 0

        def reread(h, what):
            try:
                self.verify(f'held {h["fate"]} {h["name"]} {what}', read_fd(h['fd1']), h['seed'])
                self.count(f'held_reads_{h["fate"]}')
            except (OSError, AssertionError) as e:
                self.bad(f'held {h["fate"]} page {h["name"]} {what}: {e!r}')

        while self.running() or held:
            now = time.monotonic()
            if self.running() and len(held) < 6:
                seed, data = self.new_page()
                name = self.new_name('h')
                path = os.path.join(d, name)
                try:
                    write_fuse(path, data, fsync=True)
                    self.seeds.append(seed)
                    fd1 = os.open(path, os.O_RDONLY)
                    fd2 = os.open(path, os.O_RDONLY)
                except FileNotFoundError:
                    self.count('evicted_before_open')   # possible, not a failure
                    continue
                except OSError as e:
                    self.bad(f'holder write/open {name}: {e}')
                    continue
                cycle += 1
                h = dict(name=name, seed=seed, fd1=fd1, fd2=fd2, fate=fates[cycle % 3],
                         until=now + self.rng.uniform(1.5, 4.0))
                reread(h, 'first read')
                if h['fate'] == 'unlink':
                    if not other_process(lambda: os.unlink(path)):
                        self.bad(f'unlink of held {name} by another process failed')
                elif h['fate'] == 'rename_over':
                    s2, d2 = self.new_page()
                    n2 = self.new_name('h')
                    try:
                        write_fuse(os.path.join(d, n2), d2)
                        self.seeds.append(s2)
                        h['replacement'] = s2
                    except OSError as e:
                        self.bad(f'holder write {n2}: {e}')
                    if not other_process(lambda: os.rename(os.path.join(d, n2), path)):
                        self.bad(f'rename over held {name} by another process failed')
                held.append(h)
            listing = set(names_of(self.mnt, HOLD_BASE + k))
            for h in list(held):
                reread(h, 'again')
                if h['fate'] == 'keep':
                    self.count('held_presence_checks')
                    if h['name'] not in listing:
                        self.bad(f'page {h["name"]} held open disappeared (evicted?)')
                elif h['fate'] == 'unlink' and h['name'] in listing:
                    self.bad(f'unlinked page {h["name"]} still listed')
                if now >= h['until'] or not self.running():
                    # the second descriptor is read only now: after the
                    # unlink or rename and the evictions since
                    try:
                        self.verify(f'held {h["fate"]} {h["name"]} late read',
                                    read_fd(h['fd2']), h['seed'])
                        self.count(f'held_late_reads_{h["fate"]}')
                    except (OSError, AssertionError) as e:
                        self.bad(f'held {h["fate"]} {h["name"]} late read: {e!r}')
                    os.close(h['fd1'])
                    os.close(h['fd2'])
                    if h['fate'] == 'rename_over' and 'replacement' in h:
                        try:
                            self.verify(f'replacement {h["name"]}',
                                        read_fuse(os.path.join(d, h['name'])), h['replacement'])
                        except FileNotFoundError:
                            self.count('replacement_evicted')
                        except OSError as e:
                            self.bad(f'replacement {h["name"]}: {e}')
                    held.remove(h)
                    self.count(f'held_{h["fate"]}')
            time.sleep(0.1)


WORKERS = [   # (kind, method, how many)
    ('fuse_writer', lambda w: w.fuse_writer(), 2),
    ('fsync_writer', lambda w: w.fuse_writer_fsync(), 1),
    ('fast_writer', lambda w: w.fast_writer(), 1),
    ('fuse_reader', lambda w: w.fuse_reader(), 2),
    ('fast_reader', lambda w: w.fast_reader(), 2),
    ('unlinker', lambda w: w.unlinker(), 1),
    ('renamer', lambda w: w.renamer(), 1),
    ('walker', lambda w: w.walker(), 1),
    ('holder', lambda w: w.holder(), N_HOLDERS),
]
# what each kind must have done at least once
MUST = {
    'fuse_writer': ['writes', 'published', 'twins'],
    'fsync_writer': ['writes_fsync', 'dir_fsyncs', 'reads'],
    'fast_writer': ['batches_written', 'pages_written', 'pages_written_replace'],
    'fuse_reader': ['reads'],
    'fast_reader': ['batches_read', 'pages_read', 'prefetches'],
    'unlinker': ['unlinks'],
    'renamer': ['renames', 'renames_over'],
    'walker': ['stats', 'ls_runs'] + (['gc_runs'] if os.geteuid() == 0 else []),
    'holder': ['held_reads_keep', 'held_reads_unlink', 'held_reads_rename_over',
               'held_late_reads_unlink', 'held_late_reads_rename_over',
               'held_late_reads_keep', 'held_presence_checks'],
}


def worker_main(kind, fn, wid, mnt, deadline, log, q):
    w = Worker(kind, wid, mnt, deadline, log)
    try:
        fn(w)
    except BaseException:
        w.bad('died: ' + traceback.format_exc().replace('\n', ' | '))
    q.put(dict(kind=kind, wid=wid, counts=w.counts, failures=w.failures,
               seeds=w.seeds, fsynced=w.fsynced, twins=w.twins))


# ---- daemon memory ----

def proc_status(pid):
    out = {}
    with open(f'/proc/{pid}/status') as f:
        for ln in f:
            k, _, v = ln.partition(':')
            if k in ('VmRSS', 'VmHWM', 'RssAnon', 'RssFile', 'RssShmem'):
                out[k] = int(v.split()[0]) * 1024
    return out


class Sampler(threading.Thread):
    def __init__(self, pid):
        super().__init__(daemon=True)
        self.pid, self.stop, self.samples = pid, threading.Event(), []

    def run(self):
        while not self.stop.is_set():
            try:
                self.samples.append((time.monotonic(), proc_status(self.pid)))
            except OSError:
                return
            self.stop.wait(0.1)

    def peak(self, key):
        return max((s[key] for _, s in self.samples), default=0)


# ---- checks of the whole store ----

def stats(mnt):
    with open(os.path.join(mnt, '.kvfs', 'stats')) as f:
        return json.load(f)


def settle(mnt):
    """Wait for the evictor to finish: usage below the high watermark and
    the eviction counter still for half a second."""
    last, still = None, 0
    for _ in range(400):
        s = stats(mnt)['ssd']
        below = s['physical_bytes'] + s['reserved_bytes'] <= s['high_watermark_bytes']
        still = still + 1 if (below and s['evictions'] == last) else 0
        if still >= 5:
            return s
        last = s['evictions']
        time.sleep(0.1)
    die(f'the evictor never settled: {s}')


def all_layers(mnt):
    return sorted(int(x) for x in os.listdir(os.path.join(mnt, MODEL)))


def scan(mnt, fast=True):
    """{layer/name: seed} of every page, each read through FUSE (from the
    daemon, not the page cache) and through the fast path."""
    snap, bad = {}, []
    for layer in all_layers(mnt):
        names = names_of(mnt, layer, tmp=True)
        for n in names:
            key = f'{layer:02d}/{n}'
            try:
                seed, why = check_page(read_fuse(os.path.join(layer_dir(mnt, layer), n)))
            except (OSError, AssertionError) as e:
                seed, why = None, repr(e)
            if why:
                bad.append(f'{key}: {why}')
            else:
                snap[key] = seed
        if fast and names:
            kvfs = kvfs_module()
            with kvfs.Client(os.path.join(mnt, MODEL)) as c:
                for i in range(0, len(names), 32):
                    part = names[i:i + 32]
                    r = c.region(len(part) * MAXPAGE + kvfs.Batch.ctl_bytes(len(part)))
                    with r.batch(len(part) * MAXPAGE, len(part)) as b:
                        for j, n in enumerate(part):
                            b.add(layer, n, j * MAXPAGE, MAXPAGE)
                        b.read()
                        for j, n in enumerate(part):
                            s, nb = b.status(j)
                            key = f'{layer:02d}/{n}'
                            if s:
                                bad.append(f'{key}: fast read {errno.errorcode.get(-s, s)}')
                                continue
                            seed, why = check_page(r.buffer(j * MAXPAGE, nb))
                            if why or seed != snap.get(key):
                                bad.append(f'{key}: fast read: {why or "other seed than FUSE"}')
                    r.close()
    return snap, bad


def evicted_names(log):
    with open(log, errors='replace') as f:
        names = re.findall(r'evicted page (\S+) \(inode', f.read())
    return set(names)     # a name can go twice: a replacing batch write recreates it


def step_run(mnt, dpid, log, out, seconds):
    seconds = float(seconds)
    dpid = int(dpid)
    for layer in CHURN + [FSYNC_LAYER] + [HOLD_BASE + h for h in range(N_HOLDERS)]:
        os.makedirs(layer_dir(mnt, layer), exist_ok=True)
    sampler = Sampler(dpid)
    base = proc_status(dpid)
    sampler.start()
    q = multiprocessing.Queue()
    deadline = time.monotonic() + seconds
    procs, wid = [], 0
    for kind, fn, n in WORKERS:
        for i in range(n):
            w = 100 + i if kind == 'holder' else (wid := wid + 1)
            procs.append(multiprocessing.Process(target=worker_main,
                                                 args=(kind, fn, w, mnt, deadline, log, q)))
    for p in procs:
        p.start()
    results = []
    try:
        for _ in procs:
            results.append(q.get(timeout=seconds + 90))
    except Exception:
        alive = [p.pid for p in procs if p.is_alive()]
        for p in procs:
            if p.is_alive():
                p.kill()
        die(f'workers hung (pids {alive} still running {seconds + 90:.0f} s after the start)')
    for p in procs:
        p.join(30)
        if p.exitcode != 0:
            die(f'a worker process exited with {p.exitcode}')
    run_time = seconds
    s_end = stats(mnt)

    # -- counts and failures --
    failures = []
    print(f'{"worker":<16} counts')
    for r in sorted(results, key=lambda r: (r['kind'], r['wid'])):
        print(f'{r["kind"] + str(r["wid"]):<16} ' +
              ' '.join(f'{k}={v}' for k, v in sorted(r['counts'].items())))
        failures += r['failures']
        for k in MUST[r['kind']]:
            if not r['counts'].get(k):
                failures.append(f'{r["kind"]}{r["wid"]} did no {k} in {run_time:.0f} s')
    if failures:
        die('\n  '.join(['worker failures:'] + failures))

    # -- the store at rest --
    ssd = settle(mnt)
    sampler.stop.set()
    sampler.join()
    snap, bad = scan(mnt)
    if bad:
        die('\n  '.join(['pages that do not read back correctly:'] + bad[:20]))
    written, twins = set(), set()
    for r in results:
        written.update(r['seeds'])
        twins.update(r['twins'])
    seen = {}
    for key, seed in snap.items():
        if seed not in written:
            die(f'{key} holds seed {seed:#x}, which no writer stored')
        seen.setdefault(seed, []).append(key)
    # a seed is under two names only as a deliberate twin (dedup; renames
    # may have moved either name)
    dup = {s: k for s, k in seen.items() if len(k) > 1}
    for s, keys in dup.items():
        if len(keys) > 2 or s not in twins:
            die(f'seed {s:#x} under several names: {keys}')
    gone = evicted_names(log)
    lost = []
    for r in results:
        for layer, name, seed in r['fsynced']:
            key = f'{layer:02d}/{name}'
            if snap.get(key) != seed and name not in gone:
                lost.append(f'{key} (seed {seed:#x}): now {snap.get(key)}')
    if lost:
        die('\n  '.join(['fsync\'ed pages neither there nor evicted:'] + lost[:20]))
    nfs = sum(len(r['fsynced']) for r in results)
    if ssd['evictions'] == 0 or not gone:
        die(f'no eviction during the run: {ssd}')
    if ssd['physical_bytes'] > ssd['capacity_bytes']:
        die(f'over capacity: {ssd}')

    # -- daemon memory --
    peak_rss, hwm = sampler.peak('VmRSS'), sampler.peak('VmHWM')
    limit = int(os.environ['KVFS_STRESS_RSS_LIMIT'])
    mib = 1 << 20
    print(f'daemon memory: start VmRSS {base["VmRSS"] / mib:.1f} MiB; during the run '
          f'peak VmRSS {peak_rss / mib:.1f} MiB (RssAnon {sampler.peak("RssAnon") / mib:.1f}, '
          f'RssShmem {sampler.peak("RssShmem") / mib:.1f}), VmHWM {hwm / mib:.1f} MiB, '
          f'{len(sampler.samples)} samples; limit {limit / mib:.0f} MiB')
    t0 = sampler.samples[0][0] if sampler.samples else 0
    parts = [max((st['VmRSS'] for t, st in sampler.samples
                  if q * seconds / 8 <= t - t0 < (q + 1) * seconds / 8), default=0)
             for q in range(8)]
    print('daemon VmRSS peak per eighth of the run: ' +
          ', '.join(f'{x / mib:.1f}' for x in parts) + ' MiB')
    if len(sampler.samples) < seconds * 3:
        die(f'only {len(sampler.samples)} memory samples in {seconds} s')
    if max(peak_rss, hwm) > limit:
        die(f'daemon memory unbounded: peak VmRSS {peak_rss}, VmHWM {hwm} > {limit} bytes')
    # Long runs: after the warm-up (RAM tier, write-back budget and malloc
    # arenas filled in the first tens of seconds) the RSS stays flat.
    if seconds >= 120 and max(parts[6:]) > max(parts[2:4]) + 32 * mib:
        die(f'daemon memory keeps growing: {[round(x / mib) for x in parts]} MiB')

    print(f'at rest: {len(snap)} pages read back correctly (FUSE and fast path), '
          f'{len(written)} seeds written, {nfs} fsync\'ed pages checked, '
          f'{ssd["evictions"]} evictions ({len(gone)} logged), '
          f'{ssd["space_waits"]} space waits, {ssd["enospc"]} refusals retried, '
          f'{len(dup)} twins, physical {ssd["physical_bytes"]} of {ssd["capacity_bytes"]}, '
          f'ram tier {json.dumps(s_end.get("ram", {}))[:200]}')
    with open(os.path.join(out, 'snapshot.json'), 'w') as f:
        json.dump(snap, f)


def step_verify(mnt, out):
    with open(os.path.join(out, 'snapshot.json')) as f:
        want = json.load(f)
    snap, bad = scan(mnt)
    if bad:
        die('\n  '.join(['after remount, pages that do not read back correctly:'] + bad[:20]))
    if snap != want:
        miss = sorted(set(want) - set(snap))[:10]
        extra = sorted(set(snap) - set(want))[:10]
        other = sorted(k for k in set(want) & set(snap) if want[k] != snap[k])[:10]
        die(f'after remount the namespace differs: missing {miss}, new {extra}, changed {other}')
    print(f'after remount: the same {len(snap)} pages, all correct')


if __name__ == '__main__':
    multiprocessing.set_start_method('fork')
    globals()['step_' + sys.argv[1]](*sys.argv[2:])
