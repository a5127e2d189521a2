#!/usr/bin/env python3
"""kvfs_engines.vllm against vLLM's own tiered offloading and a real mount.

The tier is created the way vLLM creates it: OffloadingSpecFactory makes
the TieringOffloadingSpec named in the extra config (vLLM's own, from an
OffloadingConfig as the OffloadingConnector builds it) with
{"type": "KvfsTier", "module_path": "kvfs_engines.vllm"} in its
secondary_tiers; spec.get_manager() makes the CPU primary tier (a
SharedOffloadRegion in /dev/shm) and the kvfs tier over it. The test then
makes the scheduler's calls on the TieringOffloadingManager, in the
connector's order: on_new_request, prepare_store (the worker's GPU->CPU
copy is the test writing the primary tier's rows), complete_store (which
cascades to kvfs), on_request_finished, on_schedule_end each step; and to
load, the connector's prefix lookup (every chunk up to the first MISS,
again each step while one is RETRY or HIT_PENDING: a kvfs HIT starts a
promotion), prepare_load, reading the primary rows (the worker's CPU->GPU
copy), complete_load. Checked:

  - a store, then a fresh engine's lookups and loads: bit-exact, zero copy
    (the primary tier's /dev/shm file registered), one page per chunk of
    the row's size; a view that is no file is staged and moves the same
    bytes (vLLM's TransferJob on the tier directly);
  - restart reuse: after a remount a fresh engine loads every chunk;
  - a damaged page is a miss (the load job reports the other keys in
    successful_keys), counted as damaged, and later lookups miss it;
  - a small --capacity evicts: evicted chunks miss, every hit is bit-exact;
  - with the daemon gone every call is a miss or a failed job, counted,
    never an exception; configuration mistakes fail at creation;
  - lookups are asynchronous: RETRY at first, never a call to kvfs on the
    scheduler thread, one LOOKUP for all of a request's new chunks on the
    tier's lookup thread, then HIT up to the first MISS; a failed load
    makes its chunks misses (the damaged-page test would loop otherwise).

Runs in the vllm engines venv (tools/engines_venv.sh vllm); exits 77 (skip)
saying why without it or without /dev/fuse. Environment as test_kvfs.py,
plus KVFS_VLLM_VENV (default /var/cache/kvfs/vllm-venv).
"""
import hashlib
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import engines_env  # noqa: E402

if __name__ == "__main__":
    engines_env.enter("vllm", """
import torch
from vllm.v1.kv_offload.tiering.spec import TieringOffloadingSpec
""")

import logging  # noqa: E402
import threading  # noqa: E402
import unittest  # noqa: E402
import uuid  # noqa: E402

import numpy as np  # noqa: E402
from vllm.v1.kv_offload.base import (LookupResult, ReqContext,  # noqa: E402
                                     ScheduleEndContext, make_offload_key)
from vllm.v1.kv_offload.config import (OffloadingCacheConfig, OffloadingConfig,  # noqa: E402
                                       OffloadingGroupConfig, OffloadingModelConfig,
                                       OffloadingParallelConfig)
from vllm.v1.kv_offload.factory import OffloadingSpecFactory  # noqa: E402
from vllm.v1.kv_offload.tiering.base import TransferJob  # noqa: E402
from vllm.v1.kv_offload.tiering.factory import SecondaryTierFactory  # noqa: E402
from vllm.v1.kv_offload.tiering.spec import TieringOffloadingSpec  # noqa: E402

from engines_env import damage  # noqa: E402

import kvfs_engines.vllm as kv  # noqa: E402

# A small model: 4 layers, 2 KV heads of 64, bf16, 16-token blocks, one
# block a chunk: a worker's block is 2 x 4 x 16 x 2 x 64 x 2 = 32 KiB.
LAYERS, HEADS, DIM, BLOCK_TOKENS = 4, 2, 64, 16
BLOCK = 2 * LAYERS * BLOCK_TOKENS * HEADS * DIM * 2
CHUNKS = 64
MODEL = "kvfs-test/tiny"


