"""kvfs fast path from Python: ctypes over libkvfs (libkvfs.h).

    import kvfs
    with kvfs.Client("/mnt/kvfs/llama3-8b") as c:
        k = c.read_layer(0, ["blk-a", "blk-b"], 65536)   # (2, 65536) uint8
        hit, handles, sizes = c.lookup_prefix(block_keys, range(32))
        c.write_layer(0, ["blk-c"], kv_rows, durable=True)   # store pages

A Client is one model directory of a mounted kvfs. A Region is shared
memory registered with the daemon (a new memfd, or the caller's file, whole
or a page-aligned part of it): pages land in it directly, and every array
or memoryview this module returns is a view of it (nothing is copied),
except lookup_prefix's small result arrays. A Batch is one fast-path call:
descriptors and names in a control area of its region, destinations in
other ranges of it or of a data region (Batch.set_data_region: an engine's
host pool). A destination or source is an offset in that region, or an
object in it: a numpy array, a buffer, a CPU tensor (data_ptr()).

Torch: Region.tensor(torch.bfloat16, ...) views a region as a CPU tensor
(as Region.array does with numpy), read_layer(..., dtype=torch.bfloat16)
returns one, and write_layer takes tensor rows. read_layer(out=...) fills
memory of the caller's: straight, if it lies in a region of the client
(a registered host pool), else staged through a region with one memcpy
(a torch pin_memory tensor, any memory with no fd: slower).

Without blocking: Batch.submit() starts a call and returns; Batch.poll()
gives its Result once done (None while in flight); Client.event_fd() is a
descriptor that select/poll/epoll report readable when a submitted call
completes (drain it with Client.drain_events(), then poll every batch in
flight); under asyncio, await Batch.wait_async(). Per layer:
read_layer_async / write_layer_async return a LayerRead / LayerWrite
with the same poll(), wait() and wait_async(), which give what
read_layer / write_layer return.

Lifetime: a view keeps its region alive, and a region its client. A region
with live views cannot be closed (BufferError, as with mmap); Client.close()
closes every region that has none and leaves the others, and the client
itself, to be closed when their last view goes away.

Errors: a call that fails as a whole raises OSError with the errno. A
Batch never raises for one page: status(i) / statuses() give 0 or -errno
per page (kvfs_ioctl.h lists them), and check() raises PageError for the
first failing one. The convenience calls (read_layer, write_pages,
write_layer, and collecting a LayerRead or LayerWrite) raise PageError, an
OSError whose errno, filename and index name the first page that failed
and whose statuses list has every page's status.

The library is libkvfs.so: $KVFS_LIB if set, else next to this module (or
one directory up, as in a build tree, or in build/client of a source
checkout), else wherever the dynamic linker finds it.
"""

import collections
import ctypes
import ctypes.util
import errno
import operator
import os
import threading
import weakref

try:
    import numpy as np
except ImportError:  # views as memoryviews still work without numpy
    np = None

from _kvfs_util import AsyncDispatch as _AsyncDispatch  # noqa: E402
from _kvfs_util import memory_of as _memory, view_of as _view_of  # noqa: E402
# Client's layer and page-list calls (they use this module's classes)
from _kvfs_layers import LayerCalls as _LayerCalls, LayerRead, LayerWrite  # noqa: E402

__all__ = ["Client", "Region", "Batch", "Result", "PageError", "PageDesc",
           "LayerRead", "LayerWrite",
           "ABI_VERSION", "NAME_MAX", "BATCH_MAX", "DESC_RAM", "DESC_BOUNCED", "DESC_CACHED",
           "WRITE_DURABLE", "WRITE_REPLACE"]

ABI_VERSION = 1
NAME_MAX = 255
BATCH_MAX = 1 << 20
DESC_RAM = 1 << 0       # served from RAM (not yet on disk)
DESC_BOUNCED = 1 << 1   # destination not O_DIRECT-usable: copied
DESC_CACHED = 1 << 2    # served from the daemon's RAM tier
WRITE_DURABLE = 1 << 0  # write: return once every page is durable
WRITE_REPLACE = 1 << 1  # write: replace pages of the same name (else EEXIST)
_ALIGN = 4096           # O_DIRECT-friendly destination alignment


