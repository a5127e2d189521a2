"""SGLang HiCache L3 storage on kvfs.

SGLang loads it with

    --enable-hierarchical-cache --hicache-mem-layout page_first \\
    --hicache-storage-backend dynamic \\
    --hicache-storage-backend-extra-config '{"backend_name": "kvfs",
        "module_path": "kvfs_engines.sglang", "class_name": "KvfsHiCacheStorage",
        "interface_v1": 1, "allocator": "shm", "kvfs_mount": "/mnt/kvfs"}'

(docs/engine-backends.md, "SGLang"). SGLang constructs the class as
``KvfsHiCacheStorage(storage_config, kwargs)``, then calls
``register_mem_pool_host(host_pool)``, and from then on its prefetch and
backup threads call ``batch_exists``, ``batch_get_v1`` and ``batch_set_v1``.

Layout in kvfs. One model directory per byte layout:
``MOUNT/<model>.<dtype>.<shard>.<layout>.p<page tokens>``, shard being
``tp<rank>of<size>`` (MHA: each rank holds its own heads) or ``mla`` (MLA:
every rank holds the same bytes, one rank writes). A page of SGLang's host
pool is a few contiguous pieces of pool memory, as SGLang's own
``get_page_buffer_meta`` reports them (K and V for MHA page-first layouts,
one piece for MLA, K and V of every layer for layer_first); piece i of the
page with key K is the kvfs page ``<i>/<K>``, so with page-first layouts a
kvfs page holds all layers of one SGLang page's K (or V). A key counts as
stored only when every piece is: ``batch_exists`` is one LOOKUP with the
pieces as the group.

Data path. With ``"allocator": "shm"`` SGLang allocates the host pool in a
memfd; the backend registers that memfd as a kvfs region and READs and
WRITEs name pool offsets directly (the descriptors live in a small region of
their own, KVFS_BATCH_DATA_REGION), so the daemon moves pages straight
between the SSD and the pool. Any other pool is staged through a region of
the backend's with one memcpy per piece: correct, slower, and logged once.

Failures. Nothing raises into SGLang's storage threads: a whole-call error
(daemon gone, EAGAIN, a bug) makes every page of the call a miss (get,
exists) or a failed store (set), is logged (rate-limited) and counted in
``stats()``. Per page: ENOENT (never stored, evicted) is a miss; EIO (a
checksum mismatch, a device error) is a miss counted as ``damaged``;
EEXIST on a store is success (another rank or engine stored the same key,
so the same bytes); ENOSPC is a failed store.
"""

import collections
import ctypes
import errno
import logging
import os
import threading

import numpy as np

import kvfs
from kvfs_engines._common import (RateLog, dir_name, dtype_tag, make_model_dir, mmap_base,
                                   page_name, round_up)

from sglang.srt.mem_cache.hicache_storage import HiCacheStorage

__all__ = ["KvfsHiCacheStorage", "page_name", "model_dir_name"]

logger = logging.getLogger(__name__)

_ALIGN = 4096
_NAME_MAX = kvfs.NAME_MAX
# Default staging (per thread) for a pool that is not fd-backed.
_STAGING_DEFAULT = 64 << 20


# --- the raw batch ioctl (docs/abi.md) --------------------------------------
# The binding's Batch keeps descriptors and data in one region, but a host
# pool has no room for descriptors: KVFS_BATCH_DATA_REGION puts them in a
# region of their own. kvfs.py does not expose that flag yet, so the calls
# are issued here, through libc (ctypes drops the GIL for the call).

class _BatchArg(ctypes.Structure):
    """struct kvfs_batch_arg (64 bytes, kvfs_ioctl.h)."""
    _fields_ = [("abi", ctypes.c_uint32), ("flags", ctypes.c_uint32),
                ("region_id", ctypes.c_uint64), ("desc_off", ctypes.c_uint64),
                ("count", ctypes.c_uint32), ("group", ctypes.c_uint32),
                ("done", ctypes.c_uint32), ("failed", ctypes.c_uint32),
                ("bytes", ctypes.c_uint64), ("data_region_id", ctypes.c_uint64),
                ("reserved1", ctypes.c_uint64)]


