#!/usr/bin/env python3
"""kvfs_engines.sglang against SGLang's own classes and a real mount.

The backend is created the way SGLang creates a dynamic HiCache L3
backend (StorageBackendFactory.create_backend("dynamic", config, pool),
then register_mem_pool_host, as HiCacheController.attach_storage_backend
does), over a host pool that is SGLang's MHATokenToKVPoolHost with SGLang's
"shm" allocator (a memfd), on CPU. Checked:

  - batch_set_v1 / batch_exists / batch_get_v1 round trip, bit-exact
    (compared with SGLang's own get_data_page), zero copy with the shm pool
    and staged (one memcpy) with the default allocator, the two writing the
    same bytes; keys with '/' and keys over 255 bytes;
  - restart reuse: after a remount a fresh pool and backend find the pages;
  - a damaged page (a byte flipped in its segment file) is a miss, counted
    as damaged, and its neighbours still load;
  - a store with a small --capacity evicts: evicted pages are misses
    (exists stops, get says False), every hit is bit-exact, nothing raises;
  - with the daemon gone every call is a miss or a failed store, counted,
    never an exception; configuration mistakes fail at creation.

Runs in the engines virtual environment (tools/engines_venv.sh): started by
any python3, it re-executes itself with the venv's interpreter. Exits 77
(skip) saying why when the venv is missing or SGLang does not import, or
without /dev/fuse. Environment as tests/python/test_kvfs.py, plus
KVFS_ENGINES_VENV (default /var/cache/kvfs/engines-venv).
"""
import hashlib
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import engines_env  # noqa: E402

if __name__ == "__main__":
    engines_env.enter("sglang", """
import torch
from sglang.srt.mem_cache.storage.backend_factory import StorageBackendFactory
from sglang.srt.mem_cache.pool_host.mha import MHATokenToKVPoolHost
""")

import logging  # noqa: E402
import unittest  # noqa: E402

import torch  # noqa: E402
from sglang.srt.mem_cache.device_pool_info import (  # noqa: E402
    KVBufferLayout, KVBuffers, MHABufferInfo)
from sglang.srt.mem_cache.hicache_storage import HiCacheStorageConfig  # noqa: E402
from sglang.srt.mem_cache.pool_host.base import host_memory_budget_scope  # noqa: E402
from sglang.srt.mem_cache.pool_host.mha import MHATokenToKVPoolHost  # noqa: E402
from sglang.srt.mem_cache.storage.backend_factory import StorageBackendFactory  # noqa: E402

from engines_env import damage  # noqa: E402

import kvfs_engines.sglang as ks  # noqa: E402

# A small model: 4 layers, 2 KV heads of 64, bf16, 16-token pages. A page
# of the page_first pool is K and V pieces of 4 x 16 x 2 x 64 x 2 = 16 KiB.
LAYERS, HEADS, DIM, PAGE_TOKENS = 4, 2, 64, 16
PIECE = LAYERS * PAGE_TOKENS * HEADS * DIM * 2
POOL_PAGES = 64
MODEL = "kvfs-test/tiny"


