"""LMCache rows of tools/bench_engines.py: L2 adapters of LMCache 0.5 (its
multiprocess server's storage layer), driven the way its
PrefetchController drives them.

Each row's adapter is made the way `lmcache server --l2-adapter JSON`
makes it: the JSON parsed by LMCache's add_l2_adapters_args /
parse_args_to_l2_adapters_config, created by its registry
(create_l2_adapter_from_registry). Objects are LMCache TensorMemoryObjs
from its TensorMemoryAllocator (an L1 arena), KV_2LTD, with the geometry
of --lmcache-model (default Llama-3.1-8B: 32 layers, 8 KV heads of 128,
bf16) and --lmcache-chunk tokens an object (LMCache's chunk_size, default
256: an object is 32 MiB); keys are its ObjectKeys.

Store: one submit_store_task per request (--lmcache-requests, default 4),
waited on its event fd. Restore, with a fresh adapter: what a prefetch
does for each request, the requests together: submit_lookup_and_lock_task
of all its keys, then submit_load_task of the locked keys into L1 objects,
then submit_unlock; "calls" are those tasks. The L1 objects are checked
bit for bit against what was stored.

Rows:
  lmcache-fs-native  LMCache's "fs_native" adapter (its C++ LMCacheFSClient
                     in the NativeConnectorL2Adapter), one file an object,
                     its defaults (4 workers, buffered)
  lmcache-kvfs       kvfs_engines.lmcache as a "native_plugin" connector
                     (the same NativeConnectorL2Adapter), staged: one
                     memcpy per object (the L1 arena is not a kvfs region)

LMCache's other local-disk adapter, "fs" (Python, aiofiles), is not a row:
the pinned venv has no aiofiles, so LMCache does not register it. Its
`local_disk` storage backend belongs to the in-process LMCacheEngine, not
to the L2 adapters this connector sits among.
"""
import argparse
import hashlib
import json
import zlib

import torch
from lmcache.v1.distributed.api import ObjectKey
from lmcache.v1.distributed.l2_adapters.config import (add_l2_adapters_args,
                                                       parse_args_to_l2_adapters_config)
from lmcache.v1.distributed.l2_adapters.factory import create_l2_adapter_from_registry
from lmcache.v1.memory_allocators.tensor_memory_allocator import TensorMemoryAllocator
from lmcache.v1.memory_management import MemoryFormat

import test_lmcache     # tests/python: waiting on an adapter's event fds
from bench_engines import Backend, backend

MODELS = {  # name: (layers, kv heads, head dim)
    "llama-3.1-8b": (32, 8, 128),
    "llama-3.1-70b": (80, 8, 128),
    "qwen2.5-7b": (28, 4, 128),
}
MODEL, CHUNK_TOKENS, REQUESTS = "llama-3.1-8b", 256, 4
KVFS_PARAMS = {}
RANK = 0x00010000


def add_arguments(ap):
    ap.add_argument("--lmcache-model", default=MODEL, choices=sorted(MODELS),
                    help="KV geometry of the LMCache rows (default %(default)s)")
    ap.add_argument("--lmcache-chunk", type=int, default=CHUNK_TOKENS,
                    help="tokens an object (LMCache chunk_size; default %(default)s)")
    ap.add_argument("--lmcache-requests", type=int, default=REQUESTS,
                    help="requests the objects are split into (default %(default)s)")
    ap.add_argument("--lmcache-kvfs-params", default="{}", metavar="JSON",
                    help='more adapter_params of the kvfs row, e.g. \'{"io_threads": 4}\'')


def configure(args):
    global MODEL, CHUNK_TOKENS, REQUESTS, KVFS_PARAMS
    MODEL, CHUNK_TOKENS, REQUESTS = args.lmcache_model, args.lmcache_chunk, args.lmcache_requests
    KVFS_PARAMS = json.loads(args.lmcache_kvfs_params)


def make_adapter(spec):
    """What `lmcache server --l2-adapter JSON` does with the JSON."""
    parser = argparse.ArgumentParser()
    add_l2_adapters_args(parser)
    cfg = parse_args_to_l2_adapters_config(parser.parse_args(["--l2-adapter", json.dumps(spec)]))
    return create_l2_adapter_from_registry(cfg.adapters[0])


def object_keys(n, seed):
    out, prev = [], b"bench%d" % seed
    for i in range(n):
        prev = hashlib.sha256(prev + i.to_bytes(4, "little")).digest()
        out.append(ObjectKey(chunk_hash=prev, model_name="bench/" + MODEL, kv_rank=RANK))
    return out


