"""What the engine backends share: page names from engine keys, model
directory names and set-up, a rate-limited log, and PageStore, the pages of
one model directory moved to and from engine memory (docs/engine.md).

Imports no engine: each backend module imports its own.
"""

import collections
import ctypes
import errno
import hashlib
import logging
import os
import queue
import threading
import time

import numpy as np

import kvfs

logger = logging.getLogger("kvfs_engines")

NAME_MAX = kvfs.NAME_MAX
ALIGN = 4096

DTYPES = {"bfloat16": "bf16", "float16": "f16", "float32": "f32", "float64": "f64",
          "float8_e4m3fn": "fp8_e4m3", "float8_e5m2": "fp8_e5m2", "int8": "i8",
          "uint8": "u8", "half": "f16", "float": "f32", "fp8": "fp8", "auto": "auto"}


def round_up(n, a):
    return (n + a - 1) // a * a


def page_name(key):
    """The kvfs page name of an engine key (str or bytes): the key itself
    when it is a valid name, else with '/', '%' and NUL (and a leading '.')
    escaped as %XX; a name that would be longer than 255 bytes becomes '%H'
    + the key's SHA-256 (no escaped name can start with '%H', so the two
    forms never collide)."""
    raw = key if isinstance(key, bytes) else str(key).encode("utf-8", "surrogateescape")
    if (0 < len(raw) <= NAME_MAX and b"/" not in raw and b"%" not in raw
            and b"\0" not in raw and not raw.startswith(b".")):
        return raw
    out = bytearray()
    for i, b in enumerate(raw):
        if b in (0x2F, 0x25, 0x00) or (i == 0 and b == 0x2E):
            out += b"%%%02X" % b
        else:
            out.append(b)
    if not out or len(out) > NAME_MAX:
        return b"%H" + hashlib.sha256(raw).hexdigest().encode()
    return bytes(out)


def dtype_tag(dtype):
    """Short dtype name for a model directory: torch.bfloat16 -> bf16."""
    dt = str(dtype).replace("torch.", "")
    return DTYPES.get(dt, dt)


def dir_name(parts):
    """A model directory name from its parts, joined by dots and escaped."""
    return page_name(".".join(str(p) for p in parts)).decode("utf-8", "surrogateescape")


def mmap_base(mm):
    """Address of a Python mmap's first byte (the export is dropped at once,
    so the mmap can still be closed by its owner)."""
    c = ctypes.c_char.from_buffer(mm)
    try:
        return ctypes.addressof(c)
    finally:
        del c


class RateLog:
    """At most `burst` lines per `period` seconds for each kind of failure:
    a dead daemon must not flood the engine's log once per page."""

    def __init__(self, log=logger, burst=10, period=60.0):
        self.logger, self.burst, self.period = log, burst, period
        self.lock = threading.Lock()
        self.state = {}

    def __call__(self, kind, level, fmt, *args):
        now = time.monotonic()
        with self.lock:
            start, n, dropped = self.state.get(kind, (now, 0, 0))
            if now - start > self.period:
                if dropped:
                    self.logger.log(level, "kvfs: %d more '%s' messages suppressed",
                                    dropped, kind)
                start, n, dropped = now, 0, 0
            if n >= self.burst:
                self.state[kind] = (start, n, dropped + 1)
                return
            self.state[kind] = (start, n + 1, dropped)
        self.logger.log(level, "kvfs: " + fmt, *args)


class Counters:
    """Thread-safe counters a backend reports through stats()."""

    def __init__(self):
        self.lock = threading.Lock()
        self.c = collections.Counter()

    def add(self, **kw):
        with self.lock:
            self.c.update(kw)

    def snapshot(self):
        with self.lock:
            return dict(self.c)


