"""vLLM KV offloading on kvfs: a secondary tier of vLLM's tiered offloading.

vLLM (0.33) loads it by module path, with no change to vLLM:

    vllm serve MODEL --kv-transfer-config '{"kv_connector": "OffloadingConnector",
      "kv_role": "kv_both", "kv_connector_extra_config": {
        "spec_name": "TieringOffloadingSpec", "cpu_bytes_to_use": 8589934592,
        "secondary_tiers": [{"type": "KvfsTier", "module_path": "kvfs_engines.vllm",
                             "kvfs_mount": "/mnt/kvfs"}]}}'

(docs/engine-backends.md, "vLLM"). TieringOffloadingSpec builds the CPU
primary tier (a SharedOffloadRegion: one /dev/shm file mapped by the
scheduler and every worker) and then ``KvfsTier(offloading_spec=...,
primary_kv_view=..., tier_type="KvfsTier", **the rest of the tier's dict)``.
From then on the scheduler calls lookup (per chunk), submit_store (cascade:
primary -> kvfs, after a chunk reached the primary tier), submit_load
(promotion: kvfs -> primary, after a lookup HIT), get_finished_jobs,
on_schedule_end, on_request_finished, drain_jobs (cache reset) and shutdown.

Lookups never wait for kvfs on the scheduler thread. They use vLLM's own
asynchronous lookup protocol (AsyncLookupManager, as its fs tier does): a
chunk not yet asked about is RETRY; on_schedule_end posts the step's new
chunks to the tier's lookup thread, which makes one LOOKUP call per
request for all of them; a later step's lookup returns the HIT or MISS.
vLLM's scheduler scans every chunk of a request on RETRY (it stops only at
a MISS), so a prompt of N stored chunks costs one LOOKUP of N names and
one extra step, not N round trips to the daemon on the scheduler thread.
A load that fails marks its failed chunks a MISS in that cache, so the
scheduler does not promote them again.

Layout in kvfs. One chunk of the primary tier (one row of its memoryview:
every layer, every worker's slot, ``blocks_per_chunk`` blocks) is one kvfs
page, named after its OffloadKey (block hash hex + ``_g`` + KV-cache group),
in layer 00 of ``MOUNT/<model>.<dtype>.<shard>.<layout>.p<tokens>.<digest>``;
shard is ``w<N>`` (a row holds the slots of all N workers) or ``1copy``
(replicated layout), tokens the tokens of a chunk, digest a hash of what
else changes the bytes (groups, layer names, canonical format). The
directory's geometry is the row size, so a page of any other size is
refused.

Data path. The primary tier's /dev/shm file is registered as a kvfs region
and pages move between it and the SSD with no copy in Python (offset =
chunk id x row size). Where it cannot be registered (split into several
files, or a view that is not that file's mapping) pages are staged through
a region of the tier's with one memcpy each: correct, slower, and logged.

Transfers run on the tier's own I/O thread(s): submit_* only queue a job;
get_finished_jobs hands back what finished. Failures never raise into vLLM:
a lookup that fails is a MISS; a load that fails (evicted since the lookup,
a checksum mismatch: EIO, counted as damaged) reports the keys that did
arrive in successful_keys and the rest are recomputed; a store that fails
is reported unsuccessful. Everything is counted in stats().
"""

import collections
import errno
import hashlib
import json
import logging
import os
import threading
import time

import numpy as np

from kvfs_engines._common import (Counters, PageStore, RateLog, Workers, dir_name, drain,
                                  dtype_tag, make_model_dir, mmap_base, page_name)

from vllm.v1.kv_offload.base import (Locality, LookupResult, Medium,
                                     RequestOffloadingContext)
from vllm.v1.kv_offload.tiering.async_lookup import AsyncLookupManager
from vllm.v1.kv_offload.tiering.base import JobResult, SecondaryTierManager

__all__ = ["KvfsTier", "key_name", "model_dir_name"]

logger = logging.getLogger(__name__)

WHO = "kvfs vLLM tier"


def key_name(key):
    """The kvfs page name of an OffloadKey (block hash + 4-byte group)."""
    key = bytes(key)
    return page_name("%s_g%d" % (key[:-4].hex(), int.from_bytes(key[-4:], "big")))


