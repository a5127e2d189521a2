"""The load the crash loop runs against a mount, and the page format that lets
any reader tell a right page from a wrong or torn one.

Every page (except the dedup pages) is  TAG '\\n' random-bytes SHA256(...):
the digest covers everything before it, and TAG is the name the page was
written for. A page named N is right when its digest holds and TAG == N or
N starts with TAG + '~' (a page renamed by the load keeps its bytes). Dedup
pages ("same*") are 8192 copies of one byte, shared by many names.

Workers are forked processes. Each appends what it did to a journal, one
line per O_APPEND write (atomic), which the driver reads after the crash:
  ack PATH SHA256   PATH's bytes were made durable (fsync or durable batch)
  unlink PATH       about to unlink PATH (it may or may not survive a crash)
  rename OLD NEW    about to rename OLD to NEW
  err T WHO ERRNO MSG   an unexpected error at monotonic time T
  bad PATH WHY      a read returned a wrong or torn page
  count WHO KEY N   work done, for the driver's totals
"""
import errno
import hashlib
import mmap
import os
import random
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), '..', 'mount'))
import kvfsabi as abi  # noqa: E402

LAYERS = {'fuse': '00', 'batch': '01', 'publish': '02'}
SIZES = [100, 4096, 65536, 200000]
DEDUP_SIZE = 8192
# What a client sees once the daemon is gone: not the load's fault.
GONE = (errno.ENOTCONN, errno.ECONNABORTED)


def make_page(tag, seed, size):
    head = tag.encode() + b'\n'
    body = head + random.Random(seed).randbytes(max(size - len(head) - 32, 0))
    return body + hashlib.sha256(body).digest()


def page_problem(name, data):
    """None if data is a right page for name, else why not."""
    if name.startswith('same'):
        if len(data) != DEDUP_SIZE or data != data[:1] * DEDUP_SIZE:
            return f'dedup page of {len(data)} bytes is not one repeated byte'
        return None
    if len(data) < 33 or hashlib.sha256(data[:-32]).digest() != data[-32:]:
        return f'{len(data)} bytes whose digest does not match (torn or foreign)'
    tag = data[:data.index(b'\n')].decode(errors='replace') if b'\n' in data else ''
    if name != tag and not name.startswith(tag + '~'):
        return f'holds the bytes of page {tag!r}'
    return None


class Journal:
    def __init__(self, path, who):
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self.who = who
        self.counts = {}

    def line(self, text):
        os.write(self.fd, (text + '\n').encode())

    def count(self, key, n=1):
        self.counts[key] = self.counts.get(key, 0) + n

    def error(self, e, what):
        self.line(f'err {time.monotonic():.6f} {self.who} {e.errno} {what}: {e}')

    def close(self):
        for k, n in self.counts.items():
            self.line(f'count {self.who} {k} {n}')
        os.close(self.fd)