def make_model_dir(path, pieces, page_bytes, who):
    """mkdir + geometry xattr + layer directories, as `kvfs model create`
    does, tolerant of another rank or process doing the same at once.

    page_bytes fixes the size of every page (kvfs geometry has no
    page_bytes field: u8 x 1 token x 1 head x page_bytes/2, K and V, is
    exactly page_bytes), so a page of another size is refused (EINVAL)
    instead of poisoning the cache; None leaves the directory without
    geometry (pages of any size up to the daemon's -o max_page)."""
    geometry = None
    if page_bytes is not None:
        if page_bytes % 2:
            raise ValueError("%s: a page of %d bytes (odd) has no kvfs geometry"
                             % (who, page_bytes))
        geometry = "layers=%d kv_heads=1 head_dim=%d dtype=u8 page_tokens=1" % (
            pieces, page_bytes // 2)
    created = False
    try:
        os.mkdir(path, 0o755)
        created = True
    except FileExistsError:
        pass
    if created and geometry:
        try:
            os.setxattr(path, "user.kvfs.geometry", geometry.encode())
        except OSError as e:
            raise OSError(e.errno, "%s: geometry %r refused for %s (not a kvfs mount, or "
                          "pages too large for its segments; see the daemon log)"
                          % (who, geometry, path)) from e
    elif geometry:
        have = None
        for _ in range(50):      # another rank may have created it just now
            try:
                have = int(os.getxattr(path, "user.kvfs.page_bytes"))
                break
            except OSError as e:
                if e.errno != errno.ENODATA:   # no geometry (yet)
                    raise
            time.sleep(0.1)
        if have is not None and have != page_bytes:
            raise ValueError("%s: %s holds pages of %d bytes, the engine's are %d: "
                             "another layout under the same name (set kvfs_model, or "
                             "drop the directory)" % (who, path, have, page_bytes))
    width = 2 if pieces <= 100 else len(str(pieces - 1))
    for i in range(pieces):
        try:
            os.mkdir(os.path.join(path, "%0*d" % (width, i)), 0o755)
        except FileExistsError:
            pass


def drain(dq):
    """Everything in a deque, taken from the left (other threads append)."""
    out = []
    while True:
        try:
            out.append(dq.popleft())
        except IndexError:
            return out


class Workers:
    """n daemon threads running fn(item) for each queued item, in order of
    arrival; stop() lets them finish what is queued and joins them."""

    def __init__(self, n, fn, name):
        self.q = queue.Queue()
        self.fn = fn
        self.threads = [threading.Thread(target=self._loop, daemon=True,
                                         name="%s%d" % (name, i)) for i in range(max(1, n))]
        for t in self.threads:
            t.start()

    def put(self, item):
        self.q.put(item)

    def _loop(self):
        while True:
            item = self.q.get()
            if item is None:
                return
            self.fn(item)

    def stop(self, timeout=30):
        for _ in self.threads:
            self.q.put(None)
        for t in self.threads:
            t.join(timeout=timeout)


class _Thread:
    """One thread's batch: its control region (descriptors and names),
    which doubles as its staging area past the control bytes."""

    def __init__(self):
        self.region = None
        self.batch = None
        self.stage_off = 0


class PageStore:
    """The pages of layer 0 of one model directory, one page per engine
    object, moved to and from engine memory.

    Engine memory that is a file (a /dev/shm file, a memfd) is registered
    once (register_fd) and pages move straight between it and the SSD
    (read_at / write_at, by offset in that file). Any other memory is staged
    through a region of this store's (read_to / write_from, by address):
    one memcpy per page, slower. Each call takes a list of names and
    returns (statuses, sizes): 0 or -errno and the page's size per name;
    a call that fails as a whole raises OSError. Usable from any number of
    threads (each gets its own batch)."""

    BATCH = 1024

    def __init__(self, model_dir, staging_bytes=64 << 20):
        self.model_dir = model_dir
        self.client = kvfs.Client(model_dir)
        self.staging_bytes = staging_bytes
        self.data = None            # the registered engine file, or None
        self._tls = threading.local()
        self._threads = []
        self._lock = threading.Lock()

    def register_fd(self, fd, size=0):
        """Register an engine file as the data region; OSError if refused."""
        self.data = self.client.region_from_fd(fd, size)
        return self.data

    def _thread(self, stage=0):
        t = getattr(self._tls, "t", None)
        if t is None:
            t = self._tls.t = _Thread()
            with self._lock:
                self._threads.append(t)
        ctl = round_up(kvfs.Batch.ctl_bytes(self.BATCH), ALIGN)
        need = ctl + round_up(stage, ALIGN)
        if t.region is None or t.region.size < need:
            if t.region is not None:
                t.batch.close()
                t.region.close()
                t.region = t.batch = None
            t.region = self.client.region(need)
            t.batch = t.region.batch(0, self.BATCH)
            t.stage_off = ctl
        return t

    def _run(self, op, names, offs, lens, data, flags=0):
        """One batch call over names[i] at data-region offset offs[i]."""
        t = self._thread()
        return self._run_on(t, op, names, offs, lens, data, flags)

    def _run_on(self, t, op, names, offs, lens, data, flags=0):
        n = len(names)
        st = np.zeros(n, np.int32)
        nb = np.zeros(n, np.uint64)
        b = t.batch
        for a in range(0, n, self.BATCH):
            z = min(n, a + self.BATCH)
            b.reset()
            b.set_data_region(data)
            for i in range(a, z):
                b.add(0, names[i], int(offs[i]) if offs is not None else 0,
                      int(lens[i]) if lens is not None else 0)
            if op == "lookup":
                b.lookup(0)
            elif op == "read":
                b.read()
            else:
                b.write(durable=bool(flags & kvfs.WRITE_DURABLE))
            d = b.descs
            st[a:z] = d["status"]
            nb[a:z] = d["bytes"]
            del d
        return st, nb

    def lookup(self, names):
        """Whether each page is stored: (statuses, sizes), no data moved."""
        return self._run("lookup", names, None, None, None)

    def read_at(self, names, offs, lens):
        """Read pages into the registered file at offs (direct)."""
        return self._run("read", names, offs, lens, self.data)

    def write_at(self, names, offs, lens, durable=False):
        """Store pages from the registered file at offs (direct)."""
        return self._run("write", names, offs, lens, self.data,
                         kvfs.WRITE_DURABLE if durable else 0)

    def _staged(self, lens):
        """Groups [a, z) of pages that fit this thread's staging at once."""
        n, a = len(lens), 0
        while a < n:
            size, z = 0, a
            while z < n and (z == a or size + round_up(int(lens[z]), ALIGN)
                             <= self.staging_bytes):
                size += round_up(int(lens[z]), ALIGN)
                z += 1
            yield a, z, size
            a = z

    def read_to(self, names, addrs, lens):
        """Read pages through staging into memory at addrs (one memcpy each;
        a page is copied out only when it arrived whole)."""
        return self._staged_call("read", names, addrs, lens, 0)

    def write_from(self, names, addrs, lens, durable=False):
        """Store pages from memory at addrs, copied into staging first."""
        return self._staged_call("write", names, addrs, lens,
                                 kvfs.WRITE_DURABLE if durable else 0)

    def _staged_call(self, op, names, addrs, lens, flags):
        n = len(names)
        st = np.zeros(n, np.int32)
        nb = np.zeros(n, np.uint64)
        for a, z, size in self._staged(lens):
            t = self._thread(size)
            offs = self._offsets(t, lens[a:z])
            if op == "write":
                for i in range(a, z):
                    ctypes.memmove(t.region.base + offs[i - a], int(addrs[i]), int(lens[i]))
            st[a:z], nb[a:z] = self._run_on(t, op, names[a:z], offs, lens[a:z], None, flags)
            if op == "read":
                for i in range(a, z):
                    if st[i] == 0 and nb[i] == lens[i]:
                        ctypes.memmove(int(addrs[i]), t.region.base + offs[i - a],
                                       int(lens[i]))
        return st, nb

    def drop(self, names):
        """Unlink pages (damaged ones: so lookups miss them, instead of
        every lookup starting a load that fails again, and a recomputed
        object can be stored under the same name). Returns
        [(name, OSError)] for those that could not be removed."""
        failed = []
        for nm in names:
            try:
                os.unlink(os.path.join(self.model_dir, "00", os.fsdecode(nm)))
            except FileNotFoundError:
                pass
            except OSError as e:
                failed.append((nm, e))
        return failed

    @staticmethod
    def _offsets(t, lens):
        offs, o = [], t.stage_off
        for ln in lens:
            offs.append(o)
            o += round_up(int(ln), ALIGN)
        return offs

    def close(self):
        with self._lock:
            threads, self._threads = self._threads, []
        for t in threads:
            if t.batch is not None:
                t.batch.close()
            if t.region is not None:
                t.region.close()
            t.region = t.batch = None
        if self.data is not None:
            self.data.close()
            self.data = None
        self.client.close()