class PageDesc(ctypes.Structure):
    """struct kvfs_page_desc (64 bytes, part of the ABI)."""
    _fields_ = [("handle", ctypes.c_uint64), ("name_off", ctypes.c_uint64),
                ("name_len", ctypes.c_uint32), ("layer", ctypes.c_uint32),
                ("dst_off", ctypes.c_uint64), ("dst_len", ctypes.c_uint64),
                ("status", ctypes.c_int32), ("out_flags", ctypes.c_uint32),
                ("bytes", ctypes.c_uint64), ("reserved", ctypes.c_uint64)]


assert ctypes.sizeof(PageDesc) == 64

if np is not None:
    # The same layout as a numpy record, for zero-copy views of a batch.
    DESC_DTYPE = np.dtype([(n, "<i4" if t is ctypes.c_int32 else
                            "<u4" if t is ctypes.c_uint32 else "<u8")
                           for n, t in PageDesc._fields_])
    assert DESC_DTYPE.itemsize == 64
    __all__.append("DESC_DTYPE")


class _Result(ctypes.Structure):
    _fields_ = [("done", ctypes.c_uint32), ("failed", ctypes.c_uint32),
                ("bytes", ctypes.c_uint64)]


Result = collections.namedtuple("Result", "done failed bytes")
Result.__doc__ = """Outcome of a batch call. done: pages delivered (read),
stored (write) or the prefix hit length in blocks (lookup); failed: pages
with a nonzero status; bytes: payload bytes delivered (read), stored
(write) or found (lookup)."""


class PageError(OSError):
    """A page of a convenience call failed. errno/strerror/filename are the
    first failing page's; index is its position; statuses has all pages'
    statuses (0 or -errno)."""

    def __init__(self, err, name, index, statuses):
        super().__init__(err, os.strerror(err), name)
        self.index = index
        self.statuses = statuses

    def __reduce__(self):
        # OSError pickles as (errno, strerror, filename), which __init__
        # does not take: an engine process's PageError would not cross
        # multiprocessing (its pool hangs on the error it cannot unpickle).
        return (PageError, (self.errno, self.filename, self.index, self.statuses))


def _load():
    here = os.path.dirname(os.path.abspath(__file__))
    cands = []
    if os.environ.get("KVFS_LIB"):
        cands.append(os.environ["KVFS_LIB"])
    # next to the module, one directory up (a build tree), or the default
    # build directory of a source checkout (client/python -> build/client)
    for d in (here, os.path.dirname(here),
              os.path.join(os.path.dirname(os.path.dirname(here)), "build", "client")):
        cands += [os.path.join(d, "libkvfs.so.0"), os.path.join(d, "libkvfs.so")]
    found = ctypes.util.find_library("kvfs")
    if found:
        cands.append(found)
    cands.append("libkvfs.so.0")
    errors = []
    for c in cands:
        if os.sep in c and not os.path.exists(c):
            continue
        try:
            return ctypes.CDLL(c)
        except OSError as e:
            errors.append(str(e))
    raise ImportError("kvfs: libkvfs.so not found (set KVFS_LIB): "
                      + "; ".join(errors or ["no candidate"]))


_lib = _load()


def _proto(name, res, *args):
    f = getattr(_lib, name)
    f.restype = res
    f.argtypes = list(args)