def make_pool(allocator="shm", layout="page_first", layers=LAYERS, heads=HEADS, dim=DIM,
              page_tokens=PAGE_TOKENS, pages=POOL_PAGES, device_tokens=None, seed=None):
    """SGLang's MHA host pool over CPU 'device' buffers (no CUDA here: the
    device side is plain CPU tensors with pin_memory off, which is all the
    host pool's constructor and storage path touch), filled with noise
    (from seed, if given). The geometry is this test's unless given
    (tools/bench_engines_sglang.py makes a model's); device_tokens: the
    device buffers' size (default: the pool's)."""
    cap = pages * page_tokens
    dev = device_tokens or cap
    k = tuple(torch.zeros(dev, heads, dim, dtype=torch.bfloat16) for _ in range(layers))
    v = tuple(torch.zeros(dev, heads, dim, dtype=torch.bfloat16) for _ in range(layers))
    ptrs = lambda ts: torch.tensor([t.data_ptr() for t in ts], dtype=torch.uint64)
    info = MHABufferInfo(
        buffers=KVBuffers(k=k, v=v, k_data_ptrs=ptrs(k), v_data_ptrs=ptrs(v),
                          layout=KVBufferLayout.NHD),
        page_size=page_tokens, head_num=heads, head_dim=dim, v_head_dim=dim,
        dtype=torch.bfloat16, device=torch.device("cpu"))
    with host_memory_budget_scope(max(1 << 30, 8 * cap * layers * heads * dim)):
        pool = MHATokenToKVPoolHost(
            info, host_to_device_ratio=2.0, host_size=0, page_size=page_tokens,
            layout=layout, pin_memory=False, device="cpu", allocator_type=allocator,
            device_capacity_tokens=min(dev, cap // 2), start_layer=0, end_layer=layers,
            host_token_capacity=cap)
    raw = pool.kv_buffer.view(torch.uint8)
    gen = None if seed is None else torch.Generator().manual_seed(seed)
    raw.copy_(torch.randint(0, 256, raw.shape, dtype=torch.uint8, generator=gen))
    return pool


def config(mount, **extra):
    cfg = {"backend_name": "kvfs", "module_path": "kvfs_engines.sglang",
           "class_name": "KvfsHiCacheStorage", "interface_v1": 1, "allocator": "shm",
           "kvfs_mount": mount}
    cfg.update(extra)
    cfg = {k: v for k, v in cfg.items() if v is not None}
    return HiCacheStorageConfig(
        tp_rank=0, tp_size=1, pp_rank=0, pp_size=1, attn_cp_rank=0, attn_cp_size=1,
        is_mla_model=False, enable_storage_metrics=False, is_page_first_layout=True,
        model_name=MODEL, extra_config=cfg)


def attach(mount, pool, **extra):
    """What HiCacheController.attach_storage_backend does."""
    be = StorageBackendFactory.create_backend("dynamic", config(mount, **extra), pool)
    be.register_mem_pool_host(pool)
    return be


def indices(pages):
    """Host indices (token slots) of the given pool pages, as SGLang passes them."""
    return torch.cat([torch.arange(p * PAGE_TOKENS, (p + 1) * PAGE_TOKENS) for p in pages])


def page_bytes(pool, page):
    return pool.get_data_page(page * PAGE_TOKENS).view(torch.uint8).clone()


def chain_keys(n, seed=0):
    """Page keys of the form SGLang's get_hash_str makes (64 hex digits of
    a chained SHA-256; its own needs a C++ compiler at run time)."""
    keys, prev = [], b"seed%d" % seed
    for i in range(n):
        prev = hashlib.sha256(prev + i.to_bytes(4, "little")).digest()
        keys.append(prev.hex())
    return keys


class SGLangBackendTest(engines_env.MountedCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.keys = chain_keys(8)
        cls.saved = {}
    def model_dir(self):
        return os.path.join(self.m.mnt, "kvfs-test%2Ftiny.bf16.tp0of1.page_first.p16")

    def test_1_roundtrip_zero_copy(self):
        pool = make_pool()
        be = attach(self.m.mnt, pool)
        try:
            self.assertIsInstance(be, ks.KvfsHiCacheStorage)
            self.assertIsNotNone(be._pool_region, "the shm pool was not registered")
            self.assertEqual(be.model_dir, self.model_dir())
            keys = self.keys
            self.assertEqual(be.batch_exists(keys), 0)
            self.assertEqual(be.batch_set_v1(keys, indices(range(1, 9))), [True] * 8)
            for i in range(8):
                self.saved[keys[i]] = page_bytes(pool, 1 + i)
            self.assertEqual(be.batch_exists(keys), 8)
            self.assertEqual(be.batch_exists(keys[:5] + ["f" * 64] + keys[5:]), 5)
            self.assertEqual(be.batch_exists(["0" * 64] + keys), 0)
            self.assertTrue(be.exists(keys[3]))
            pool.kv_buffer.view(torch.uint8).zero_()
            self.assertEqual(be.batch_get_v1(keys, indices(range(20, 28))), [True] * 8)
            for i in range(8):
                self.assertTrue(torch.equal(page_bytes(pool, 20 + i), self.saved[keys[i]]),
                                "page %d differs after the round trip" % i)
            # Each key is two kvfs pages (K, V) of all layers: 00/KEY and 01/KEY.
            for layer in ("00", "01"):
                st = os.stat(os.path.join(self.model_dir(), layer, keys[0]))
                self.assertEqual(st.st_size, PIECE)
            self.assertEqual(os.getxattr(self.model_dir(), "user.kvfs.page_bytes"),
                             str(PIECE).encode())
            # Storing again is success (EEXIST: same key, same bytes).
            self.assertEqual(be.batch_set_v1(keys[:2], indices([1, 2])), [True, True])
            # Keys that are not valid names: '/', and longer than 255 bytes.
            odd = ["a/b/../c", ".", "x" * 300, "%H" + "0" * 64]
            self.assertEqual(be.batch_set_v1(odd, indices([30, 31, 32, 33])), [True] * 4)
            self.assertEqual(be.batch_exists(odd), 4)
            self.assertEqual(be.batch_get_v1(odd, indices([40, 41, 42, 43])), [True] * 4)
            for i in range(4):
                self.assertTrue(torch.equal(page_bytes(pool, 40 + i), page_bytes(pool, 30 + i)))
            s = be.stats()
            self.assertEqual(s.get("staged_pieces", 0), 0, "the shm pool was staged")
            self.assertEqual(s["set_existing"], 2)
            self.assertEqual(s["get_hits"], 12)
        finally:
            be.close()

    def test_2_staged_pool(self):
        """A pool that is not fd-backed is staged, and stores the same bytes."""
        pool = make_pool(allocator="default")
        be = attach(self.m.mnt, pool, allocator=None)
        try:
            self.assertIsNone(be._pool_region)
            keys = self.keys
            self.assertEqual(be.batch_get_v1(keys, indices(range(8))), [True] * 8)
            for i in range(8):
                self.assertTrue(torch.equal(page_bytes(pool, i), self.saved[keys[i]]))
            more = chain_keys(3, seed=1)
            self.assertEqual(be.batch_set_v1(more, indices([10, 11, 12])), [True] * 3)
            for i in range(3):
                self.saved[more[i]] = page_bytes(pool, 10 + i)
            self.assertGreater(be.stats()["staged_pieces"], 0)
        finally:
            be.close()

    def test_3_restart_reuse(self):
        self.remount()
        pool = make_pool()
        be = attach(self.m.mnt, pool)
        try:
            keys = self.keys + chain_keys(3, seed=1)
            self.assertEqual(be.batch_exists(keys), 11)
            self.assertEqual(be.batch_exists(keys[8:]), 3)
            self.assertEqual(be.batch_get_v1(keys, indices(range(11))), [True] * 11)
            for i, k in enumerate(keys):
                self.assertTrue(torch.equal(page_bytes(pool, i), self.saved[k]),
                                "page %d differs after the remount" % i)
        finally:
            be.close()

    def test_4_damaged_page(self):
        damage(os.path.join(self.model_dir(), "01", self.keys[3]))    # V of key 3
        pool = make_pool()
        be = attach(self.m.mnt, pool)
        try:
            got = be.batch_get_v1(self.keys, indices(range(8)))
            self.assertEqual(got, [True] * 3 + [False] + [True] * 4)
            for i in (0, 1, 2, 4, 5, 6, 7):
                self.assertTrue(torch.equal(page_bytes(pool, i), self.saved[self.keys[i]]))
            s = be.stats()
            self.assertEqual(s["get_damaged"], 1)
            self.assertEqual(s["get_misses"], 1)
        finally:
            be.close()

    def test_5_daemon_gone(self):
        """Every call is a miss or a failed store, counted; none raises."""
        pool = make_pool()
        be = attach(self.m.mnt, pool)
        self.m.daemon.kill()            # the daemon dies under a live backend
        self.m.daemon.wait()
        try:
            self.assertEqual(be.batch_exists(self.keys), 0)
            self.assertEqual(be.batch_get_v1(self.keys, indices(range(8))), [False] * 8)
            self.assertEqual(be.batch_set_v1(self.keys, indices(range(8))), [False] * 8)
            self.assertFalse(be.exists(self.keys[0]))
            s = be.stats()
            for op in ("exists", "get", "set"):
                self.assertGreaterEqual(s.get("errors_" + op, 0), 1, op)
        finally:
            be.close()
            self.remount()

    def test_6_config_errors(self):
        """Mistakes fail when SGLang creates the backend, with the reason."""
        pool = make_pool()
        with self.assertRaisesRegex(ValueError, "kvfs_mount"):
            attach(None, pool)
        with self.assertRaisesRegex(ValueError, "interface_v1"):
            attach(self.m.mnt, pool, interface_v1=0)
        with self.assertRaises(OSError):        # not a kvfs mount
            attach(self.m.tmp, pool, kvfs_model="plain-dir")


class CapacityTest(unittest.TestCase):
    """A store of 1 MiB holds about 30 of these 32 KiB pages: storing 64
    evicts the oldest, which then read as misses."""

    def test_evictions_are_misses(self):
        with engines_env.small_store(self, "1M") as m:
            pool = make_pool()
            be = attach(m.mnt, pool)
            keys = chain_keys(60, seed=2)
            want = {k: page_bytes(pool, i) for i, k in enumerate(keys)}
            stored = []
            for a in range(0, 60, 6):        # SGLang backs up a few pages at a time
                stored += be.batch_set_v1(keys[a:a + 6], indices(range(a, a + 6)))
            self.assertTrue(all(isinstance(x, bool) for x in stored))
            hit = be.batch_exists(keys)
            self.assertLess(hit, 60, "nothing was evicted from a 1 MiB store")
            pool.kv_buffer.view(torch.uint8).zero_()
            got = be.batch_get_v1(keys, indices(range(60)))
            self.assertIn(False, got)
            self.assertIn(True, got)
            for i, ok in enumerate(got):
                if ok:
                    self.assertTrue(torch.equal(page_bytes(pool, i), want[keys[i]]))
            s = be.stats()
            self.assertEqual(s["get_misses"], got.count(False))
            self.assertEqual(s.get("errors_get", 0), 0)
            print("capacity: stored %d/60, exists prefix %d, get hits %d"
                  % (stored.count(True), hit, got.count(True)))
            be.close()


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING)
    unittest.main(verbosity=2)
