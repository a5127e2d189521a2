"""Inference-engine backends built on kvfs (docs/engine.md).

Each submodule plugs kvfs into one engine through that engine's own
extension interface and imports the engine only when it is itself
imported, so installing kvfs never requires any engine:

    kvfs_engines.sglang   SGLang HiCache L3 storage (HiCacheStorage),
                          loaded by --hicache-storage-backend dynamic
"""
