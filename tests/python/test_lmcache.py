#!/usr/bin/env python3
"""kvfs_engines.lmcache against LMCache's own L2 adapter machinery and a
real mount.

The adapter is made the way LMCache makes it from its command line: the
--l2-adapter JSON {"type": "native_plugin", "module_path":
"kvfs_engines.lmcache", "class_name": "KvfsL2Connector", ...} parsed by
LMCache's add_l2_adapters_args / parse_args_to_l2_adapters_config, created
by its registry (create_l2_adapter_from_registry), which loads the
connector and wraps it in LMCache's NativeConnectorL2Adapter. Objects are
LMCache TensorMemoryObjs from its TensorMemoryAllocator (an L1 arena) and
keys are its ObjectKeys. The test makes the storage manager's calls in its
order: submit_store_task, wait for the store event fd,
pop_completed_store_tasks; submit_lookup_and_lock_task, wait,
query_lookup_and_lock_result; submit_load_task, wait, query_load_result;
submit_unlock; delete (its L2 eviction). Checked:

  - store / lookup / load round trip, bit-exact; a partial (shorter) last
    chunk; keys with '/' in the model name and a cache salt;
  - an 80 MiB object (a 70B model's chunk) with -o max_page=96M, and a
    clear failed store (EFBIG, counted) without it;
  - restart reuse: after a remount a fresh adapter finds and loads them;
  - a damaged page is a miss, counted as damaged, and the rest load;
  - a small --capacity evicts: evicted objects miss, every hit is bit-exact;
  - with the daemon gone every call completes as a miss or a failed store,
    counted, never an exception; configuration mistakes fail at creation.

Runs in the vllm engines venv (tools/engines_venv.sh vllm, which has
LMCache); exits 77 (skip) saying why without it or without /dev/fuse.
Environment as test_kvfs.py, plus KVFS_VLLM_VENV.
"""
import hashlib
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import engines_env  # noqa: E402

if __name__ == "__main__":
    engines_env.enter("vllm", """
import torch
from lmcache.v1.distributed.l2_adapters.factory import create_l2_adapter_from_registry
""")

import argparse  # noqa: E402
import json  # noqa: E402
import logging  # noqa: E402
import select  # noqa: E402
import time  # noqa: E402
import unittest  # noqa: E402

import torch  # noqa: E402
from lmcache.v1.distributed.api import ObjectKey  # noqa: E402
from lmcache.v1.distributed.l2_adapters.config import (  # noqa: E402
    add_l2_adapters_args, parse_args_to_l2_adapters_config)
from lmcache.v1.distributed.l2_adapters.factory import (  # noqa: E402
    create_l2_adapter_from_registry)
from lmcache.v1.memory_allocators.tensor_memory_allocator import (  # noqa: E402
    TensorMemoryAllocator)
from lmcache.v1.memory_management import MemoryFormat  # noqa: E402

from engines_env import damage  # noqa: E402

import kvfs_engines.lmcache as kl  # noqa: E402

# A chunk of a small model: K and V of 4 layers x 256 tokens x 128 (bf16),
# as LMCache's KV_2LTD format lays it out: 512 KiB.
LAYERS, TOKENS, HIDDEN = 4, 256, 128
MODEL = "kvfs-test/tiny"
RANK = 0x00010000


def make_adapter(mount, **params):
    """What `lmcache server --l2-adapter JSON` does with the JSON."""
    p = {"kvfs_mount": mount, "dtype": "bfloat16", "layout": "kv_2ltd"}
    p.update(params)
    p = {k: v for k, v in p.items() if v is not None}
    spec = {"type": "native_plugin", "module_path": "kvfs_engines.lmcache",
            "class_name": "KvfsL2Connector", "adapter_params": p}
    parser = argparse.ArgumentParser()
    add_l2_adapters_args(parser)
    cfg = parse_args_to_l2_adapters_config(parser.parse_args(["--l2-adapter", json.dumps(spec)]))
    return create_l2_adapter_from_registry(cfg.adapters[0])


class L1:
    """LMCache's L1 arena (TensorMemoryAllocator over one CPU tensor)."""

    def __init__(self, mib=64):
        self.alloc = TensorMemoryAllocator(torch.empty(mib << 20, dtype=torch.uint8))

    def obj(self, tokens=TOKENS, fill=None):
        o = self.alloc.allocate(torch.Size([2, LAYERS, tokens, HIDDEN]), torch.bfloat16,
                                MemoryFormat.KV_2LTD)
        assert o is not None, "L1 arena full"
        raw = o.tensor.view(torch.uint8).view(-1)
        if fill is None:
            raw.zero_()
        else:
            raw.copy_(fill)
        return o

    @staticmethod
    def data(o):
        return o.tensor.view(torch.uint8).view(-1).clone()


def store(ad, keys, objs):
    task = ad.submit_store_task(keys, objs)
    return _collect(ad.get_store_event_fd(), lambda: ad.pop_completed_store_tasks().get(task))