def fuse_writer(mnt, cyc, j, rng, acked):
    """New pages through open/write/close, every other one fsync'ed."""
    d = f'{mnt}/m/{LAYERS["fuse"]}'
    for i in range(1, 1 << 30):
        name = f'f{cyc}-{i}'
        data = make_page(name, rng.random(), rng.choice(SIZES))
        fd = os.open(f'{d}/{name}', os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        try:
            os.write(fd, data)
            if i % 2:
                os.fsync(fd)
                j.line(f'ack m/{LAYERS["fuse"]}/{name} {hashlib.sha256(data).hexdigest()}')
                j.count('fsynced')
        finally:
            os.close(fd)
        j.count('written')


def batch_writer(mnt, cyc, j, rng, acked):
    """Batches of 1..8 pages through KVFS_IOC_WRITE, every other one durable."""
    mb = 1 << 20
    dfd = os.open(f'{mnt}/m', os.O_RDONLY | os.O_DIRECTORY)
    mfd = abi.memfd(8 * mb)
    mem = mmap.mmap(mfd, 8 * mb)
    rid, _ = abi.register(dfd, mfd)
    layer = int(LAYERS['batch'])
    for b in range(1, 1 << 30):
        ds, datas, off = [], [], 2 * mb
        for k in range(rng.randint(1, 8)):
            name = f'b{cyc}-{b}-{k}'
            data = make_page(name, rng.random(), rng.choice(SIZES))
            mem[off:off + len(data)] = data
            ds.append(abi.Desc(layer, name.encode(), dst_off=off, dst_len=len(data)))
            datas.append(data)
            off += (len(data) + 4095) // 4096 * 4096
        durable = b % 2 == 1
        abi.place(mem, ds, 0, mb)
        abi.batch(dfd, abi.WRITE, rid, 0, len(ds),
                  flags=abi.WRITE_DURABLE if durable else 0)
        abi.collect(mem, ds, 0)
        for d, data in zip(ds, datas):
            if d.status != 0:
                j.line(f'err {time.monotonic():.6f} batch {-d.status} '
                       f'descriptor {d.name.decode()} status {d.status}')
                continue
            j.count('written')
            if durable:
                j.line(f'ack m/{LAYERS["batch"]}/{d.name.decode()} '
                       f'{hashlib.sha256(data).hexdigest()}')
                j.count('durable')


def publisher(mnt, cyc, j, rng, acked):
    """tmp + rename over five published names, and dedup pages that come and
    go so that refcounts change in every commit."""
    d = f'{mnt}/m/{LAYERS["publish"]}'
    for i in range(1, 1 << 30):
        pub = f'pub{i % 5}'
        tmp = f'{pub}~tmp{cyc}-{i}'
        with open(f'{d}/{tmp}', 'wb') as f:
            f.write(make_page(pub, rng.random(), rng.choice(SIZES[:3])))
        # The evictor may take any durable page, ours included: a name
        # that vanished under us is a cache miss, not an error.
        try:
            os.rename(f'{d}/{tmp}', f'{d}/{pub}')
            j.count('published')
        except FileNotFoundError:
            j.count('vanished')
        with open(f'{d}/same{cyc}-{i}', 'wb') as f:
            f.write(bytes([i % 3]) * DEDUP_SIZE)
        if i > 4:
            try:
                os.unlink(f'{d}/same{cyc}-{i - 4}')
            except FileNotFoundError:
                j.count('vanished')


def reader(mnt, cyc, j, rng, acked):
    """Read random visible pages; every read that succeeds must be right."""
    while True:
        layer = rng.choice(list(LAYERS.values()))
        names = os.listdir(f'{mnt}/m/{layer}')
        for name in rng.sample(names, min(len(names), 20)):
            try:
                with open(f'{mnt}/m/{layer}/{name}', 'rb') as f:
                    data = f.read()
            except OSError as e:
                if e.errno in (errno.ENOENT, errno.EBUSY):  # gone, or still being written
                    continue
                raise
            why = page_problem(name, data)
            if why:
                j.line(f'bad m/{layer}/{name} {why}')
            j.count('reads')


def janitor(mnt, cyc, j, rng, acked):
    """Rename and unlink pages of earlier cycles, acknowledged ones included:
    a durable page renamed must survive under exactly one of its names."""
    old = [p for p in acked if not p.startswith(f'm/{LAYERS["publish"]}')]
    rng.shuffle(old)
    for path in old[:40]:
        if rng.random() < 0.5:
            new = path + '~mv' if '~' not in path else path.split('~')[0]
            j.line(f'rename {path} {new}')
            try:
                os.rename(f'{mnt}/{path}', f'{mnt}/{new}')
                j.count('renamed')
            except FileNotFoundError:
                pass        # evicted meanwhile
        else:
            j.line(f'unlink {path}')
            try:
                os.unlink(f'{mnt}/{path}')
                j.count('unlinked')
            except FileNotFoundError:
                pass
        time.sleep(0.005)
    while True:             # then plain reads of what is left until the crash
        reader(mnt, cyc, j, rng, acked)


WORKERS = {'fuse': fuse_writer, 'batch': batch_writer, 'publish': publisher,
           'reader': reader, 'janitor': janitor}


def run_worker(who, mnt, cyc, journal, seed, acked):
    """Body of a forked worker: run until the daemon dies, then report."""
    j = Journal(journal, who)
    rng = random.Random(seed)
    try:
        WORKERS[who](mnt, cyc, j, rng, acked)
    except OSError as e:
        if e.errno not in GONE:
            j.error(e, who)
    except Exception as e:  # noqa: BLE001 (any bug in the load is reported)
        j.line(f'err {time.monotonic():.6f} {who} 0 {type(e).__name__}: {e}')
    j.close()


def spawn(who, mnt, cyc, journal, seed, acked):
    pid = os.fork()
    if pid == 0:
        try:
            run_worker(who, mnt, cyc, journal, seed, acked)
        finally:
            os._exit(0)
    return pid