assert ctypes.sizeof(_BatchArg) == 64


def _iowr(nr):
    return (3 << 30) | (ctypes.sizeof(_BatchArg) << 16) | (0xCF << 8) | nr


_IOC_READ, _IOC_LOOKUP, _IOC_WRITE = _iowr(3), _iowr(4), _iowr(5)
_BATCH_DATA_REGION = 1 << 8

_libc = ctypes.CDLL(None, use_errno=True)
_libc.ioctl.restype = ctypes.c_int
_libc.ioctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_void_p]


class _CallError(OSError):
    """A batch call failed as a whole."""


# --- names ------------------------------------------------------------------

def model_dir_name(config, dtype, layout, page_size, format_tag=None):
    """The model directory of this rank's byte layout (docs/engine.md:
    everything that changes a page's bytes is in the name)."""
    dt = dtype_tag(dtype)
    if config.is_mla_model:
        shard = "mla"       # replicated across TP ranks: one directory for all
    else:
        shard = "tp%dof%d" % (config.tp_rank, config.tp_size)
    if config.pp_size > 1:
        shard += ".pp%dof%d" % (config.pp_rank, config.pp_size)
    if getattr(config, "attn_cp_size", 1) > 1:
        shard += ".cp%dof%d" % (config.attn_cp_rank, config.attn_cp_size)
    if getattr(config, "dcp_size", 1) > 1:
        shard += ".dcp%dof%d" % (config.dcp_rank, config.dcp_size)
    parts = [(config.model_name or "model"), dt, shard, layout, "p%d" % page_size]
    if format_tag:
        parts.append(str(format_tag))
    return dir_name(parts)


class _Scratch:
    """One thread's control region (descriptors and names) and, for a pool
    that is not fd-backed, its staging region."""

    def __init__(self):
        self.ctl = None
        self.staging = None