def offloading_config(mount, **tier):
    t = {"type": "KvfsTier", "module_path": "kvfs_engines.vllm", "kvfs_mount": mount}
    t.update(tier)
    t = {k: v for k, v in t.items() if v is not None}
    return OffloadingConfig(
        groups=(OffloadingGroupConfig(
            tokens_per_block=BLOCK_TOKENS, group_id=0,
            layer_names=tuple("model.layers.%d.self_attn.attn" % i for i in range(LAYERS))),),
        worker_kv_bytes_per_block=BLOCK, enable_kv_cache_events=False,
        extra_config={"spec_name": "TieringOffloadingSpec", "cpu_bytes_to_use": CHUNKS * BLOCK,
                      "secondary_tiers": [t]},
        engine_id="kvfs-test-%s" % uuid.uuid4().hex[:8],
        model=OffloadingModelConfig(name=MODEL, dtype="bfloat16"),
        cache=OffloadingCacheConfig(tokens_per_hash=BLOCK_TOKENS, blocks_per_chunk=1),
        parallel=OffloadingParallelConfig(
            rank=0, world_size=1, tp_size=1, pp_size=1, pcp_size=1, dcp_size=1,
            data_parallel_index=0, data_parallel_size=1, data_parallel_rank_local=None,
            is_parallelism_agnostic=False))


class Engine:
    """vLLM's scheduler side of the OffloadingConnector, as far as the
    offloading manager sees it; the workers' copies are the test's."""

    def __init__(self, mount, **tier):
        # What the OffloadingConnector does with its kv_connector_extra_config.
        self.spec = OffloadingSpecFactory.create_spec(offloading_config(mount, **tier))
        self.mgr = self.spec.get_manager()
        self.tier = self.mgr.secondary_tiers[0]
        view = self.mgr.primary_tier.get_kv_memoryview()
        self.rows = np.frombuffer(view, np.uint8).reshape(view.shape[0], -1)
        self.n = 0

    def step(self):
        self.mgr.on_schedule_end(ScheduleEndContext(new_req_ids=(), preempted_req_ids=()))

    def settle(self, timeout=30):
        end = time.monotonic() + timeout
        while self.mgr.has_pending_work() or self.tier.has_pending_work():
            if time.monotonic() > end:
                raise AssertionError("offloading jobs still pending after %d s" % timeout)
            self.step()
            time.sleep(0.005)
        self.step()

    def request(self):
        self.n += 1
        req = ReqContext(req_id="req-%d" % self.n)
        self.mgr.on_new_request(req)
        return req

    def store(self, keys, data):
        """A request computes these chunks: the GPU->CPU store, then the
        cascade to kvfs. Returns the keys the primary tier took."""
        req = self.request()
        out = self.mgr.prepare_store(keys, req)
        taken = list(out.keys_to_store) if out is not None else []
        if taken:
            ids = out.store_spec.chunk_ids
            for k, c in zip(taken, ids):
                self.rows[int(c)] = data[k]
            self.mgr.complete_store(taken, req)
        self.mgr.on_request_finished(req)
        self.settle()
        return taken

    def load(self, keys, timeout=30):
        """A request with these chunks as its prefix: the connector's
        lookups until none is RETRY or HIT_PENDING, then the CPU->GPU load
        of the hit prefix. Returns each key's bytes (None from the first
        miss on); self.lookup_steps is the steps the lookups took."""
        req = self.request()
        end = time.monotonic() + timeout
        self.lookup_steps = 0
        while True:
            n = self.prefix_lookup(keys, req)
            if n is not None:
                break
            if time.monotonic() > end:
                raise AssertionError("lookups still deferred after %d s" % timeout)
            self.step()
            self.lookup_steps += 1
            time.sleep(0.002)
        hits = keys[:n]
        got = [None] * len(keys)
        if hits:
            spec = self.mgr.prepare_load(hits, req)
            for i, c in enumerate(spec.chunk_ids):
                got[i] = self.rows[int(c)].copy()
            self.mgr.complete_load(hits, req)
        self.mgr.on_request_finished(req)
        self.settle()
        return got

    def prefix_lookup(self, keys, req):
        """One pass of the scheduler's _maximal_prefix_lookup: every key up
        to the first MISS (a RETRY does not stop the scan, so every new
        chunk is asked about in the same step); the hit prefix's length,
        or None when a lookup was deferred."""
        hits, defer = 0, False
        for k in keys:
            r = self.mgr.lookup(k, req)
            if r is LookupResult.MISS:
                break
            if r is LookupResult.RETRY:
                defer = True
                continue
            defer |= r is LookupResult.HIT_PENDING
            hits += 1
        return None if defer else hits

    def close(self):
        del self.rows           # vLLM unmaps the primary tier only once unused
        self.mgr.shutdown()


