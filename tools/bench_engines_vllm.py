"""vLLM rows of tools/bench_engines.py: secondary tiers of vLLM's tiered
KV offloading (vLLM 0.33), driven the way its OffloadingConnector's
scheduler drives them.

Each row is vLLM's own TieringOffloadingSpec, made by
OffloadingSpecFactory from the connector's extra config, with one
secondary tier; spec.get_manager() builds the CPU primary tier (a
SharedOffloadRegion in /dev/shm, large enough for every chunk) and the
tier. Geometry: --vllm-model (default Llama-3.1-8B: 32 layers, 8 KV heads
of 128, bf16), 16-token blocks, --vllm-chunk tokens a chunk (vLLM's
offloaded block_size; default 16, vLLM's default: a chunk is 2 MiB).

Store: --vllm-requests requests (default 8) each computes its own prompt's
chunks: prepare_store, the worker's GPU->CPU copy (writing the primary
rows), complete_store, which cascades the chunks to the secondary tier;
steps until the cascades are done. Restore, on a fresh engine (an empty
primary tier, a fresh tier instance): the requests arrive together; each
step the scheduler's prefix lookup (_maximal_prefix_lookup: every chunk up
to the first MISS, a RETRY does not stop it) runs for each request, then
on_schedule_end; a secondary HIT starts a promotion (one load job per
request and step), until every chunk is a HIT in the primary tier; then
prepare_load and complete_load (the worker's CPU->GPU copy is the check:
the primary rows, bit for bit). "calls" in the table are scheduler steps.

Rows:
  vllm-fs    vLLM's own filesystem tier ("type": "fs",
             FileSystemTierManager): one file per chunk, its async lookups
             (faccessat batches), 16 read threads, O_DIRECT where the
             filesystem takes it (ext4; buffered on tmpfs)
  vllm-kvfs  kvfs_engines.vllm (KvfsTier by module path): the primary
             tier's file registered, pages read straight into it
"""
import time
import uuid
import zlib

import numpy as np
from vllm.v1.kv_offload.base import LookupResult, ReqContext, ScheduleEndContext
from vllm.v1.kv_offload.config import (OffloadingCacheConfig, OffloadingConfig,
                                       OffloadingGroupConfig, OffloadingModelConfig,
                                       OffloadingParallelConfig)
from vllm.v1.kv_offload.factory import OffloadingSpecFactory

import test_vllm        # tests/python: chained OffloadKeys as vLLM makes them
from bench_engines import Backend, backend

MODELS = {  # name: (layers, kv heads, head dim)
    "llama-3.1-8b": (32, 8, 128),
    "llama-3.1-70b": (80, 8, 128),
    "qwen2.5-7b": (28, 4, 128),
}
BLOCK_TOKENS = 16
MODEL, CHUNK_TOKENS, REQUESTS = "llama-3.1-8b", 16, 8
STEP = ScheduleEndContext(new_req_ids=(), preempted_req_ids=())


def add_arguments(ap):
    ap.add_argument("--vllm-model", default=MODEL, choices=sorted(MODELS),
                    help="KV geometry of the vLLM rows (default %(default)s)")
    ap.add_argument("--vllm-chunk", type=int, default=CHUNK_TOKENS,
                    help="tokens an offloaded chunk, a multiple of 16 (default %(default)s)")
    ap.add_argument("--vllm-requests", type=int, default=REQUESTS,
                    help="requests the chunks are split into (default %(default)s)")


def configure(args):
    global MODEL, CHUNK_TOKENS, REQUESTS
    MODEL, CHUNK_TOKENS, REQUESTS = args.vllm_model, args.vllm_chunk, args.vllm_requests
    if CHUNK_TOKENS % BLOCK_TOKENS:
        raise SystemExit("--vllm-chunk: a multiple of %d tokens" % BLOCK_TOKENS)


def block_bytes():
    layers, heads, dim = MODELS[MODEL]
    return 2 * layers * BLOCK_TOKENS * heads * dim * 2


def offloading_config(tier, chunks):
    layers = MODELS[MODEL][0]
    bpc = CHUNK_TOKENS // BLOCK_TOKENS
    return OffloadingConfig(
        groups=(OffloadingGroupConfig(
            tokens_per_block=BLOCK_TOKENS, group_id=0,
            layer_names=tuple("model.layers.%d.self_attn.attn" % i for i in range(layers))),),
        worker_kv_bytes_per_block=block_bytes(), enable_kv_cache_events=False,
        # room for every chunk and a few more: the restore promotes all
        extra_config={"spec_name": "TieringOffloadingSpec", "block_size": CHUNK_TOKENS,
                      "cpu_bytes_to_use": (chunks + 8) * bpc * block_bytes(),
                      "secondary_tiers": [tier]},
        engine_id="kvfs-bench-%s" % uuid.uuid4().hex[:8],
        model=OffloadingModelConfig(name="bench/" + MODEL, dtype="bfloat16"),
        cache=OffloadingCacheConfig(tokens_per_hash=BLOCK_TOKENS, blocks_per_chunk=bpc),
        parallel=OffloadingParallelConfig(
            rank=0, world_size=1, tp_size=1, pp_size=1, pcp_size=1, dcp_size=1,
            data_parallel_index=0, data_parallel_size=1, data_parallel_rank_local=None,
            is_parallelism_agnostic=False))