_vp, _u32, _u64, _int = ctypes.c_void_p, ctypes.c_uint32, ctypes.c_uint64, ctypes.c_int
_pvp = ctypes.POINTER(ctypes.c_void_p)
_pres = ctypes.POINTER(_Result)
_proto("kvfs_client_open", _int, ctypes.c_char_p, _pvp)
_proto("kvfs_client_close", None, _vp)
_proto("kvfs_client_fd", _int, _vp)
_proto("kvfs_client_event_fd", _int, _vp)
_proto("kvfs_client_event_drain", _int, _vp)
_proto("kvfs_region_create", _int, _vp, ctypes.c_size_t, _pvp)
_proto("kvfs_region_register_fd", _int, _vp, _int, ctypes.c_size_t, _pvp)
_proto("kvfs_region_register_fd_at", _int, _vp, _int, _u64, ctypes.c_size_t, _pvp)
_proto("kvfs_region_offset", _u64, _vp)
_proto("kvfs_region_destroy", _int, _vp)
_proto("kvfs_region_base", _vp, _vp)
_proto("kvfs_region_size", ctypes.c_size_t, _vp)
_proto("kvfs_region_id", _u64, _vp)
_proto("kvfs_batch_ctl_bytes", ctypes.c_size_t, ctypes.c_uint)
_proto("kvfs_batch_new", _int, _vp, _u64, ctypes.c_uint, _pvp)
_proto("kvfs_batch_free", None, _vp)
_proto("kvfs_batch_reset", None, _vp)
_proto("kvfs_batch_count", ctypes.c_uint, _vp)
_proto("kvfs_batch_add", _int, _vp, _u32, ctypes.c_char_p, _u64, _u64)
_proto("kvfs_batch_add_handle", _int, _vp, _u64, _u64, _u64)
_proto("kvfs_batch_set_dst", _int, _vp, ctypes.c_uint, _u64, _u64)
_proto("kvfs_batch_set_data_region", _int, _vp, _vp)
_proto("kvfs_batch_read", _int, _vp, _pres)
_proto("kvfs_batch_lookup", _int, _vp, ctypes.c_uint, _pres)
_proto("kvfs_batch_write", _int, _vp, ctypes.c_uint, _pres)
_proto("kvfs_batch_prefetch", _int, _vp, _pres)
_proto("kvfs_batch_submit", _int, _vp)
_proto("kvfs_batch_submit_write", _int, _vp, ctypes.c_uint)
_proto("kvfs_batch_wait", _int, _vp, _pres)
_proto("kvfs_batch_poll", _int, _vp, _pres)
_proto("kvfs_batch_status", _int, _vp, ctypes.c_uint, ctypes.POINTER(_u64))
_proto("kvfs_batch_handle", _u64, _vp, ctypes.c_uint)
_proto("kvfs_batch_desc", ctypes.POINTER(PageDesc), _vp, ctypes.c_uint)


def _check(rc, what=None):
    """libkvfs returns 0 / a count, or -errno: raise OSError for the latter."""
    if rc < 0:
        raise OSError(-rc, os.strerror(-rc), what)
    return rc


def _round_up(n, a):
    return (n + a - 1) // a * a


def _write_flags(durable, replace):
    return (WRITE_DURABLE if durable else 0) | (WRITE_REPLACE if replace else 0)


def _need_numpy():
    if np is None:
        raise ImportError("kvfs: this call needs numpy (apt-get install python3-numpy)")