def model_dir_name(config, page_bytes):
    """The model directory of this engine's primary-tier rows."""
    par = config.parallel
    shard = "1copy" if config.replicated_layout else "w%d" % par.world_size
    if config.canonical_layout:
        layout = "canonical"
    else:
        layout = (config.kv_cache_layout or "direct").lower()
    tokens = config.groups[0].tokens_per_block * config.cache.blocks_per_chunk \
        if config.groups else config.cache.blocks_per_chunk
    fields = {"groups": [[g.tokens_per_block, list(g.layer_names)] for g in config.groups],
              "tokens_per_hash": config.cache.tokens_per_hash,
              "blocks_per_chunk": config.cache.blocks_per_chunk,
              "tp": par.tp_size, "pp": par.pp_size, "pcp": par.pcp_size,
              "dcp": par.dcp_size, "layout": config.kv_cache_layout,
              "canonical": config.canonical_layout, "page_bytes": page_bytes}
    digest = hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:12]
    return dir_name([config.model.name or "model", dtype_tag(config.model.dtype), shard,
                     layout, "p%d" % tokens, digest])


class _Lookups(AsyncLookupManager):
    """vLLM's lookup cache and thread; batch_lookup runs on that thread
    with one request's new chunks of one step."""

    def __init__(self, tier):
        self._tier = tier
        super().__init__(tier_type=tier.tier_type)

    def batch_lookup(self, keys, req_context):
        return self._tier._batch_lookup(keys)