class _LMCache(Backend):
    engine = "lmcache"

    def __init__(self, bench):
        super().__init__(bench)
        self.ad = None
        self.objs = []

    def spec(self):
        raise NotImplementedError

    def prepare(self, nbytes):
        layers, heads, dim = MODELS[MODEL]
        self.shape = torch.Size([2, layers, CHUNK_TOKENS, heads * dim])
        size = self.shape.numel() * 2
        per = max(1, nbytes // size // REQUESTS)
        n = per * REQUESTS
        seed = zlib.crc32(self.name.encode())
        # the arena: every object, 4 KiB aligned each (LMCache's own rounding)
        self.alloc = TensorMemoryAllocator(torch.empty(n * (size + 4096) + (1 << 20),
                                                       dtype=torch.uint8))
        g = torch.Generator().manual_seed(seed)
        self.ref = torch.randint(0, 256, (n, size), dtype=torch.uint8, generator=g)
        for i in range(n):
            o = self.alloc.allocate(self.shape, torch.bfloat16, MemoryFormat.KV_2LTD)
            if o is None:
                raise RuntimeError("%s: L1 arena full" % self.name)
            o.tensor.view(torch.uint8).view(-1).copy_(self.ref[i])
            self.objs.append(o)
        keys = object_keys(n, seed)
        self.reqs = [(keys[r * per:(r + 1) * per], self.objs[r * per:(r + 1) * per])
                     for r in range(REQUESTS)]
        self.ad = make_adapter(self.spec())
        return n * size

    def store(self):
        tasks = [self.ad.submit_store_task(k, o) for k, o in self.reqs]
        done = {}

        def finished(t):            # the adapter hands back every finished store at once
            done.update(self.ad.pop_completed_store_tasks())
            return done.get(t)

        for t in tasks:
            res = test_lmcache._collect(self.ad.get_store_event_fd(), lambda: finished(t),
                                        timeout=600)
            if not res.is_successful():
                raise RuntimeError("%s: a store failed: %s" % (self.name, res))

    def reopen(self):
        for o in self.objs:
            o.tensor.view(torch.uint8).zero_()
        self.ad = make_adapter(self.spec())

    def restore(self):
        ad = self.ad
        looks = [ad.submit_lookup_and_lock_task(k, {}) for k, _ in self.reqs]
        hit = 0
        for t, (k, _) in zip(looks, self.reqs):
            bm = test_lmcache._collect(ad.get_lookup_and_lock_event_fd(),
                                       lambda: ad.query_lookup_and_lock_result(t), timeout=600)
            hit += sum(bm.test(i) for i in range(len(k)))
        if hit != len(self.objs):
            raise RuntimeError("%s: %d of %d objects found" % (self.name, hit, len(self.objs)))
        loads = [ad.submit_load_task(k, o) for k, o in self.reqs]
        got = 0
        for t, (k, _) in zip(loads, self.reqs):
            bm = test_lmcache._collect(ad.get_load_event_fd(),
                                       lambda: ad.query_load_result(t), timeout=600)
            got += sum(bm.test(i) for i in range(len(k)))
        for k, _ in self.reqs:
            ad.submit_unlock(k)
        if got != len(self.objs):
            raise RuntimeError("%s: %d of %d objects loaded" % (self.name, got, len(self.objs)))
        return self.ref.numel(), 2 * len(self.reqs)

    def verify(self):
        for o, r in zip(self.objs, self.ref):
            if not torch.equal(o.tensor.view(torch.uint8).view(-1), r):
                raise AssertionError("%s: a restored object differs from what was stored"
                                     % self.name)

    def close(self):
        # (the L1 objects live as long as the row: they are the restore's
        # destination in every run)
        if self.ad is not None:
            ad, self.ad = self.ad, None
            ad.close()


@backend
class LMCacheFsNative(_LMCache):
    """LMCache's fs_native L2 adapter (C++ client), one file an object"""
    name, label, baseline = "lmcache-fs-native", "lmcache fs_native", True

    def spec(self):
        return {"type": "fs_native", "base_path": self.bench.workdir + "/lmcache-fsn"}


@backend
class LMCacheKvfs(_LMCache):
    """kvfs_engines.lmcache native_plugin connector, staged (one memcpy)"""
    name, label, uses_kvfs = "lmcache-kvfs", "lmcache kvfs", True

    def spec(self):
        return {"type": "native_plugin", "module_path": "kvfs_engines.lmcache",
                "class_name": "KvfsL2Connector",
                "adapter_params": dict(KVFS_PARAMS, kvfs_mount=self.bench.mount,
                                       kvfs_model=self.name)}