def lookup(ad, keys):
    task = ad.submit_lookup_and_lock_task(keys, {})
    bm = _collect(ad.get_lookup_and_lock_event_fd(),
                  lambda: ad.query_lookup_and_lock_result(task))
    return [bm.test(i) for i in range(len(keys))]


def load(ad, keys, objs):
    task = ad.submit_load_task(keys, objs)
    bm = _collect(ad.get_load_event_fd(), lambda: ad.query_load_result(task))
    return [bm.test(i) for i in range(len(keys))]


def _collect(fd, query, timeout=30):
    """Wait on the adapter's event fd until the task's result is there."""
    end = time.monotonic() + timeout
    while True:
        res = query()
        if res is not None:
            return res
        left = end - time.monotonic()
        if left <= 0:
            raise AssertionError("no completion in %d s" % timeout)
        select.select([fd], [], [], min(left, 0.5))
        try:
            os.eventfd_read(fd)
        except (BlockingIOError, OSError):
            pass


def keys_for(n, seed=0, model=MODEL, salt=""):
    out, prev = [], b"seed%d" % seed
    for i in range(n):
        prev = hashlib.sha256(prev + i.to_bytes(4, "little")).digest()
        out.append(ObjectKey(chunk_hash=prev, model_name=model, kv_rank=RANK,
                             cache_salt=salt))
    return out


def noise(n, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, (n,), dtype=torch.uint8, generator=g)