class _Closing:
    """with-statement support and close() at garbage collection."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


class Client(_LayerCalls, _Closing):
    """One model directory of a mounted kvfs: Client("/mnt/kvfs/model").
    Raises OSError ENOTTY if it is not one. Usable from any thread."""

    def __init__(self, model_dir):
        h = ctypes.c_void_p()
        _check(_lib.kvfs_client_open(os.fsencode(model_dir), ctypes.byref(h)),
               model_dir)
        self._h = h.value
        self.model_dir = model_dir
        self._lock = threading.RLock()
        self._regions = weakref.WeakSet()
        # Regions not yet freed in libkvfs, counted rather than found in
        # _regions: the garbage collector empties weak sets before it
        # finalizes anything, and kvfs_client_close frees every region
        # still open, so a count of zero is the only safe sign.
        self._nregions = 0
        self._scratch = None     # control area for lookup_prefix, reused
        self._closing = False
        self._dispatch = None    # wait_async's reader of event_fd()

    @property
    def fd(self):
        """The model directory's descriptor (for raw ioctls)."""
        self._handle()
        return _lib.kvfs_client_fd(self._h)

    def _handle(self):
        if self._closing or self._h is None:
            raise ValueError("kvfs client is closed")
        return self._h

    def region(self, size):
        """New shared memory of size bytes, registered: Region.create."""
        return Region.create(self, size)

    def region_from_fd(self, fd, size=0, offset=0):
        """Register memory the caller has (a /dev/shm file opened O_RDWR,
        or a memfd), whole or bytes [offset, offset + size): Region.from_fd."""
        return Region.from_fd(self, fd, size, offset)

    def event_fd(self):
        """A descriptor that select/poll/epoll report readable once a
        submitted call of this client has completed (an eventfd; the client
        owns it: do not close it). It stays readable until drained: call
        drain_events(), then poll() every batch in flight, in that order,
        and no completion is missed. A wakeup may find nothing new (a call
        collected by wait() counts too). One consumer per client: whoever
        drains takes every batch's wakeup, so threads or event loops that
        each watch only their own batches need a client each."""
        return _lib.kvfs_client_event_fd(self._handle())

    def drain_events(self):
        """Reset event_fd() without blocking; returns the completions
        counted since the last drain (0 if none)."""
        return _check(_lib.kvfs_client_event_drain(self._handle()))

    def close(self):
        """Close every region without live views, and the client once the
        last region is gone (now, or when the last view is dropped)."""
        with self._lock:
            if self._closing:
                return
            self._closing = True
            regions = list(self._regions)
            scratch, self._scratch = self._scratch, None
        if scratch is not None:
            scratch.close()
        # A data region can close only once the batches that use it are
        # gone, which closing their own region does: repeat until stuck.
        while True:
            closable = [r for r in regions if r._closable()]
            if not closable:
                break
            for r in closable:
                r.close()
        self._release_if_unused()

    def _release_if_unused(self):
        with self._lock:
            if not self._closing or self._h is None or self._nregions:
                return
            h, self._h = self._h, None
        _lib.kvfs_client_close(h)

    def _scratch_region(self, size):
        """The client's own region for lookups and writes, grown on demand
        (self._lock held, so one call uses it at a time)."""
        if self._scratch is None or self._scratch.size < size:
            if self._scratch is not None:
                self._scratch.close()
                self._scratch = None
            self._scratch = Region.create(self, _round_up(max(size, 1 << 20), _ALIGN))
        return self._scratch


