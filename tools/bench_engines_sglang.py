"""SGLang rows of tools/bench_engines.py: HiCache L3 storage, driven the way
SGLang's HiCacheController drives it.

The host pool is SGLang's own MHATokenToKVPoolHost (page_first layout, as
the kvfs backend's docs ask for) over CPU "device" buffers, with the
geometry of --sglang-model (default Llama-3.1-8B: 32 layers, 8 KV heads of
128, bf16) and --sglang-page tokens a page (default 64: a page is 8 MiB,
K and V of every layer). Keys are 64-hex-digit chained hashes, as SGLang's
get_hash_str makes them.

Store: HiCacheController's own page_set_func, called unbound on a stand-in
controller (storage_backend, storage_host_pool, page_size), in batches of
SGLang's STORAGE_BATCH_SIZE. Restore: what a prefetch does, the hit query
(batch_exists per batch, as _storage_hit_query) then page_get_func per
batch (as _page_transfer): _generic_page_get for `file` (SGLang uses it for
every backend without the v1 interface: batch_get into flat pages, then
set_from_flat_data_page), _page_get_zero_copy (batch_get_v1) for kvfs.

Rows:
  sglang-file         HiCacheFile (--hicache-storage-backend file), pool
                      from SGLang's default allocator
  sglang-kvfs         kvfs_engines.sglang with "allocator": "shm": the pool
                      is registered, pages move straight into it
  sglang-kvfs-staged  kvfs_engines.sglang, default allocator: staged
                      through a region, one memcpy a piece
"""
import hashlib
import types
import zlib

import torch
from sglang.srt.managers.cache_controller import HiCacheController
from sglang.srt.mem_cache.hicache_storage import HiCacheStorageConfig, STORAGE_BATCH_SIZE
from sglang.srt.mem_cache.storage.backend_factory import StorageBackendFactory

import test_sglang      # tests/python: its host pool, of any geometry
from bench_engines import Backend, backend

MODELS = {  # name: (layers, kv heads, head dim)
    "llama-3.1-8b": (32, 8, 128),
    "llama-3.1-70b": (80, 8, 128),
    "qwen2.5-7b": (28, 4, 128),
}
MODEL, PAGE_TOKENS = "llama-3.1-8b", 64


def add_arguments(ap):
    ap.add_argument("--sglang-model", default=MODEL, choices=sorted(MODELS),
                    help="KV geometry of the SGLang rows (default %(default)s)")
    ap.add_argument("--sglang-page", type=int, default=PAGE_TOKENS,
                    help="tokens a page (SGLang --page-size; default %(default)s)")


def configure(args):
    global MODEL, PAGE_TOKENS
    MODEL, PAGE_TOKENS = args.sglang_model, args.sglang_page


class _Op:
    """The prefetch operation _generic_page_get looks at."""
    request_id = "bench"

    @staticmethod
    def is_terminated():
        return False


def chain_keys(n, seed):
    keys, prev = [], b"bench%d" % seed
    for i in range(n):
        prev = hashlib.sha256(prev + i.to_bytes(4, "little")).digest()
        keys.append(prev.hex())
    return keys


def make_pool(pages, allocator, seed):
    layers, heads, dim = MODELS[MODEL]
    # device buffers of 2 pages: storage I/O never touches them
    return test_sglang.make_pool(allocator, "page_first", layers, heads, dim, PAGE_TOKENS,
                                 pages, device_tokens=2 * PAGE_TOKENS, seed=seed)