class KvfsHiCacheStorage(HiCacheStorage):
    """HiCacheStorage on a kvfs mount; see the module documentation.

    extra_config keys (besides SGLang's backend_name, module_path,
    class_name, interface_v1 and allocator):
      kvfs_mount        the kvfs mount point (or $KVFS_MOUNT); required
      kvfs_model        model directory name, instead of the derived one
      kvfs_durable      store pages durably (fsync'ed) before batch_set_v1
                        returns (default false: visible at once, written
                        back by the daemon; a crash may lose recent pages,
                        never tear them)
      kvfs_staging_mib  staging per storage thread for a pool that is not
                        fd-backed (default 64)
    """

    def __init__(self, storage_config, kwargs=None):
        extra = dict(storage_config.extra_config or {})
        self.storage_config = storage_config
        self.mount = extra.get("kvfs_mount") or os.environ.get("KVFS_MOUNT")
        if not self.mount:
            raise ValueError("kvfs HiCache backend: set \"kvfs_mount\" in "
                             "--hicache-storage-backend-extra-config (or $KVFS_MOUNT)")
        if not os.path.isdir(self.mount):
            raise ValueError("kvfs HiCache backend: kvfs_mount %r is not a directory"
                             % self.mount)
        # Without interface_v1 SGLang would call the deprecated batch_get /
        # batch_set with flat copies of each page; the v1 calls let the
        # daemon move pages in and out of the pool itself.
        if not int(extra.get("interface_v1", 0)):
            raise ValueError("kvfs HiCache backend: add \"interface_v1\": 1 to "
                             "--hicache-storage-backend-extra-config")
        self.model_override = extra.get("kvfs_model")
        self.durable = str(extra.get("kvfs_durable", "")).lower() in ("1", "true", "yes")
        self.staging_bytes = int(float(extra.get("kvfs_staging_mib", 0)) * (1 << 20)) \
            or _STAGING_DEFAULT
        self.is_writer = getattr(storage_config, "is_storage_writer", True)
        self._ready = False
        self._client = None
        self._pool_region = None
        self._pool_base = 0
        self._pieces = 0
        self._piece_bytes = 0
        self._tls = threading.local()
        self._scratches = []
        self._lock = threading.Lock()
        self._counts = collections.Counter()
        self._log = RateLog(logger)
        self.model_dir = None

    # --- attach -------------------------------------------------------------

    def register_mem_pool_host(self, mem_pool_host):
        """Create (or find) this rank's model directory and register the
        pool with kvfs. Raises on a misconfiguration (not a kvfs mount, a
        directory whose pages have another size, a layout the host pool
        cannot describe), which fails SGLang's attach with that message."""
        super().register_mem_pool_host(mem_pool_host)
        pool = mem_pool_host
        for attr in ("page_size", "layout", "dtype", "kv_buffer", "get_page_buffer_meta"):
            if not hasattr(pool, attr):
                raise TypeError("kvfs HiCache backend: host pool %s has no %s (hybrid "
                                "pools are not supported)" % (type(pool).__name__, attr))
        self.page_size = int(pool.page_size)
        import torch
        ptrs, sizes = pool.get_page_buffer_meta(torch.arange(self.page_size, dtype=torch.int64))
        if not ptrs or len(set(sizes)) != 1:
            raise ValueError("kvfs HiCache backend: host pool layout %r gives pieces of "
                             "sizes %s" % (pool.layout, sorted(set(sizes))))
        self._pieces, self._piece_bytes = len(ptrs), int(sizes[0])
        name = self.model_override or model_dir_name(
            self.storage_config, pool.dtype, pool.layout, self.page_size,
            getattr(pool, "storage_format_tag", None))
        self.model_dir = os.path.join(self.mount, name)
        self._make_model_dir()
        self._client = kvfs.Client(self.model_dir)
        self._register_pool(pool)
        self._ready = True
        logger.info("kvfs: HiCache storage in %s: %d piece(s) of %d bytes per page "
                    "(%s), %s", self.model_dir, self._pieces, self._piece_bytes,
                    pool.layout, "pool registered (zero copy)" if self._pool_region
                    else "staged through a region (one memcpy per piece)")

    def _make_model_dir(self):
        """The model directory, its geometry (one page = one piece) and a
        layer directory per piece."""
        make_model_dir(self.model_dir, self._pieces, self._piece_bytes,
                       "kvfs HiCache backend")

    def _register_pool(self, pool):
        """Register the pool's memfd (SGLang's "shm" allocator) as a region,
        or fall back to staging."""
        fd = getattr(pool, "fd", None)
        alloc = getattr(pool, "allocator", None)
        fds = getattr(alloc, "fds", None) or []
        mm = getattr(alloc, "mm", None)
        why = None
        if fd is None or mm is None:
            why = "the host pool is not fd-backed (add \"allocator\": \"shm\")"
        elif len(fds) != 1:
            why = "the host pool spans %d shared-memory files" % len(fds)
        else:
            base = mmap_base(mm)
            buf = pool.kv_buffer
            start = buf.data_ptr()
            end = start + buf.numel() * buf.element_size()
            if not (base <= start and end <= base + len(mm)):
                why = "the pool's memory is not the shared file's mapping"
            else:
                try:
                    self._pool_region = self._client.region_from_fd(fd)
                    self._pool_base = base
                except OSError as e:
                    why = "registering its memfd failed: %s" % e
        if why:
            logger.warning("kvfs: %s; pages are staged through a region with one memcpy "
                           "per piece (slower)", why)

    # --- per-thread scratch regions -------------------------------------------

    def _scratch(self):
        s = getattr(self._tls, "s", None)
        if s is None:
            s = self._tls.s = _Scratch()
            with self._lock:
                self._scratches.append(s)
        return s

    def _ctl(self, count, names):
        """A control region for `count` descriptors and `names` names of up
        to 255 bytes (grown on demand, per thread)."""
        s = self._scratch()
        need = round_up(count * 64, _ALIGN) + names * _NAME_MAX
        if s.ctl is None or s.ctl.size < need:
            if s.ctl is not None:
                s.ctl.close()
                s.ctl = None
            s.ctl = self._client.region(round_up(max(need, 1 << 20), _ALIGN))
        return s.ctl

    def _staging(self):
        s = self._scratch()
        if s.staging is None:
            stride = round_up(self._piece_bytes, _ALIGN)
            size = max(self.staging_bytes, stride * self._pieces)
            s.staging = self._client.region(round_up(size, _ALIGN))
        return s.staging

    # --- one batch call ---------------------------------------------------------

    def _call(self, cmd, names, dst_offs=None, group=0, flags=0, data=None):
        """One LOOKUP/READ/WRITE over len(names) keys x pieces descriptors
        (block-major: key i, piece j is descriptor i * pieces + j), with
        data offsets dst_offs in the pool region (or staging). Returns
        (done, statuses, bytes) with statuses as an (n, pieces) array."""
        n, k = len(names), self._pieces
        count = n * k
        ctl = self._ctl(count, n)
        name_base = round_up(count * 64, _ALIGN)
        name_offs = np.empty(n, np.uint64)
        name_lens = np.empty(n, np.uint32)
        buf = ctl.buffer(name_base, n * _NAME_MAX)
        off = 0
        for i, nm in enumerate(names):
            buf[off:off + len(nm)] = nm
            name_offs[i] = name_base + off
            name_lens[i] = len(nm)
            off += len(nm)
        del buf
        d = np.zeros(count, kvfs.DESC_DTYPE)
        d["name_off"] = np.repeat(name_offs, k)
        d["name_len"] = np.repeat(name_lens, k)
        d["layer"] = np.tile(np.arange(k, dtype=np.uint32), n)
        if dst_offs is not None:
            d["dst_off"] = dst_offs
            d["dst_len"] = self._piece_bytes
        ctl.buffer(0, count * 64)[:] = d.tobytes()
        arg = _BatchArg(abi=kvfs.ABI_VERSION, flags=flags, region_id=ctl.id, desc_off=0,
                        count=count, group=group)
        if data is not None:
            arg.flags |= _BATCH_DATA_REGION
            arg.data_region_id = data.id
        rc = _libc.ioctl(self._client.fd, cmd, ctypes.byref(arg))
        if rc < 0:
            e = ctypes.get_errno()
            raise _CallError(e, os.strerror(e))
        out = ctl.array(kvfs.DESC_DTYPE, 0, count)
        st = out["status"].reshape(n, k).copy()
        nb = out["bytes"].reshape(n, k).copy()
        del out
        return arg.done, st, nb

    # --- the v1 interface -------------------------------------------------------

    def batch_exists(self, keys, extra_info=None):
        """How many leading keys are stored (every piece): one LOOKUP."""
        try:
            if not self._ready or not keys:
                return 0
            done, _, _ = self._call(_IOC_LOOKUP, [page_name(k) for k in keys],
                                    group=self._pieces)
            self._count(exists_calls=1, exists_keys=len(keys), exists_hits=done)
            return int(done)
        except Exception as e:
            self._failed("exists", e)
            return 0

    def exists(self, key):
        return self.batch_exists([key]) == 1

    def _piece_ptrs(self, keys, host_indices):
        """Pool addresses of every piece of every key's page, key-major."""
        n = len(keys)
        if host_indices.numel() != n * self.page_size:
            raise ValueError("%d host indices for %d keys of %d tokens"
                             % (host_indices.numel(), n, self.page_size))
        ptrs, _ = self.mem_pool_host.get_page_buffer_meta(host_indices)
        if len(ptrs) != n * self._pieces:
            raise ValueError("host pool gave %d pieces for %d pages" % (len(ptrs), n))
        return np.asarray(ptrs, dtype=np.uint64)

    def batch_get_v1(self, keys, host_indices, extra_info=None):
        """Read each key's page into the host pool at host_indices (one page
        of page_size tokens per key). A key is True only if every piece
        arrived whole; misses and damaged pages are False."""
        n = len(keys)
        try:
            if not self._ready or n == 0:
                return [False] * n
            names = [page_name(k) for k in keys]
            ptrs = self._piece_ptrs(keys, host_indices)
            if self._pool_region is not None:
                st, nb = self._read_direct(names, ptrs)
            else:
                st, nb = self._read_staged(names, ptrs)
            return self._get_results(st, nb)
        except Exception as e:
            self._failed("get", e)
            self._count(get_keys=n, get_misses=n)
            return [False] * n

    def _read_direct(self, names, ptrs):
        _, st, nb = self._call(_IOC_READ, names, ptrs - np.uint64(self._pool_base),
                               data=self._pool_region)
        return st, nb

    def _staged_chunks(self, n):
        stride = round_up(self._piece_bytes, _ALIGN)
        per = max(1, self._staging().size // (stride * self._pieces))
        for a in range(0, n, per):
            yield a, min(n, a + per), stride

    def _read_staged(self, names, ptrs):
        n, k = len(names), self._pieces
        stage = self._staging()
        st = np.empty((n, k), np.int32)
        nb = np.empty((n, k), np.uint64)
        P = self._piece_bytes
        for a, b, stride in self._staged_chunks(n):
            offs = np.arange((b - a) * k, dtype=np.uint64) * np.uint64(stride)
            _, st[a:b], nb[a:b] = self._call(_IOC_READ, names[a:b], offs, data=stage)
            for i in range(a, b):
                if (st[i] == 0).all() and (nb[i] == P).all():
                    for j in range(k):
                        ctypes.memmove(int(ptrs[i * k + j]),
                                       stage.base + int(offs[(i - a) * k + j]), P)
            self._count(staged_pieces=(b - a) * k)
        return st, nb

    def _get_results(self, st, nb):
        ok = ((st == 0) & (nb == self._piece_bytes)).all(axis=1)
        damaged = (st == -errno.EIO).any(axis=1)
        res = ok.tolist()
        hits = int(ok.sum())
        dmg = int((damaged & ~ok).sum())
        self._count(get_keys=len(res), get_hits=hits, get_misses=len(res) - hits,
                    get_damaged=dmg)
        if dmg:
            self._log("damaged", logging.WARNING, "%d page(s) failed their checksum or "
                      "could not be read (EIO) in %s: treated as misses", dmg, self.model_dir)
        odd = st[(st != 0) & (st != -errno.ENOENT) & (st != -errno.EIO)]
        if odd.size:
            self._log("get-status", logging.WARNING, "read statuses %s in %s: treated as "
                      "misses", sorted(set(os.strerror(-int(s)) for s in odd)),
                      self.model_dir)
        return res

    def batch_set_v1(self, keys, host_indices, extra_info=None):
        """Store each key's page from the host pool. True: stored now or
        already stored (EEXIST: same key, same bytes)."""
        n = len(keys)
        try:
            if not self._ready or n == 0:
                return [False] * n
            if not self.is_writer:
                return [True] * n      # MLA: the writer rank stores the shared bytes
            names = [page_name(k) for k in keys]
            ptrs = self._piece_ptrs(keys, host_indices)
            flags = kvfs.WRITE_DURABLE if self.durable else 0
            if self._pool_region is not None:
                _, st, _ = self._call(_IOC_WRITE, names, ptrs - np.uint64(self._pool_base),
                                      flags=flags, data=self._pool_region)
            else:
                st = self._write_staged(names, ptrs, flags)
            good = ((st == 0) | (st == -errno.EEXIST)).all(axis=1)
            res = good.tolist()
            stored = int(good.sum())
            self._count(set_keys=n, set_stored=stored, set_failed=n - stored,
                        set_existing=int((st == -errno.EEXIST).all(axis=1).sum()),
                        set_nospace=int((st == -errno.ENOSPC).any(axis=1).sum()))
            bad = st[(st != 0) & (st != -errno.EEXIST)]
            if bad.size:
                self._log("set-status", logging.WARNING, "store statuses %s in %s: those "
                          "pages are not stored", sorted(set(os.strerror(-int(s)) for s in bad)),
                          self.model_dir)
            return res
        except Exception as e:
            self._failed("set", e)
            self._count(set_keys=n, set_failed=n)
            return [False] * n

    def _write_staged(self, names, ptrs, flags):
        n, k = len(names), self._pieces
        stage = self._staging()
        P = self._piece_bytes
        st = np.empty((n, k), np.int32)
        for a, b, stride in self._staged_chunks(n):
            offs = np.arange((b - a) * k, dtype=np.uint64) * np.uint64(stride)
            for i in range(a, b):
                for j in range(k):
                    ctypes.memmove(stage.base + int(offs[(i - a) * k + j]),
                                   int(ptrs[i * k + j]), P)
            _, st[a:b], _ = self._call(_IOC_WRITE, names[a:b], offs, flags=flags, data=stage)
            self._count(staged_pieces=(b - a) * k)
        return st

    # --- the deprecated per-tensor interface --------------------------------------
    # SGLang calls these only without interface_v1, which the constructor
    # requires: they answer "miss" rather than copy pages through Python.

    def get(self, key, target_location=None, target_sizes=None):
        self._log("legacy", logging.ERROR, "get() called: configure \"interface_v1\": 1")
        return None

    def batch_get(self, keys, target_locations=None, target_sizes=None):
        self._log("legacy", logging.ERROR, "batch_get() called: configure \"interface_v1\": 1")
        return [None] * len(keys)

    def set(self, key, value=None, target_location=None, target_sizes=None):
        self._log("legacy", logging.ERROR, "set() called: configure \"interface_v1\": 1")
        return False

    def batch_set(self, keys, values=None, target_locations=None, target_sizes=None):
        self._log("legacy", logging.ERROR, "batch_set() called: configure \"interface_v1\": 1")
        return False

    # --- housekeeping --------------------------------------------------------------

    def clear(self):
        """Remove every page of this rank's model directory."""
        if not self.model_dir:
            return False
        try:
            for layer in os.listdir(self.model_dir):
                ld = os.path.join(self.model_dir, layer)
                for name in os.listdir(ld):
                    try:
                        os.unlink(os.path.join(ld, name))
                    except FileNotFoundError:
                        pass
            return True
        except OSError as e:
            self._failed("clear", e)
            return False

    def stats(self):
        """Counters since start: exists_calls/keys/hits, get_keys/hits/
        misses/damaged, set_keys/stored/existing/failed/nospace,
        staged_pieces, and errors_<op> for whole-call failures."""
        with self._lock:
            return dict(self._counts)

    def close(self):
        """Unregister the regions and close the model directory."""
        self._ready = False
        with self._lock:
            scratches, self._scratches = self._scratches, []
        for s in scratches:
            for r in (s.ctl, s.staging):
                if r is not None:
                    r.close()
            s.ctl = s.staging = None
        if self._pool_region is not None:
            self._pool_region.close()
            self._pool_region = None
        if self._client is not None:
            self._client.close()
            self._client = None

    def _count(self, **kw):
        with self._lock:
            self._counts.update(kw)

    def _failed(self, op, e):
        self._count(**{"errors_" + op: 1})
        self._log("call-" + op, logging.WARNING, "%s failed as a whole in %s: %s "
                  "(every page of the call is a miss)", op, self.model_dir, e)