class Region(_Closing):
    """Shared memory registered with the daemon. Make one with
    Region.create(client, size) or Region.from_fd(client, fd, size=0,
    offset=0); close it with close() (or a with block), or drop every
    reference. offset is where it starts in its file."""

    def __init__(self, client, handle):
        self.client = client
        self._h = handle
        self.base = _lib.kvfs_region_base(handle)
        self.size = _lib.kvfs_region_size(handle)
        self.id = _lib.kvfs_region_id(handle)
        self.offset = _lib.kvfs_region_offset(handle)
        self._mem_ref = None
        self._batches = weakref.WeakSet()
        self._data_users = weakref.WeakSet()   # batches whose data region it is
        # Batches not yet freed in libkvfs that name this region (as their
        # own or as their data region): it is freed only after them, at
        # the last one's close when close() came first (see Client).
        self._nbatches = 0
        self._closing = False
        with client._lock:
            client._regions.add(self)
            client._nregions += 1

    @classmethod
    def create(cls, client, size):
        """size bytes of new, sealed shared memory (a memfd), pre-faulted."""
        h = ctypes.c_void_p()
        ch = client._handle()
        _check(_lib.kvfs_region_create(ch, size, ctypes.byref(h)))
        return cls(client, h.value)

    @classmethod
    def from_fd(cls, client, fd, size=0, offset=0):
        """Register memory the caller has: a /dev/shm file opened O_RDWR,
        or a memfd; size bytes from offset (0 = to the end of the file).
        offset is a multiple of 4096, and region offsets count from it:
        tensor-parallel ranks each register their part of one host pool
        (whose memory the daemon counts once). The file must hold offset +
        size allocated bytes (write or fallocate it first). The descriptor
        is duplicated: the caller still owns fd. OSError EINVAL (offset
        not aligned, not a regular file), ERANGE (past the end)."""
        h = ctypes.c_void_p()
        ch = client._handle()
        _check(_lib.kvfs_region_register_fd_at(ch, fd, offset, size, ctypes.byref(h)))
        return cls(client, h.value)

    def _handle(self):
        if self._h is None or self._closing:
            raise ValueError("kvfs region is closed")
        return self._h

    def _memory(self):
        """The ctypes array over the whole mapping that views are made of.
        It holds the region (so a view keeps the mapping alive); the region
        only refers to it weakly (so it can tell when no view is left)."""
        self._handle()
        mem = self._mem_ref() if self._mem_ref else None
        if mem is None:
            mem = (ctypes.c_uint8 * self.size).from_address(self.base)
            mem._region = self
            self._mem_ref = weakref.ref(mem)
        return mem

    def _views_alive(self):
        return self._mem_ref is not None and self._mem_ref() is not None

    def _closable(self):
        return (self._h is not None and not self._closing and not self._views_alive()
                and not any(b._inflight for b in list(self._batches))
                and not self._data_users)

    def offset_of(self, obj):
        """(offset, nbytes) of obj in this region: obj is a numpy array,
        a buffer-protocol object or anything with data_ptr() (a CPU torch
        tensor), contiguous and wholly inside the region (else
        ValueError)."""
        self._handle()
        addr, n = _memory(obj)
        if addr < self.base or addr + n > self.base + self.size:
            raise ValueError("kvfs: the memory is not inside the region")
        return addr - self.base, n

    def buffer(self, offset=0, length=None):
        """Writable memoryview of bytes [offset, offset + length)."""
        if length is None:
            length = self.size - offset
        if offset < 0 or length < 0 or offset + length > self.size:
            raise ValueError("range outside the region")
        return memoryview(self._memory()).cast("B")[offset:offset + length]

    def array(self, dtype="uint8", offset=0, count=-1, shape=None, strides=None):
        """numpy view of the region: count items of dtype from byte offset
        (-1: to the end), or an array of the given shape (and strides)."""
        _need_numpy()
        dtype = np.dtype(dtype)
        mem = self._memory()
        if shape is None:
            return np.frombuffer(mem, dtype, count, offset)
        return np.ndarray(shape, dtype, buffer=mem, offset=offset, strides=strides)

    def tensor(self, dtype=None, offset=0, count=-1, shape=None):
        """CPU torch tensor view of the region (torch.uint8 unless dtype
        is given, e.g. torch.bfloat16): count items from byte offset (-1:
        to the end), or a C-contiguous tensor of the given shape. As with
        array(), the view keeps the region alive and the region cannot
        close while it exists. Needs torch."""
        import torch
        dtype = torch.uint8 if dtype is None else dtype
        if shape is None:
            if count < 0:
                count = (self.size - offset) // dtype.itemsize
            shape = (count,)
        return _view_of(self, dtype, offset, tuple(shape))

    def batch(self, ctl_off, max_pages):
        """A Batch whose control area is [ctl_off, ctl_off +
        Batch.ctl_bytes(max_pages)) of this region."""
        return Batch(self, ctl_off, max_pages)

    def close(self):
        """Unregister and unmap. BufferError while views of it are alive;
        OSError EBUSY while one of its batches has a read in flight."""
        if self._h is None or self._closing:
            return
        if self._views_alive():
            raise BufferError("kvfs region has live views (arrays or memoryviews)")
        for b in list(self._batches):
            if b._inflight:
                raise OSError(errno.EBUSY, "kvfs region has a read in flight")
        if self._data_users:
            raise OSError(errno.EBUSY, "kvfs region is the data region of a "
                          "batch (close it, or set_data_region(None))")
        for b in list(self._batches):
            b.close()
        self._closing = True
        self._release()

    def _release(self):
        """Free it in libkvfs once closing and no batch names it."""
        with self.client._lock:
            if self._h is None or not self._closing or self._nbatches:
                return
            h, self._h = self._h, None
        rc = _lib.kvfs_region_destroy(h)
        if rc < 0:   # never freed: keep it usable rather than leak silently
            self._h, self._closing = h, False
            _check(rc)
        with self.client._lock:
            self.client._nregions -= 1
        self.client._release_if_unused()