def tier_lookups(tier, keys, timeout=30):
    """Lookups on the tier alone, as one request: RETRY until the tier's
    lookup thread answered (each step's on_schedule_end posts them)."""
    req = ReqContext(req_id="tier-%s" % uuid.uuid4().hex[:8])
    end = time.monotonic() + timeout
    try:
        while True:
            res = [tier.lookup(k, req) for k in keys]
            if LookupResult.RETRY not in res:
                return res
            if time.monotonic() > end:
                raise AssertionError("tier lookups still RETRY after %d s" % timeout)
            tier.on_schedule_end(ScheduleEndContext(new_req_ids=(), preempted_req_ids=()))
            time.sleep(0.002)
    finally:
        tier.on_request_finished(req)


def chain_keys(n, seed=0):
    """OffloadKeys as vLLM makes them: a chained block hash and the group."""
    keys, prev = [], b"seed%d" % seed
    for i in range(n):
        prev = hashlib.sha256(prev + i.to_bytes(4, "little")).digest()
        keys.append(make_offload_key(prev, 0))
    return keys


def noise(keys, size, seed=0):
    rng = np.random.default_rng(seed)
    return {k: rng.integers(0, 256, size, dtype=np.uint8) for k in keys}


class VLLMTierTest(engines_env.MountedCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.keys = chain_keys(8)
        cls.data = None
    def test_1_roundtrip_zero_copy(self):
        e = Engine(self.m.mnt)
        try:
            self.assertIsInstance(e.spec, TieringOffloadingSpec)
            self.assertIsInstance(e.tier, kv.KvfsTier)
            self.assertIsNotNone(e.tier._file_off, "the primary tier file was not registered")
            page = e.rows.shape[1]
            type(self).data = noise(self.keys + chain_keys(3, seed=1), page)
            self.assertEqual(e.load(self.keys[:1]), [None])        # nothing stored yet
            self.assertEqual(e.store(self.keys, self.data), self.keys)
            s = e.tier.stats()
            self.assertEqual(s["stored_pages"], 8)
            self.assertEqual(s.get("staged_pages", 0), 0)
            md = e.tier.model_dir
            self.assertTrue(os.path.basename(md).startswith(
                "kvfs-test%2Ftiny.bf16.w1.direct.p16."), md)
            self.assertEqual(os.getxattr(md, "user.kvfs.page_bytes"), str(page).encode())
            self.assertEqual(os.stat(os.path.join(md, "00", os.fsdecode(kv.key_name(self.keys[0])))).st_size,
                             page)
        finally:
            e.close()
        e = Engine(self.m.mnt, locality="LOCAL")    # a fresh engine: its primary tier is empty
        try:
            self.assertEqual(e.tier.locality.value, "LOCAL")
            got = e.load(self.keys)
            for k, g in zip(self.keys, got):
                self.assertIsNotNone(g, "a stored chunk missed")
                self.assertTrue(np.array_equal(g, self.data[k]), "a chunk differs")
            s = e.tier.stats()
            self.assertEqual(s["loaded_pages"], 8)
            self.assertEqual(s["lookup_hits"], 8)
            # Storing chunks that kvfs has (from this engine's primary tier
            # after the promotion) is no error.
            self.assertEqual(e.store(self.keys[:2], self.data), [])
        finally:
            e.close()

    def test_2_staged_view(self):
        """A primary view that is no shared file is staged: same bytes."""
        spec = TieringOffloadingSpec(offloading_config(self.m.mnt))
        page = spec.kv_bytes_per_chunk
        rows = np.zeros((CHUNKS, page), np.uint8)
        tier = SecondaryTierFactory.create_secondary_tier(
            spec.secondary_tier_configs[0], memoryview(rows), spec)
        try:
            self.assertIsNone(tier._file_off)
            ids = np.arange(10, 18)
            tier.submit_load(TransferJob(job_id=1, keys=self.keys, chunk_ids=ids,
                                         is_promotion=True, req_context=ReqContext("r")))
            more = chain_keys(3, seed=1)
            for i, k in enumerate(more):
                rows[30 + i] = self.data[k]
            tier.submit_store(TransferJob(job_id=2, keys=more, chunk_ids=np.arange(30, 33),
                                          is_promotion=False, req_context=ReqContext("r")))
            tier.drain_jobs()
            res = {r.job_id: r for r in tier.get_finished_jobs()}
            self.assertTrue(res[1].success and res[2].success, res)
            for i, k in enumerate(self.keys):
                self.assertTrue(np.array_equal(rows[10 + i], self.data[k]))
            self.assertEqual(tier_lookups(tier, more[2:]), [LookupResult.HIT])
            self.assertEqual(tier.stats()["staged_pages"], 11)
        finally:
            tier.shutdown()

    def test_3_restart_reuse(self):
        self.remount()
        e = Engine(self.m.mnt)
        try:
            keys = self.keys + chain_keys(3, seed=1)
            got = e.load(keys)
            for k, g in zip(keys, got):
                self.assertIsNotNone(g, "a chunk missed after the remount")
                self.assertTrue(np.array_equal(g, self.data[k]))
        finally:
            e.close()

    def test_4_damaged_page(self):
        e = Engine(self.m.mnt)
        try:
            damage(os.path.join(e.tier.model_dir, "00", os.fsdecode(kv.key_name(self.keys[3]))))
            got = e.load(self.keys)
            self.assertEqual([g is not None for g in got], [True] * 3 + [False] * 5)
            for i in range(3):
                self.assertTrue(np.array_equal(got[i], self.data[self.keys[i]]))
            s = e.tier.stats()
            self.assertEqual(s["load_damaged"], 1)
            self.assertGreaterEqual(s["load_misses"], 1)
            # The damaged page is gone: the tier answers MISS from now on,
            # and a recomputed chunk is stored again.
            self.assertEqual(tier_lookups(e.tier, self.keys[3:5]),
                             [LookupResult.MISS, LookupResult.HIT])
        finally:
            e.close()
        e = Engine(self.m.mnt)
        try:
            e.store([self.keys[3]], self.data)
            self.assertEqual(e.tier.stats()["stored_pages"], 1)
        finally:
            e.close()

    def test_5_daemon_gone(self):
        """Every call is a miss or a failed job, counted; none raises."""
        e = Engine(self.m.mnt)
        self.m.daemon.kill()            # the daemon dies under a live tier
        self.m.daemon.wait()
        try:
            self.assertEqual(tier_lookups(e.tier, self.keys[:1]), [LookupResult.MISS])
            self.assertEqual(e.load(self.keys), [None] * 8)
            e.store(self.keys[:4], self.data)
            s = e.tier.stats()
            self.assertGreaterEqual(s.get("errors_lookup", 0), 1)
            self.assertGreaterEqual(s.get("errors_store", 0), 1)
            ids = np.arange(4)
            e.tier.submit_load(TransferJob(job_id=99, keys=self.keys[:4], chunk_ids=ids,
                                           is_promotion=True, req_context=ReqContext("r")))
            e.tier.drain_jobs()
            res = list(e.tier.get_finished_jobs())
            self.assertEqual([(r.job_id, r.success) for r in res], [(99, False)])
        finally:
            e.close()
            self.remount()

    def test_6_config_errors(self):
        """Mistakes fail when vLLM creates the tier, with the reason."""
        with self.assertRaisesRegex(ValueError, "kvfs_mount"):
            Engine(None)
        with self.assertRaises(OSError):        # not a kvfs mount
            Engine(self.m.tmp, kvfs_model="plain-dir")


    def test_7_async_lookup(self):
        """No lookup calls kvfs on the scheduler thread: a request's new
        chunks are RETRY, the step's end posts them to the tier's lookup
        thread, which makes one LOOKUP of all of them (vLLM's
        AsyncLookupManager protocol); then HITs up to the first MISS."""
        e = Engine(self.m.mnt)
        calls = []
        real = e.tier.store.lookup

        def spy(names):
            calls.append((threading.current_thread() is threading.main_thread(), len(names)))
            return real(names)

        e.tier.store.lookup = spy
        keys = self.keys + chain_keys(2, seed=9)        # 8 stored, then 2 never stored
        try:
            req = e.request()
            self.assertEqual([e.mgr.lookup(k, req) for k in keys], [LookupResult.RETRY] * 10)
            self.assertEqual(calls, [], "a lookup asked kvfs before the step ended")
            e.step()
            end = time.monotonic() + 10
            while not calls and time.monotonic() < end:
                time.sleep(0.005)
            steps, n = 1, None
            while n is None and steps < 1000:
                n = e.prefix_lookup(keys, req)
                if n is None:
                    e.step()
                    steps += 1
                    time.sleep(0.002)
            self.assertEqual(calls, [(False, 10)], "not one LOOKUP off the scheduler thread")
            self.assertEqual(n, 8)
            spec = e.mgr.prepare_load(keys[:8], req)
            for k, c in zip(keys, spec.chunk_ids):
                self.assertTrue(np.array_equal(e.rows[int(c)], self.data[k]))
            e.mgr.complete_load(keys[:8], req)
            e.mgr.on_request_finished(req)
            e.settle()
            s = e.tier.stats()
            self.assertEqual((s["lookup_calls"], s["lookups"], s["lookup_hits"]), (1, 10, 8))
            self.assertEqual(s["loaded_pages"], 8)
        finally:
            e.close()


class CapacityTest(unittest.TestCase):
    """A store of 1 MiB holds about 30 of these 32 KiB pages: storing 60
    evicts the oldest, which then miss."""

    def test_evictions_are_misses(self):
        with engines_env.small_store(self, "1M") as m:
            e = Engine(m.mnt)
            keys = chain_keys(60, seed=2)
            data = noise(keys, e.rows.shape[1], seed=2)
            for a in range(0, 60, 6):       # requests of a few chunks each
                e.store(keys[a:a + 6], data)
            e.close()
            e = Engine(m.mnt)               # a fresh primary tier: kvfs only
            hits = [r is LookupResult.HIT for r in tier_lookups(e.tier, keys)]
            self.assertIn(False, hits, "nothing was evicted from a 1 MiB store")
            self.assertIn(True, hits)
            tail = [k for k, h in zip(keys, hits) if h][-4:]
            got = e.load(tail)
            for k, g in zip(tail, got):
                self.assertIsNotNone(g)
                self.assertTrue(np.array_equal(g, data[k]))
            s = e.tier.stats()
            self.assertEqual(s.get("errors_lookup", 0), 0)
            print("capacity: %d/60 chunks still stored" % sum(hits))
            e.close()


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING)
    unittest.main(verbosity=2)
