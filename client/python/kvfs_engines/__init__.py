"""Inference-engine backends built on kvfs (docs/engine.md).

Each submodule plugs kvfs into one engine through that engine's own
extension interface and imports the engine only when it is itself
imported, so installing kvfs never requires any engine:

    kvfs_engines.sglang   SGLang HiCache L3 storage (HiCacheStorage),
                          loaded by --hicache-storage-backend dynamic
    kvfs_engines.vllm     a vLLM secondary offloading tier (KvfsTier),
                          loaded by TieringOffloadingSpec's secondary_tiers
    kvfs_engines.lmcache  an LMCache L2 connector (KvfsL2Connector), loaded
                          by the native_plugin --l2-adapter
"""