class Batch(_Closing):
    """One fast-path call's descriptors, in a control area of a region.
    Not thread-safe: one thread at a time (libkvfs.h)."""

    def __init__(self, region, ctl_off, max_pages):
        h = ctypes.c_void_p()
        _check(_lib.kvfs_batch_new(region._handle(), ctl_off, max_pages,
                                   ctypes.byref(h)))
        self.region = region
        self.ctl_off = ctl_off
        self.max_pages = max_pages
        self.data_region = region   # where destinations / sources lie
        self._h = h.value
        self._inflight = False
        region._batches.add(self)
        with region.client._lock:
            region._nbatches += 1

    @staticmethod
    def ctl_bytes(max_pages):
        """Control-area bytes a batch of max_pages needs."""
        return _lib.kvfs_batch_ctl_bytes(max_pages)

    def _handle(self):
        if self._h is None or self.region._h is None or self.region._closing:
            raise ValueError("kvfs batch (or its region) is closed")
        return self._h

    def _dst(self, dst, dst_len):
        """(offset, length) of a destination: an offset in the data region,
        or an object that lies in it (its size unless dst_len is given)."""
        try:
            return operator.index(dst), dst_len
        except TypeError:
            off, n = self.data_region.offset_of(dst)
            return off, dst_len or n

    def add(self, layer, name, dst_off=0, dst_len=0):
        """Append a page by layer (a number, or a layer directory's name
        such as "07") and name (str or bytes); read it into data region
        bytes [dst_off, dst_off + dst_len), or for write() store those
        bytes as the page (dst_len is then its size; an offset needs it:
        a read into 0 bytes fails that page with ENOBUFS). dst_off may
        instead be an array, buffer or tensor in the data region (dst_len
        then defaults to its size). Returns its index."""
        layer = int(layer)
        name = os.fsencode(name)
        if b"\0" in name:
            raise OSError(errno.EINVAL, "page name contains NUL", name)
        dst_off, dst_len = self._dst(dst_off, dst_len)
        return _check(_lib.kvfs_batch_add(self._handle(), layer, name,
                                          dst_off, dst_len), name)

    def add_handle(self, handle, dst_off=0, dst_len=0):
        """Append a page by handle (from a lookup); dst_off as for add().
        Returns its index."""
        dst_off, dst_len = self._dst(dst_off, dst_len)
        return _check(_lib.kvfs_batch_add_handle(self._handle(), handle,
                                                 dst_off, dst_len))

    def set_dst(self, i, dst_off, dst_len=0):
        """Point page i at a new destination (a lookup batch, then read);
        dst_off as for add()."""
        dst_off, dst_len = self._dst(dst_off, dst_len)
        _check(_lib.kvfs_batch_set_dst(self._handle(), i, dst_off, dst_len))

    def set_data_region(self, region):
        """Make reads and writes move page bytes to and from region (a
        Region of the same client, e.g. an engine's host pool): every
        destination (or write source) is then an offset in it, while the
        descriptors and names stay in this batch's control area. None goes
        back to the batch's own region. The region cannot close while a
        batch uses it. OSError EXDEV (another client's region), EBUSY
        (submitted)."""
        new = self.region if region is None else region
        _check(_lib.kvfs_batch_set_data_region(
            self._handle(), None if new is self.region else new._handle()))
        old = self.data_region
        if old is not self.region:
            old._data_users.discard(self)
        if new is not self.region:
            new._data_users.add(self)
        with self.region.client._lock:
            new._nbatches += new is not self.region
            old._nbatches -= old is not self.region
        self.data_region = new
        if old is not self.region:
            old._release()

    def reset(self):
        """Forget every page (the control area is reused)."""
        _lib.kvfs_batch_reset(self._handle())

    def __len__(self):
        return _lib.kvfs_batch_count(self._handle())

    def read(self):
        """Read every page into its destination; waits. Returns a Result."""
        r = _Result()
        _check(_lib.kvfs_batch_read(self._handle(), ctypes.byref(r)))
        return Result(r.done, r.failed, r.bytes)

    def lookup(self, group=0):
        """Look every page up without reading it; group = pages per block
        (0 or 1: each page is a block). Returns a Result (done = the prefix
        hit length in blocks); fills handles and sizes."""
        r = _Result()
        _check(_lib.kvfs_batch_lookup(self._handle(), group, ctypes.byref(r)))
        return Result(r.done, r.failed, r.bytes)

    def prefetch(self):
        """Ask the daemon to load every page of the batch (added with no
        destination) into its RAM tier in the background; returns at once.
        Returns a Result (done = pages queued or already in RAM)."""
        r = _Result()
        _check(_lib.kvfs_batch_prefetch(self._handle(), ctypes.byref(r)))
        return Result(r.done, r.failed, r.bytes)

    def write(self, durable=False, replace=False):
        """Store every page of the batch (its bytes are its source range
        of the region); waits. durable: until every page is durable, else
        until visible; replace: replace pages of the same name, else EEXIST
        for each. Returns a Result; statuses() and handle(i) give each
        page's outcome. The source bytes may be reused on return."""
        r = _Result()
        _check(_lib.kvfs_batch_write(self._handle(), _write_flags(durable, replace),
                                     ctypes.byref(r)))
        return Result(r.done, r.failed, r.bytes)

    def submit(self):
        """Start reading in the background; collect with wait(). OSError
        EBUSY if a submission is already pending."""
        _check(_lib.kvfs_batch_submit(self._handle()))
        self._inflight = True

    def submit_write(self, durable=False, replace=False):
        """Start write() in the background; collect with wait(). The
        source bytes must stay as they are until wait() returns."""
        _check(_lib.kvfs_batch_submit_write(self._handle(),
                                            _write_flags(durable, replace)))
        self._inflight = True

    def wait(self):
        """Wait for the submitted call (without holding the GIL). Returns a
        Result, or raises OSError if the call failed as a whole."""
        r = _Result()
        rc = _lib.kvfs_batch_wait(self._handle(), ctypes.byref(r))
        self._inflight = False
        _check(rc)
        return Result(r.done, r.failed, r.bytes)

    def poll(self):
        """Never blocks: the submitted call's Result once it is done
        (collected, as wait() would), None while it is in flight. OSError
        if the call failed as a whole, or EINVAL if nothing is submitted
        (or another thread collected it)."""
        r = _Result()
        rc = _lib.kvfs_batch_poll(self._handle(), ctypes.byref(r))
        if rc == -errno.EAGAIN:
            return None
        self._inflight = False
        _check(rc)
        return Result(r.done, r.failed, r.bytes)

    async def wait_async(self):
        """Await the submitted call without blocking the event loop: the
        client's event_fd() is watched by the loop (one loop per client
        at a time), and the Result is returned as poll() would. Cancelling
        the await leaves the call submitted: collect it with wait()."""
        return await _AsyncDispatch.of(self.region.client).wait(self)

    def status(self, i):
        """(status, bytes) of page i: 0 or -errno, and the page's size."""
        if i < 0 or i >= len(self):
            raise IndexError(i)
        n = ctypes.c_uint64()
        st = _lib.kvfs_batch_status(self._handle(), i, ctypes.byref(n))
        return st, n.value

    def statuses(self):
        """Every page's status (0 or -errno), as a list."""
        if np is None or self._inflight:
            return [self.status(i)[0] for i in range(len(self))]
        return self.descs["status"].tolist()

    def handle(self, i):
        """Page i's handle after a lookup or write (0 if absent/failed)."""
        if i < 0 or i >= len(self):
            raise IndexError(i)
        return _lib.kvfs_batch_handle(self._handle(), i)

    @property
    def descs(self):
        """The descriptors as a numpy record array (DESC_DTYPE) that views
        the region: fields handle, name_off, name_len, layer, dst_off,
        dst_len, status, out_flags, bytes, reserved."""
        self._handle()
        return self.region.array(DESC_DTYPE, self.ctl_off, len(self))

    def check(self, names=None):
        """Raise PageError for the first page whose status is not 0."""
        st = self.statuses()
        for i, s in enumerate(st):
            if s:
                raise PageError(-s, names[i] if names else None, i, st)

    def close(self):
        """Free the batch (waiting for a submitted read first)."""
        if self._h is None:
            return
        h, self._h = self._h, None
        _lib.kvfs_batch_free(h)
        self._inflight = False
        regions = [self.region]
        if self.data_region is not self.region:
            self.data_region._data_users.discard(self)
            regions.append(self.data_region)
            self.data_region = self.region
        with self.region.client._lock:
            for r in regions:
                r._nbatches -= 1
        for r in regions:   # one closed before this batch goes now
            r._release()
