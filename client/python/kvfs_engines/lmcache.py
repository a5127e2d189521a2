"""LMCache L2 storage on kvfs: a connector for LMCache's native_plugin L2
adapter.

LMCache (0.5) loads it by module path, with no change to LMCache:

    lmcache server ... --l2-adapter '{"type": "native_plugin",
        "module_path": "kvfs_engines.lmcache", "class_name": "KvfsL2Connector",
        "adapter_params": {"kvfs_mount": "/mnt/kvfs", "dtype": "bf16"}}'

(docs/engine-backends.md, "LMCache"). LMCache's factory constructs
``KvfsL2Connector(**adapter_params)`` and wraps it in its
NativeConnectorL2Adapter, which calls ``submit_batch_set`` (store),
``submit_batch_exists`` (lookup), ``submit_batch_get`` (load) and
``submit_batch_delete`` (eviction) with the keys as strings
(``model@kv_rank@group@chunk_hash[@salt]``) and each object's bytes as a
memoryview, waits for ``event_fd()`` to be readable, and collects
``drain_completions()``: ``(future_id, ok, error, per-key bools)``.

Layout in kvfs. One LMCache object (a chunk of tokens, every layer: up to
80 MiB for a 70B model) is one kvfs page, in layer 00 of
``MOUNT/<model>.<dtype>.kr<kv_rank>.<layout>`` (the key's model and
kv_rank, which identifies the rank's slice; dtype and layout come from
adapter_params, as LMCache does not hand them to a connector), named
``<group>@<chunk hash>[@salt]``. The directory has no geometry: the last
chunk of a prompt is shorter than the others, so pages have the size of
their object, up to the daemon's ``-o max_page`` (64 MiB unless raised:
mount with ``-o max_page=128M`` for 80 MiB chunks; a larger object's store
fails with EFBIG, logged and counted, and it stays a miss).

Data path. LMCache's L1 objects live in its own arena, which is not a file
kvfs can register: pages are staged through a region of the connector's
with one memcpy each way. Correct, slower than a registered pool.

Transfers run on the connector's I/O threads: submit_* queue a call and
return its id at once; each finished call is a completion plus a count on
the eventfd. Nothing raises into LMCache: a call that fails as a whole is
(id, False, reason, None); per key, a miss (never stored, evicted) or a
damaged page (EIO: checksum mismatch, counted as damaged and removed, so it
is stored again once recomputed) is False. stats() has the counters.
"""

import collections
import errno
import logging
import os
import threading

import kvfs_engines._common as com
from _kvfs_util import memory_of

__all__ = ["KvfsL2Connector", "split_key"]

logger = logging.getLogger(__name__)

WHO = "kvfs LMCache connector"
_SEP = "@"


def split_key(key):
    """(model directory parts, page name) of an LMCache key string."""
    parts = str(key).split(_SEP)
    if len(parts) < 4:
        raise ValueError("not an LMCache object key: %r" % (key,))
    model, rank = parts[0], parts[1]
    return (model, rank), com.page_name(_SEP.join(parts[2:]))