class _SGLang(Backend):
    engine = "sglang"
    storage = None           # "file" or "dynamic"
    allocator = "default"

    def __init__(self, bench):
        super().__init__(bench)
        self.be = None
        self.pool = None
        self.ref = None

    def extra(self):
        return {}

    def open_backend(self):
        extra = self.extra()
        if self.storage == "dynamic":
            extra["allocator"] = self.allocator
        cfg = HiCacheStorageConfig(
            tp_rank=0, tp_size=1, pp_rank=0, pp_size=1, attn_cp_rank=0, attn_cp_size=1,
            is_mla_model=False, enable_storage_metrics=False, is_page_first_layout=True,
            model_name="bench/" + MODEL, extra_config=extra)
        # what HiCacheController.attach_storage_backend does
        self.be = StorageBackendFactory.create_backend(self.storage, cfg, self.pool)
        self.be.register_mem_pool_host(self.pool)
        self.ctl = types.SimpleNamespace(storage_backend=self.be, storage_host_pool=self.pool,
                                         mem_pool_host=self.pool, page_size=PAGE_TOKENS)
        self.v1 = self.storage == "dynamic"   # interface_v1: the zero-copy calls

    def batches(self):
        for a in range(0, len(self.keys), STORAGE_BATCH_SIZE):
            keys = self.keys[a:a + STORAGE_BATCH_SIZE]
            yield keys, torch.arange(a * PAGE_TOKENS, (a + len(keys)) * PAGE_TOKENS)

    def prepare(self, nbytes):
        layers, heads, dim = MODELS[MODEL]
        page = 2 * PAGE_TOKENS * layers * heads * dim * 2
        n = max(1, nbytes // page)
        self.pool = make_pool(n, self.allocator, zlib.crc32(self.name.encode()))
        self.ref = self.pool.kv_buffer.view(torch.uint8).clone()
        self.keys = chain_keys(n, zlib.crc32(self.name.encode()))
        self.open_backend()
        return n * page

    def store(self):
        put = HiCacheController._page_set_zero_copy if self.v1 else \
            HiCacheController._generic_page_set
        for keys, idx in self.batches():
            if not put(self.ctl, keys, idx):
                raise RuntimeError("%s: storing a batch failed" % self.name)

    def reopen(self):
        self.pool.kv_buffer.zero_()
        self.open_backend()

    def restore(self):
        calls, hit = 0, 0
        for keys, _ in self.batches():        # _storage_hit_query
            n = self.be.batch_exists(keys)
            calls += 1
            hit += n
            if n < len(keys):
                break
        if hit != len(self.keys):
            raise RuntimeError("%s: %d of %d keys found" % (self.name, hit, len(self.keys)))
        get = HiCacheController._page_get_zero_copy if self.v1 else \
            HiCacheController._generic_page_get
        got = 0
        for keys, idx in self.batches():      # _page_transfer
            got += get(self.ctl, _Op, keys, idx)
            calls += 1
        if got != len(self.keys):
            raise RuntimeError("%s: %d of %d pages restored" % (self.name, got, len(self.keys)))
        return self.ref.numel(), calls

    def verify(self):
        if not torch.equal(self.pool.kv_buffer.view(torch.uint8), self.ref):
            raise AssertionError("%s: the restored pool differs from what was stored"
                                 % self.name)

    def close(self):
        if self.be is not None:
            be, self.be = self.be, None
            if hasattr(be, "close"):
                be.close()


@backend
class SGLangFile(_SGLang):
    """SGLang HiCacheFile (file backend), one file a page, generic get"""
    name, label, baseline, storage = "sglang-file", "sglang file", True, "file"

    def extra(self):
        return {"file_storage_path": self.bench.workdir + "/hicache"}


@backend
class SGLangKvfs(_SGLang):
    """kvfs_engines.sglang, shm pool registered (zero copy), batch_get_v1"""
    name, label, uses_kvfs, storage, allocator = \
        "sglang-kvfs", "sglang kvfs", True, "dynamic", "shm"

    def extra(self):
        return {"backend_name": "kvfs", "module_path": "kvfs_engines.sglang",
                "class_name": "KvfsHiCacheStorage", "interface_v1": 1,
                "kvfs_mount": self.bench.mount, "kvfs_model": self.name}


@backend
class SGLangKvfsStaged(SGLangKvfs):
    """kvfs_engines.sglang, default pool: staged, one memcpy a piece"""
    name, label, allocator = "sglang-kvfs-staged", "sglang kvfs staged", "default"