class _VLLM(Backend):
    engine = "vllm"

    def __init__(self, bench):
        super().__init__(bench)
        self.mgr = None
        self.rows = None

    def tier(self):
        raise NotImplementedError

    def open_engine(self):
        """What the OffloadingConnector does with its extra config."""
        spec = OffloadingSpecFactory.create_spec(offloading_config(self.tier(), self.n))
        self.mgr = spec.get_manager()
        view = self.mgr.primary_tier.get_kv_memoryview()
        self.rows = np.frombuffer(view, np.uint8).reshape(view.shape[0], -1)
        if self.rows.shape[1] != self.chunk:
            raise RuntimeError("%s: primary rows of %d bytes, not %d"
                               % (self.name, self.rows.shape[1], self.chunk))

    def settle(self, timeout=600):
        end = time.monotonic() + timeout
        while self.mgr.has_pending_work() or any(t.has_pending_work()
                                                 for t in self.mgr.secondary_tiers):
            if time.monotonic() > end:
                raise RuntimeError("%s: jobs pending after %d s" % (self.name, timeout))
            self.mgr.on_schedule_end(STEP)
            time.sleep(0.002)
        self.mgr.on_schedule_end(STEP)

    def prepare(self, nbytes):
        self.chunk = block_bytes() * (CHUNK_TOKENS // BLOCK_TOKENS)
        per = max(1, nbytes // self.chunk // REQUESTS)
        self.n = per * REQUESTS
        seed = zlib.crc32(self.name.encode())
        self.reqkeys = [test_vllm.chain_keys(per, seed=seed * 1000 + r) for r in range(REQUESTS)]
        self.ref = np.random.default_rng(seed).integers(0, 256, (self.n, self.chunk),
                                                        dtype=np.uint8)
        self.open_engine()
        return self.n * self.chunk

    def store(self):
        i = 0
        for r, keys in enumerate(self.reqkeys):
            req = ReqContext(req_id="store-%d" % r)
            self.mgr.on_new_request(req)
            out = self.mgr.prepare_store(keys, req)
            if out is None or len(out.keys_to_store) != len(keys):
                raise RuntimeError("%s: the primary tier took %s of %d chunks"
                                   % (self.name, out and len(out.keys_to_store), len(keys)))
            for c in out.store_spec.chunk_ids:         # the worker's GPU->CPU copy
                self.rows[int(c)] = self.ref[i]
                i += 1
            self.mgr.complete_store(keys, req)
            self.mgr.on_request_finished(req)
            self.mgr.on_schedule_end(STEP)
        self.settle()

    def reopen(self):
        self.open_engine()

    def restore(self, timeout=600):
        reqs = [ReqContext(req_id="load-%d" % r) for r in range(REQUESTS)]
        for req in reqs:
            self.mgr.on_new_request(req)
        todo = dict(zip(range(REQUESTS), reqs))
        found, steps = {}, 0
        end = time.monotonic() + timeout
        while todo:                          # one scheduler step a pass
            for r, req in list(todo.items()):
                n = test_vllm.Engine.prefix_lookup(self, self.reqkeys[r], req)
                if n is not None:
                    found[r] = n
                    del todo[r]
            if todo:
                if time.monotonic() > end:
                    raise RuntimeError("%s: lookups deferred after %d s" % (self.name, timeout))
                self.mgr.on_schedule_end(STEP)
                steps += 1
                time.sleep(0.001)
        hit = sum(found.values())
        if hit != self.n:
            raise RuntimeError("%s: %d of %d chunks found" % (self.name, hit, self.n))
        self.ids = []
        for r, req in enumerate(reqs):
            spec = self.mgr.prepare_load(self.reqkeys[r], req)
            self.ids.extend(int(c) for c in spec.chunk_ids)
            self.mgr.complete_load(self.reqkeys[r], req)
            self.mgr.on_request_finished(req)
        return self.n * self.chunk, steps

    def verify(self):
        if not np.array_equal(self.rows[self.ids], self.ref):
            raise AssertionError("%s: the restored chunks differ from what was stored"
                                 % self.name)

    def close(self):
        if self.mgr is not None:
            mgr, self.mgr = self.mgr, None
            self.rows = None           # vLLM unmaps the primary tier only once unused
            mgr.shutdown()


@backend
class VLLMFs(_VLLM):
    """vLLM's fs tier (FileSystemTierManager), one file a chunk"""
    name, label, baseline = "vllm-fs", "vllm fs", True

    def tier(self):
        return {"type": "fs", "root_dir": self.bench.workdir + "/vllm-fs"}


@backend
class VLLMKvfs(_VLLM):
    """kvfs_engines.vllm KvfsTier, primary tier file registered (zero copy)"""
    name, label, uses_kvfs = "vllm-kvfs", "vllm kvfs", True

    def tier(self):
        return {"type": "KvfsTier", "module_path": "kvfs_engines.vllm",
                "kvfs_mount": self.bench.mount, "kvfs_model": self.name}