class KvfsTier(SecondaryTierManager):
    """A vLLM secondary tier on a kvfs mount; see the module documentation.

    Tier config keys (besides vLLM's type and module_path):
      kvfs_mount        the kvfs mount point (or $KVFS_MOUNT); required
      kvfs_model        model directory name, instead of the derived one
      kvfs_durable      store pages durably (fsync'ed) before a store job
                        finishes (default false: visible at once, written
                        back by the daemon)
      kvfs_staging_mib  staging per I/O thread when the primary tier's file
                        cannot be registered (default 64)
      io_threads        I/O threads (default 2: a load need not wait for
                        a store)
      locality          "LOCAL" or "REMOTE", as for vLLM's fs tier (KV
                        events)
    """

    medium = Medium.STORAGE

    def __init__(self, offloading_spec, primary_kv_view, tier_type, kvfs_mount=None,
                 kvfs_model=None, kvfs_durable=False, kvfs_staging_mib=64, io_threads=2,
                 locality=None, backpressure_detector=None):
        super().__init__(offloading_spec, primary_kv_view, tier_type, backpressure_detector)
        self.locality = Locality(locality) if locality is not None else None
        mount = kvfs_mount or os.environ.get("KVFS_MOUNT")
        if not mount:
            raise ValueError("%s: set \"kvfs_mount\" in the tier's entry of "
                             "secondary_tiers (or $KVFS_MOUNT)" % WHO)
        if not os.path.isdir(mount):
            raise ValueError("%s: kvfs_mount %r is not a directory" % (WHO, mount))
        self.page_bytes = int(primary_kv_view.strides[0])
        self.num_chunks = int(primary_kv_view.shape[0])
        self.durable = str(kvfs_durable).lower() in ("1", "true", "yes")
        self.model_dir = os.path.join(
            mount, kvfs_model or model_dir_name(offloading_spec.config, self.page_bytes))
        make_model_dir(self.model_dir, 1, self.page_bytes, WHO)
        self.store = PageStore(self.model_dir, int(float(kvfs_staging_mib) * (1 << 20))
                               or (64 << 20))
        self._view_addr = int(np.frombuffer(primary_kv_view, np.uint8).ctypes.data) \
            if not primary_kv_view.readonly else None
        self._file_off = None      # offset of chunk 0 in the registered file
        self._register(offloading_spec)
        self._counts = Counters()
        self._log = RateLog(logger)
        self._bad = set()          # damaged pages that could not be removed
        self._finished = collections.deque()
        self._load_keys = {}       # job id -> keys of a load (scheduler thread only)
        self._pending = 0
        self._idle = threading.Condition()
        self._io = Workers(int(io_threads), self._run_job, "kvfs-vllm-io")
        self._lookups = _Lookups(self)
        logger.info("kvfs: vLLM tier in %s: pages of %d bytes (%d chunks), %s",
                    self.model_dir, self.page_bytes, self.num_chunks,
                    "primary tier file registered (zero copy)" if self._file_off is not None
                    else "staged through a region (one memcpy per page)")

    def _register(self, spec):
        """Register the primary tier's /dev/shm file (TieringOffloadingSpec
        keeps it as _scheduler_mmap), or fall back to staging."""
        region = getattr(spec, "_scheduler_mmap", None)
        fd = getattr(region, "fd", None)
        mm = getattr(region, "mmap_obj", None)
        why = None
        if self._view_addr is None:
            why = "the primary tier's view is read-only"
        elif fd is None or mm is None:
            why = "the primary tier has no shared file (not TieringOffloadingSpec?)"
        elif len(getattr(region, "_segments", [None])) != 1:
            why = "the primary tier spans several shared files"
        else:
            base = mmap_base(mm)
            end = self._view_addr + self.num_chunks * self.page_bytes
            if not (base <= self._view_addr and end <= base + len(mm)):
                why = "the primary tier's view is not its shared file's mapping"
            else:
                try:
                    self.store.register_fd(fd)
                    self._file_off = self._view_addr - base
                except OSError as e:
                    why = "registering %s failed: %s" % (getattr(region, "mmap_path", fd), e)
        if why:
            if self._view_addr is None:
                raise ValueError("%s: %s" % (WHO, why))
            logger.warning("kvfs: %s; pages are staged through a region with one memcpy "
                           "each (slower)", why)

    # --- the scheduler's calls -------------------------------------------------

    def on_new_request(self, req_context):
        return RequestOffloadingContext()

    def lookup(self, key, req_context):
        """HIT or MISS once the lookup thread answered, RETRY until then
        (never a call to kvfs on the scheduler thread)."""
        try:
            r = self._lookups.lookup(key, req_context)
        except Exception as e:
            self._failed("lookup", e)
            return LookupResult.MISS
        if r is None:
            return LookupResult.RETRY
        return LookupResult.HIT if r else LookupResult.MISS

    def _batch_lookup(self, keys):
        """One LOOKUP for a request's chunks (on the lookup thread): a list
        of bools; a failure is all misses, counted."""
        try:
            names = [key_name(k) for k in keys]
            st, _ = self.store.lookup(names)
            hits = [int(s) == 0 and nm not in self._bad for nm, s in zip(names, st)]
            self._counts.add(lookup_calls=1, lookups=len(keys), lookup_hits=sum(hits))
            odd = set(int(s) for s in st if int(s) not in (0, -errno.ENOENT))
            if odd:
                self._log("lookup-status", logging.WARNING, "lookup in %s: %s (misses)",
                          self.model_dir, sorted(os.strerror(-s) for s in odd))
            return hits
        except Exception as e:
            self._failed("lookup", e)
            return [False] * len(keys)

    def on_schedule_end(self, context):
        self._lookups.flush()

    def on_request_finished(self, req_context):
        self._lookups.cleanup(req_context.req_id)

    def submit_store(self, job_metadata):
        self._submit("store", job_metadata)

    def submit_load(self, job_metadata):
        self._load_keys[job_metadata.job_id] = list(job_metadata.keys)
        self._submit("load", job_metadata)

    def _submit(self, op, job):
        with self._idle:
            self._pending += 1
        self._io.put((op, job))

    def get_finished_jobs(self):
        done = drain(self._finished)
        for r in done:
            keys = self._load_keys.pop(r.job_id, None)
            if keys is not None and not r.success:
                # A cached HIT would have the scheduler promote these again
                # and again (vLLM #49176): they are misses from now on.
                ok = set(r.successful_keys or ())
                self._lookups.mark_miss([k for k in keys if k not in ok])
        return done

    def has_pending_work(self):
        return self._pending > 0

    def drain_jobs(self):
        with self._idle:
            while self._pending > 0:
                self._idle.wait(1.0)

    def shutdown(self):
        self._lookups.shutdown()
        self._io.stop()
        self.store.close()

    def stats(self):
        """Counters since start: lookup_calls (LOOKUPs made), lookups
        (chunks they answered), lookup_hits, store_jobs,
        stored_pages, existing_pages, store_failed, load_jobs,
        loaded_pages, load_misses, load_damaged, staged_pages, and
        errors_<op> for calls that failed as a whole."""
        return self._counts.snapshot()

    # --- the I/O threads ---------------------------------------------------------

    def _run_job(self, item):
        op, job = item
        t0 = time.monotonic()
        try:
            result = self._do_store(job) if op == "store" else self._do_load(job)
        except Exception as e:
            self._failed(op, e)
            result = JobResult(job_id=job.job_id, success=False)
        result.transfer_time = time.monotonic() - t0
        self._finished.append(result)
        with self._idle:
            self._pending -= 1
            self._idle.notify_all()

    def _move(self, op, names, chunk_ids):
        n = len(names)
        lens = [self.page_bytes] * n
        rows = [int(c) * self.page_bytes for c in chunk_ids]
        if self._file_off is not None:
            offs = [self._file_off + r for r in rows]
            if op == "load":
                return self.store.read_at(names, offs, lens)
            return self.store.write_at(names, offs, lens, self.durable)
        self._counts.add(staged_pages=n)
        addrs = [self._view_addr + r for r in rows]
        if op == "load":
            return self.store.read_to(names, addrs, lens)
        return self.store.write_from(names, addrs, lens, self.durable)

    def _do_store(self, job):
        keys = list(job.keys)
        names = [key_name(k) for k in keys]
        st, _ = self._move("store", names, job.chunk_ids)
        ok = (st == 0) | (st == -errno.EEXIST)
        if self._bad:
            self._bad.difference_update(nm for nm, s in zip(names, st) if s == 0)
        n, stored = len(keys), int(ok.sum())
        self._counts.add(store_jobs=1, stored_pages=int((st == 0).sum()),
                         existing_pages=int((st == -errno.EEXIST).sum()),
                         store_failed=n - stored)
        bad = st[~ok]
        if bad.size:
            self._log("store-status", logging.WARNING, "store statuses %s in %s: those "
                      "chunks are not stored", sorted(set(os.strerror(-int(s)) for s in bad)),
                      self.model_dir)
        return JobResult(job_id=job.job_id, success=stored == n,
                         transfer_bytes=stored * self.page_bytes)

    def _do_load(self, job):
        keys = list(job.keys)
        names = [key_name(k) for k in keys]
        st, nb = self._move("load", names, job.chunk_ids)
        ok = (st == 0) & (nb == self.page_bytes)
        n, got = len(keys), int(ok.sum())
        dmg = int((st == -errno.EIO).sum())
        self._counts.add(load_jobs=1, loaded_pages=got, load_misses=n - got, load_damaged=dmg)
        if dmg:
            self._drop([nm for nm, s in zip(names, st) if s == -errno.EIO])
            self._log("damaged", logging.WARNING, "%d page(s) failed their checksum or could "
                      "not be read (EIO) in %s: treated as misses", dmg, self.model_dir)
        odd = st[(st != 0) & (st != -errno.ENOENT) & (st != -errno.EIO)]
        if odd.size:
            self._log("load-status", logging.WARNING, "read statuses %s in %s: treated as "
                      "misses", sorted(set(os.strerror(-int(s)) for s in odd)), self.model_dir)
        if got == n:
            return JobResult(job_id=job.job_id, success=True,
                             transfer_bytes=got * self.page_bytes)
        good = tuple(k for k, g in zip(keys, ok) if g)
        return JobResult(job_id=job.job_id, success=False, successful_keys=good or None,
                         transfer_bytes=got * self.page_bytes)

    def _drop(self, names):
        """Remove damaged pages; one that cannot be removed is a miss."""
        for nm, e in self.store.drop(names):
            self._bad.add(nm)
            self._log("drop", logging.WARNING, "removing damaged page %s from %s: %s",
                      os.fsdecode(nm), self.model_dir, e)

    def _failed(self, op, e):
        self._counts.add(**{"errors_" + op: 1})
        self._log("call-" + op, logging.WARNING, "%s failed as a whole in %s: %s (a miss)",
                  op, self.model_dir, e)