class KvfsL2Connector:
    """The native client LMCache's native_plugin L2 adapter drives.

    adapter_params:
      kvfs_mount        the kvfs mount point (or $KVFS_MOUNT); required
      dtype, layout     put in the model directory's name (default "any",
                        "lmcache"): set them to what the engine stores
      kvfs_model        one model directory for every key instead
      kvfs_durable      store pages durably (fsync'ed) before a set
                        completes (default false)
      kvfs_staging_mib  staging per I/O thread (default 256; at least one
                        object: it grows to fit a larger one)
      io_threads        I/O threads (default 2)
    """

    def __init__(self, kvfs_mount=None, dtype="any", layout="lmcache", kvfs_model=None,
                 kvfs_durable=False, kvfs_staging_mib=256, io_threads=2):
        self.mount = kvfs_mount or os.environ.get("KVFS_MOUNT")
        if not self.mount:
            raise ValueError("%s: set \"kvfs_mount\" in the adapter's adapter_params "
                             "(or $KVFS_MOUNT)" % WHO)
        if not os.path.isdir(self.mount):
            raise ValueError("%s: kvfs_mount %r is not a directory" % (WHO, self.mount))
        # as the other backends refuse at startup: a directory that is not
        # (yet) a kvfs mount would take the models as plain directories
        if not os.path.exists(os.path.join(self.mount, ".kvfs", "stats")):
            raise ValueError("%s: kvfs_mount %r is not a kvfs mount (no .kvfs/stats "
                             "there; is the daemon running?)" % (WHO, self.mount))
        self.dtype, self.layout = com.dtype_tag(dtype), str(layout)
        self.model_override = kvfs_model
        self.durable = str(kvfs_durable).lower() in ("1", "true", "yes")
        self.staging_bytes = int(float(kvfs_staging_mib) * (1 << 20)) or (256 << 20)
        self._stores = {}           # model directory -> PageStore
        self._stores_lock = threading.Lock()
        self._efd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        self._done = collections.deque()
        self._next = 0
        self._id_lock = threading.Lock()
        self._counts = com.Counters()
        self._log = com.RateLog(logger)
        self._closed = False
        self._io = com.Workers(int(io_threads), self._run_call, "kvfs-lmcache-io")
        logger.info("kvfs: LMCache L2 connector on %s (staged: one memcpy per object)",
                    self.mount)

    # --- what NativeConnectorL2Adapter calls -------------------------------------

    def event_fd(self):
        return self._efd

    def submit_batch_set(self, keys, memoryviews):
        return self._submit("set", list(keys), list(memoryviews))

    def submit_batch_get(self, keys, memoryviews):
        return self._submit("get", list(keys), list(memoryviews))

    def submit_batch_exists(self, keys):
        return self._submit("exists", list(keys), None)

    def submit_batch_delete(self, keys):
        return self._submit("delete", list(keys), None)

    def drain_completions(self):
        """Every completion since the last call: (future_id, ok, error,
        per-key bools or None)."""
        try:
            os.eventfd_read(self._efd)
        except BlockingIOError:
            pass
        return com.drain(self._done)

    def close(self):
        if self._closed:
            return
        self._closed = True
        self._io.stop()
        with self._stores_lock:
            stores, self._stores = list(self._stores.values()), {}
        for s in stores:
            s.close()
        os.close(self._efd)

    def stats(self):
        """Counters since start: set_keys/stored/existing/failed/toobig,
        exists_keys/hits, get_keys/hits/misses/damaged, delete_keys/
        deleted, staged_bytes, and errors_<op> for whole-call failures."""
        return self._counts.snapshot()

    # --- internals -------------------------------------------------------------------

    def _submit(self, op, keys, views):
        with self._id_lock:
            self._next += 1
            fid = self._next
        if self._closed:
            self._complete(fid, False, "kvfs connector closed", None)
        else:
            self._io.put((fid, op, keys, views))
        return fid

    def _complete(self, fid, ok, error, bools):
        self._done.append((fid, ok, error, bools))
        try:
            os.eventfd_write(self._efd, 1)
        except OSError:
            pass

    def _run_call(self, item):
        fid, op, keys, views = item
        try:
            bools = getattr(self, "_do_" + op)(keys, views)
            self._complete(fid, all(bools) if op in ("set", "delete") else True, "", bools)
        except Exception as e:
            self._counts.add(**{"errors_" + op: 1})
            self._log("call-" + op, logging.WARNING, "%s of %d key(s) failed as a "
                      "whole: %s (all misses)", op, len(keys), e)
            self._complete(fid, False, "%s: %s" % (type(e).__name__, e), None)

    def _store_for(self, dir_parts):
        if self.model_override:
            name = self.model_override
        else:
            model, rank = dir_parts
            name = com.dir_name([model, self.dtype, "kr" + rank, self.layout])
        with self._stores_lock:
            s = self._stores.get(name)
            if s is None:
                path = os.path.join(self.mount, name)
                com.make_model_dir(path, 1, None, WHO)
                s = self._stores[name] = com.PageStore(path, self.staging_bytes)
            return s

    def _grouped(self, keys):
        """Keys grouped by model directory: {store: [(index, page name)]}."""
        groups = {}
        for i, k in enumerate(keys):
            parts, name = split_key(k)
            groups.setdefault(self._store_for(parts), []).append((i, name))
        return groups

    def _do_exists(self, keys, _):
        out = [False] * len(keys)
        for store, items in self._grouped(keys).items():
            st, _ = store.lookup([nm for _, nm in items])
            for (i, _), s in zip(items, st):
                out[i] = int(s) == 0
        self._counts.add(exists_keys=len(keys), exists_hits=sum(out))
        return out

    def _do_set(self, keys, views):
        out = [False] * len(keys)
        for store, items in self._grouped(keys).items():
            mem = [memory_of(views[i]) for i, _ in items]
            st, _ = store.write_from([nm for _, nm in items], [a for a, _ in mem],
                                     [n for _, n in mem], self.durable)
            self._counts.add(staged_bytes=sum(n for _, n in mem))
            for (i, _), s in zip(items, st):
                out[i] = int(s) in (0, -errno.EEXIST)
            codes = [int(s) for s in st]
            self._counts.add(set_keys=len(items), set_stored=codes.count(0),
                             set_existing=codes.count(-errno.EEXIST),
                             set_failed=sum(1 for c in codes if c not in (0, -errno.EEXIST)),
                             set_toobig=codes.count(-errno.EFBIG))
            bad = set(c for c in codes if c not in (0, -errno.EEXIST))
            if -errno.EFBIG in bad:
                self._log("toobig", logging.WARNING, "objects larger than the daemon's "
                          "page limit were not stored in %s: mount with -o max_page=SIZE "
                          "(at least the LMCache chunk's bytes)", store.model_dir)
            if bad:
                self._log("set-status", logging.WARNING, "store statuses %s in %s: those "
                          "objects are not stored", sorted(os.strerror(-c) for c in bad),
                          store.model_dir)
        return out

    def _do_get(self, keys, views):
        out = [False] * len(keys)
        for store, items in self._grouped(keys).items():
            mem = [memory_of(views[i]) for i, _ in items]
            names = [nm for _, nm in items]
            st, nb = store.read_to(names, [a for a, _ in mem], [n for _, n in mem])
            self._counts.add(staged_bytes=sum(n for _, n in mem))
            dmg = []
            for j, (i, _) in enumerate(items):
                out[i] = int(st[j]) == 0 and int(nb[j]) == mem[j][1]
                if int(st[j]) == -errno.EIO:
                    dmg.append(names[j])
            hits = sum(out[i] for i, _ in items)
            self._counts.add(get_keys=len(items), get_hits=hits,
                             get_misses=len(items) - hits, get_damaged=len(dmg))
            if dmg:
                self._log("damaged", logging.WARNING, "%d object(s) failed their checksum "
                          "or could not be read (EIO) in %s: misses, removed", len(dmg),
                          store.model_dir)
                for nm, e in store.drop(dmg):
                    self._log("drop", logging.WARNING, "removing damaged page %s: %s",
                              os.fsdecode(nm), e)
        return out

    def _do_delete(self, keys, _):
        out = [False] * len(keys)
        for store, items in self._grouped(keys).items():
            failed = {nm for nm, _ in store.drop([nm for _, nm in items])}
            for i, nm in items:
                out[i] = nm not in failed
        self._counts.add(delete_keys=len(keys), deleted=sum(out))
        return out