class LMCacheAdapterTest(engines_env.MountedCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.l1 = L1()
        cls.keys = keys_for(8)
        cls.saved = {}
    def model_dir(self):
        return os.path.join(self.m.mnt, "kvfs-test%2Ftiny.bf16.kr00010000.kv_2ltd")

    def test_1_roundtrip(self):
        ad = make_adapter(self.m.mnt)
        try:
            self.assertIsInstance(ad._client, kl.KvfsL2Connector)
            size = 2 * LAYERS * TOKENS * HIDDEN * 2
            objs = [self.l1.obj(fill=noise(size, i)) for i in range(7)]
            objs.append(self.l1.obj(tokens=100, fill=noise(2 * LAYERS * 100 * HIDDEN * 2, 7)))
            for k, o in zip(self.keys, objs):
                self.saved[k] = L1.data(o)
            self.assertEqual(lookup(ad, self.keys), [False] * 8)
            res = store(ad, self.keys, objs)
            self.assertTrue(res.is_successful(), res)
            self.assertEqual(res.bytes_transferred(), 7 * size + 2 * LAYERS * 100 * HIDDEN * 2)
            self.assertEqual(lookup(ad, self.keys), [True] * 8)
            ad.submit_unlock(self.keys)
            dst = [self.l1.obj() for _ in range(7)] + [self.l1.obj(tokens=100)]
            self.assertEqual(load(ad, self.keys, dst), [True] * 8)
            for k, o in zip(self.keys, dst):
                self.assertTrue(torch.equal(L1.data(o), self.saved[k]))
            for o in objs + dst:
                o.ref_count_down()
            name = "0@" + self.keys[0].chunk_hash.hex()
            self.assertEqual(os.stat(os.path.join(self.model_dir(), "00", name)).st_size, size)
            # Storing again is success (EEXIST: the same object).
            again = [self.l1.obj(fill=self.saved[self.keys[0]])]
            self.assertTrue(store(ad, self.keys[:1], again).is_successful())
            # A model name with '/' and '..', and a cache salt.
            odd = keys_for(2, seed=5, model="../a/b", salt="user-1")
            src = [self.l1.obj(fill=noise(size, 50 + i)) for i in range(2)]
            self.assertTrue(store(ad, odd, src).is_successful())
            out = [self.l1.obj() for _ in range(2)]
            self.assertEqual(load(ad, odd, out), [True, True])
            for a, b in zip(src, out):
                self.assertTrue(torch.equal(L1.data(a), L1.data(b)))
            self.assertTrue(os.path.isdir(os.path.join(self.m.mnt,
                                                       "%2E.%2Fa%2Fb.bf16.kr00010000.kv_2ltd")))
            for o in again + src + out:
                o.ref_count_down()
            # LMCache's L2 eviction: delete() unlinks the pages.
            ad.delete(odd)
            self.assertEqual(lookup(ad, odd), [False, False])
            s = ad._client.stats()
            self.assertEqual(s["set_existing"], 1)
            self.assertEqual(s["get_hits"], 10)
            self.assertGreater(s["staged_bytes"], 0)
            self.assertEqual(s["deleted"], 2)
        finally:
            ad.close()

    def test_2_big_chunk(self):
        """An 80 MiB object (a 70B model's 256-token chunk): stored and read
        back with -o max_page=96M; without it a clear failed store."""
        big = 80 << 20
        l1 = L1(mib=2 * 80 + 8)
        k = keys_for(1, seed=9)
        src = l1.alloc.allocate(torch.Size([big]), torch.uint8, MemoryFormat.KV_2LTD)
        src.tensor.view(-1).copy_(noise(big, 9))
        ad = make_adapter(self.m.mnt)
        try:
            self.assertFalse(store(ad, k, [src]).is_successful())
            self.assertEqual(ad._client.stats()["set_toobig"], 1)
        finally:
            ad.close()
        self.remount("ram_cache=0,max_page=96M")
        ad = make_adapter(self.m.mnt)
        try:
            self.assertTrue(store(ad, k, [src]).is_successful())
            dst = l1.alloc.allocate(torch.Size([big]), torch.uint8, MemoryFormat.KV_2LTD)
            dst.tensor.zero_()
            self.assertEqual(load(ad, k, [dst]), [True])
            self.assertTrue(torch.equal(dst.tensor, src.tensor))
            dst.ref_count_down()
        finally:
            src.ref_count_down()
            ad.close()
            self.remount()

    def test_3_restart_reuse(self):
        self.remount()
        ad = make_adapter(self.m.mnt)
        try:
            self.assertEqual(lookup(ad, self.keys), [True] * 8)
            dst = [self.l1.obj() for _ in range(7)] + [self.l1.obj(tokens=100)]
            self.assertEqual(load(ad, self.keys, dst), [True] * 8)
            for k, o in zip(self.keys, dst):
                self.assertTrue(torch.equal(L1.data(o), self.saved[k]))
                o.ref_count_down()
        finally:
            ad.close()

    def test_4_damaged_page(self):
        damage(os.path.join(self.model_dir(), "00", "0@" + self.keys[3].chunk_hash.hex()))
        ad = make_adapter(self.m.mnt)
        try:
            dst = [self.l1.obj() for _ in range(7)] + [self.l1.obj(tokens=100)]
            self.assertEqual(load(ad, self.keys, dst), [True] * 3 + [False] + [True] * 4)
            for i in (0, 1, 2, 4, 5, 6, 7):
                self.assertTrue(torch.equal(L1.data(dst[i]), self.saved[self.keys[i]]))
            for o in dst:
                o.ref_count_down()
            s = ad._client.stats()
            self.assertEqual(s["get_damaged"], 1)
            self.assertEqual(s["get_misses"], 1)
            # Removed: lookups miss it, and it can be stored again.
            self.assertEqual(lookup(ad, self.keys[3:5]), [False, True])
            src = [self.l1.obj(fill=self.saved[self.keys[3]])]
            self.assertTrue(store(ad, self.keys[3:4], src).is_successful())
            src[0].ref_count_down()
        finally:
            ad.close()

    def test_5_daemon_gone(self):
        """Every call completes as a miss or a failed store; none raises."""
        ad = make_adapter(self.m.mnt)
        self.m.daemon.kill()
        self.m.daemon.wait()
        try:
            self.assertEqual(lookup(ad, self.keys), [False] * 8)
            dst = [self.l1.obj() for _ in range(2)]
            self.assertEqual(load(ad, self.keys[:2], dst), [False, False])
            self.assertFalse(store(ad, self.keys[:2], dst).is_successful())
            for o in dst:
                o.ref_count_down()
            s = ad._client.stats()
            for op in ("exists", "get", "set"):
                self.assertGreaterEqual(s.get("errors_" + op, 0), 1, op)
            self.assertTrue(ad.report_status()["is_healthy"])
        finally:
            ad.close()
            self.remount()

    def test_6_config_errors(self):
        with self.assertRaisesRegex(ValueError, "kvfs_mount"):
            make_adapter(None)
        with self.assertRaisesRegex(ValueError, "not a directory"):
            make_adapter(os.path.join(self.m.tmp, "nowhere"))
        os.makedirs(os.path.join(self.m.tmp, "plain"), exist_ok=True)
        with self.assertRaisesRegex(ValueError, "not a kvfs mount"):
            make_adapter(os.path.join(self.m.tmp, "plain"))


class CapacityTest(unittest.TestCase):
    """A 4 MiB store holds about 7 of these 512 KiB objects: storing 24
    evicts the oldest, which then miss."""

    def test_evictions_are_misses(self):
        with engines_env.small_store(self, "4M") as m:
            l1 = L1()
            ad = make_adapter(m.mnt)
            keys = keys_for(24, seed=3)
            size = 2 * LAYERS * TOKENS * HIDDEN * 2
            want = {}
            for a in range(0, 24, 4):
                objs = [l1.obj(fill=noise(size, 100 + a + i)) for i in range(4)]
                for k, o in zip(keys[a:a + 4], objs):
                    want[k] = L1.data(o)
                store(ad, keys[a:a + 4], objs)
                for o in objs:
                    o.ref_count_down()
            hit = lookup(ad, keys)
            self.assertIn(False, hit, "nothing was evicted from a 4 MiB store")
            self.assertIn(True, hit)
            dst = [l1.obj() for _ in keys]
            got = load(ad, keys, dst)
            self.assertIn(False, got)
            for k, ok, o in zip(keys, got, dst):
                if ok:
                    self.assertTrue(torch.equal(L1.data(o), want[k]))
            for o in dst:
                o.ref_count_down()
            s = ad._client.stats()
            self.assertEqual(s.get("errors_get", 0), 0)
            print("capacity: %d/24 objects still stored" % sum(hit))
            ad.close()


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING)
    unittest.main(verbosity=2)
