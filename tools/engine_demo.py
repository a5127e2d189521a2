#!/usr/bin/env python3
"""A tiny inference engine that keeps its KV cache on kvfs (docs/engine.md).

    python3 tools/engine_demo.py MOUNTPOINT     # a mounted kvfs
    python3 tools/engine_demo.py [--store DIR]  # mkfs + mount its own, unmount after

A 4-layer transformer with fixed random weights (numpy, float32) serves two
requests. Request 1 stores the K/V of every full 16-token block, one page per
(layer, block) named by a chained prefix hash, by file path (tmp + rename)
and by batch ioctl. Request 2 shares a prefix: it looks it up, restores it
one fast-path batch per layer, computes the rest and decodes. Its logits must
be bit-identical to the same request without kvfs at every step (exit 0),
and differ once a restored K value is nudged (the check can fail).
$KVFS: the kvfs binary (else PATH, else build/tools/kvfs); $KVFS_LIB.
"""
import argparse
import contextlib
import errno
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile

try:
    import numpy as np
except ImportError:
    sys.exit("engine_demo: needs numpy (apt-get install python3-numpy)")

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# ---- geometry: what `kvfs model create` is told, and what a page holds ----
MODEL = "tiny-demo.f32.tp0of1"   # model, dtype, tensor-parallel rank: one KV layout
VOCAB, D_MODEL, LAYERS, KV_HEADS, HEAD_DIM, D_FF = 256, 64, 4, 4, 16, 128
BLOCK = 16                        # page_tokens
# One page = K then V of one layer for one block: [2][BLOCK][KV_HEADS][HEAD_DIM].
PAGE_SHAPE = (2, BLOCK, KV_HEADS, HEAD_DIM)
PAGE_BYTES = 2 * BLOCK * KV_HEADS * HEAD_DIM * 4    # f32: 8192
MAX_TOKENS = 256


def find_kvfs():
    """The kvfs binary, and make sure `import kvfs` finds libkvfs.so."""
    exe = (os.environ.get("KVFS") or shutil.which("kvfs")
           or os.path.join(REPO, "build", "tools", "kvfs"))
    if not os.access(exe, os.X_OK):
        sys.exit("engine_demo: no kvfs binary (set KVFS, or build with tools/setup.sh)")
    lib = os.path.join(os.path.dirname(os.path.dirname(os.path.realpath(exe))),
                       "client", "libkvfs.so")
    if not os.environ.get("KVFS_LIB") and os.path.exists(lib):
        os.environ["KVFS_LIB"] = lib           # a build tree: tools/kvfs, client/libkvfs.so
    sys.path.insert(0, os.path.join(REPO, "client", "python"))
    return exe


# ---- the model: plain numpy, float32 everywhere ----

class Model:
    def __init__(self, seed=1234):
        rng = np.random.default_rng(seed)

        def w(*shape):
            return (rng.standard_normal(shape) / np.sqrt(shape[0])).astype(np.float32)
        self.embed = w(VOCAB, D_MODEL) * np.float32(8)
        self.layers = [dict(wq=w(D_MODEL, D_MODEL), wk=w(D_MODEL, D_MODEL),
                            wv=w(D_MODEL, D_MODEL), wo=w(D_MODEL, D_MODEL),
                            w1=w(D_MODEL, D_FF), w2=w(D_FF, D_MODEL))
                       for _ in range(LAYERS)]
        self.head = w(D_MODEL, VOCAB)
        inv = 10000.0 ** (-np.arange(0, HEAD_DIM, 2) / HEAD_DIM)
        ang = np.arange(MAX_TOKENS)[:, None] * inv[None, :]
        self.cos = np.cos(ang).astype(np.float32)[:, None, :]   # [pos][1][HEAD_DIM/2]
        self.sin = np.sin(ang).astype(np.float32)[:, None, :]

    @staticmethod
    def norm(x):
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + np.float32(1e-5))

    def rope(self, x, pos0):
        c, s = self.cos[pos0:pos0 + len(x)], self.sin[pos0:pos0 + len(x)]
        a, b = x[..., :HEAD_DIM // 2], x[..., HEAD_DIM // 2:]
        return np.concatenate([a * c - b * s, a * s + b * c], axis=-1)

    def layer(self, l, x, pos0, cache):
        """Run tokens at positions pos0.. through layer l: their K/V go into
        the cache, attention reads the cache's first pos0 + n positions."""
        p, n = self.layers[l], len(x)
        h = self.norm(x)
        q = self.rope((h @ p["wq"]).reshape(n, KV_HEADS, HEAD_DIM), pos0)
        cache.k[l, pos0:pos0 + n] = self.rope((h @ p["wk"]).reshape(n, KV_HEADS, HEAD_DIM), pos0)
        cache.v[l, pos0:pos0 + n] = (h @ p["wv"]).reshape(n, KV_HEADS, HEAD_DIM)
        k, v = cache.k[l, :pos0 + n], cache.v[l, :pos0 + n]
        s = q.transpose(1, 0, 2) @ k.transpose(1, 2, 0) / np.float32(np.sqrt(HEAD_DIM))
        causal = np.arange(pos0 + n)[None, :] <= (pos0 + np.arange(n))[:, None]
        s = np.where(causal, s, np.float32(-np.inf))
        e = np.exp(s - s.max(axis=-1, keepdims=True))
        o = (e / e.sum(axis=-1, keepdims=True)) @ v.transpose(1, 0, 2)
        x = x + o.transpose(1, 0, 2).reshape(n, D_MODEL) @ p["wo"]
        f = self.norm(x) @ p["w1"]
        return x + (f / (np.float32(1) + np.exp(-f))) @ p["w2"]

    def logits(self, x):
        return (self.norm(x) @ self.head)[-1]


class KVCache:
    """The engine's own KV memory, [layer][position][head][dim] for K and V.
    Pages are copied in and out of it, so every computation reads the same
    arrays whether its KV was computed or restored."""

    def __init__(self):
        self.k = np.zeros((LAYERS, MAX_TOKENS, KV_HEADS, HEAD_DIM), np.float32)
        self.v = np.zeros_like(self.k)

    def page(self, l, b):
        t = slice(b * BLOCK, (b + 1) * BLOCK)
        return np.stack([self.k[l, t], self.v[l, t]])          # PAGE_SHAPE, contiguous

    def set_page(self, l, b, page):
        t = slice(b * BLOCK, (b + 1) * BLOCK)
        page = page.reshape(PAGE_SHAPE)
        self.k[l, t], self.v[l, t] = page[0], page[1]


def run(model, tokens, n_decode, start_block=0, load_layer=None, store_layer=None):
    """Prefill tokens from block start_block on (blocks before it come from
    load_layer), then greedy-decode n_decode tokens. Returns (decoded tokens,
    logits of every step).

    Prefill is chunked by block, always at the same boundaries: a block's
    operations then have the same shapes, inputs and order whether the blocks
    before it were computed or restored, which is what makes a restored run
    bit-identical to a computed one. It runs layer-major (every chunk through
    layer l, then layer l + 1): per chunk the operations are the same, and the
    engine needs layer l's restored pages only when it reaches layer l and can
    store layer l's new pages as soon as it is done."""
    cache = KVCache()
    starts = range(start_block * BLOCK, len(tokens), BLOCK)
    xs = [model.embed[tokens[s:s + BLOCK]] for s in starts]
    for l in range(LAYERS):
        if load_layer:
            load_layer(l, cache)
        xs = [model.layer(l, x, s, cache) for x, s in zip(xs, starts)]
        if store_layer:
            store_layer(l, cache)
    steps, out, pos = [model.logits(xs[-1])], [], len(tokens)
    for _ in range(n_decode):
        out.append(int(np.argmax(steps[-1])))
        x = model.embed[out[-1:]]
        for l in range(LAYERS):
            x = model.layer(l, x, pos, cache)
        steps.append(model.logits(x))
        pos += 1
    return out, steps


def block_keys(tokens):
    """Chained prefix hash of every full block: key i names blocks 0..i, so
    a stored page for key i implies the whole prefix up to block i matches."""
    keys, prev = [], b""
    for b in range(len(tokens) // BLOCK):
        blk = np.asarray(tokens[b * BLOCK:(b + 1) * BLOCK], "<u4").tobytes()
        prev = hashlib.sha256(prev + blk).hexdigest()[:32].encode()
        keys.append(prev.decode())
    return keys


# ---- kvfs: storing and restoring pages ----

class CacheMiss(Exception):
    """A page of block `block` could not be read: the prefix ends there."""

    def __init__(self, block, err):
        super().__init__("block %d: %s" % (block, os.strerror(err)))
        self.block = block


class Engine:
    """The kvfs side of an engine: one Client (the model directory's fast
    path) for every request, hooks for run(), and counters for the summary."""

    def __init__(self, kvfs_mod, model_dir):
        self.kvfs = kvfs_mod
        self.client = kvfs_mod.Client(model_dir)
        # Layer directories are named by number ("00".."03"); find out how.
        self.layer_dirs = {int(n): os.path.join(model_dir, n) for n in os.listdir(model_dir)}
        self.n = dict(file=0, batch=0, read=0, batches=0, from_ram=0)

    def storer(self, keys, first, file_blocks):
        """store_layer hook: pages of blocks first..len(keys)-1; the first
        file_blocks of them through the file path, the rest in one batch."""
        def store(l, cache):
            blocks = range(first, len(keys))
            by_file, by_batch = blocks[:file_blocks], blocks[file_blocks:]
            for b in by_file:
                # Write under a temporary name, fsync (seals the page and makes
                # it durable), then rename: readers never see a partial page.
                final = os.path.join(self.layer_dirs[l], keys[b])
                tmp = "%s.tmp.%d" % (final, os.getpid())
                # Mode 0444: a sealed page's bytes never change, so say so.
                fd = os.open(tmp, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o444)
                with os.fdopen(fd, "wb") as f:
                    f.write(cache.page(l, b).tobytes())
                    os.fsync(f.fileno())
                os.rename(tmp, final)
                self.n["file"] += 1
            if by_file:   # the renames are durable once the directory is fsync'ed
                fd = os.open(self.layer_dirs[l], os.O_RDONLY | os.O_DIRECTORY)
                os.fsync(fd)
                os.close(fd)
            if by_batch:
                pages = np.stack([cache.page(l, b) for b in by_batch])
                try:
                    self.client.write_layer(l, [keys[b] for b in by_batch], pages,
                                            durable=True)
                    self.n["batch"] += len(by_batch)
                except self.kvfs.PageError as e:
                    # EEXIST: another engine stored the block first. Same
                    # prefix, same weights: same bytes, so it is not an error.
                    if any(s not in (0, -errno.EEXIST) for s in e.statuses):
                        raise
                    self.n["batch"] += e.statuses.count(0)
        return store

    @contextlib.contextmanager
    def loader(self, handles, hit, keep=None):
        """load_layer hook: restore blocks 0..hit-1 of each layer with one
        fast-path READ per layer. Two buffers in one region: while layer l
        computes, layer l + 1's batch is already reading into the other."""
        stride = PAGE_BYTES                      # a multiple of 4 KiB: O_DIRECT lands in place
        ctl = self.kvfs.Batch.ctl_bytes(hit)
        half = (hit * stride + ctl + 4095) // 4096 * 4096
        with self.client.region(2 * half) as region:
            batches = [region.batch(s * half + hit * stride, hit) for s in (0, 1)]

            def submit(l):
                b = batches[l % 2]
                b.reset()
                for i in range(hit):
                    # By handle: exactly the page the lookup saw (a page
                    # replaced since then gives ENOENT, never other bytes).
                    b.add_handle(int(handles[i, l]), (l % 2) * half + i * stride, stride)
                b.submit()

            def load(l, cache):
                if l == 0:
                    submit(0)
                b = batches[l % 2]
                res = b.wait()
                st, flags = b.statuses(), b.descs["out_flags"].tolist()
                bad = [i for i in range(hit) if st[i]]
                if bad:       # evicted since the lookup, or damaged: a miss from there on
                    raise CacheMiss(bad[0], -st[bad[0]])
                if l + 1 < LAYERS:
                    submit(l + 1)
                rows = region.array(np.float32, (l % 2) * half, hit * PAGE_BYTES // 4
                                    ).reshape(hit, -1)      # a view: nothing copied yet
                for i in range(hit):
                    cache.set_page(l, i, rows[i])
                if keep is not None:
                    keep[l] = rows.copy()
                del rows
                self.n["read"] += res.done
                self.n["batches"] += 1
                self.n["from_ram"] += sum(1 for f in flags
                                          if f & (self.kvfs.DESC_CACHED | self.kvfs.DESC_RAM))
            try:
                yield load
            finally:
                for b in batches:
                    b.close()

    def serve(self, model, tokens, n_decode, file_blocks=0, keep=None):
        """One request: look the prefix up, restore it, compute the rest,
        store the new full blocks, decode. Returns (tokens, logits, hit)."""
        keys = block_keys(tokens)
        hit, handles = 0, None
        if keys:
            hit, handles, _ = self.client.lookup_prefix(keys, LAYERS)
        while True:
            if keep is not None:
                keep.clear()
            store = self.storer(keys, hit, file_blocks)
            if hit == 0:
                return run(model, tokens, n_decode, 0, None, store) + (0,)
            try:
                with self.loader(handles, hit, keep) as load:
                    return run(model, tokens, n_decode, hit, load, store) + (hit,)
            except CacheMiss as m:
                # A missing page is a miss, not an error: recompute from there.
                print("  cache miss (%s): restoring %d blocks instead" % (m, m.block))
                hit = m.block

    def close(self):
        self.client.close()


def replay(rows):
    """load_layer hook from saved page rows instead of kvfs."""
    def load(l, cache):
        for i, row in enumerate(rows[l]):
            cache.set_page(l, i, row)
    return load


def requests():
    """Two prompts: 5 full blocks + 7 tokens, and one that shares its first
    3 blocks and 5 more tokens, then goes its own way (5 blocks + 9)."""
    rng = np.random.default_rng(7)
    req1 = rng.integers(0, VOCAB, 5 * BLOCK + 7).tolist()
    return req1, req1[:3 * BLOCK + 5] + rng.integers(0, VOCAB, 36).tolist()


def sh(*cmd):
    """Run a kvfs command; its own message if it fails."""
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if r.returncode:
        raise RuntimeError("%s: exit %d\n%s" % (" ".join(cmd[:3]), r.returncode, r.stdout))
    return r.stdout


def demo(kvfs_exe, mnt, n_decode):
    import kvfs
    model_dir = os.path.join(mnt, MODEL)
    if os.path.exists(model_dir):
        # The demo's own model from an earlier run: start empty, so that the
        # run shows both write paths again.
        print("removing %s left by an earlier run" % model_dir)
        sh(kvfs_exe, "model", "drop", model_dir, "--yes")
    sh(kvfs_exe, "model", "create", model_dir, "--layers", str(LAYERS), "--kv-heads",
       str(KV_HEADS), "--head-dim", str(HEAD_DIM), "--dtype", "f32", "--page-tokens", str(BLOCK))
    print("model %s: %d layers, %d KV heads x %d, f32, %d-token blocks: pages of %d bytes"
          % (model_dir, LAYERS, KV_HEADS, HEAD_DIM, BLOCK, PAGE_BYTES))

    model, (req1, req2), keep = Model(), requests(), {}
    size = "%d tokens (%d full blocks + %d), prefix hit %d blocks"
    eng = Engine(kvfs, model_dir)
    try:
        _, _, hit1 = eng.serve(model, req1, 0, file_blocks=2)
        file1, batch1 = eng.n["file"], eng.n["batch"]
        print("request 1: " + size % (len(req1), len(req1) // BLOCK, len(req1) % BLOCK, hit1)
              + "; stored %d pages by file path, %d by batch" % (file1, batch1))
        got_tokens, got, hit = eng.serve(model, req2, n_decode, keep=keep)
        print("request 2: " + size % (len(req2), len(req2) // BLOCK, len(req2) % BLOCK, hit)
              + "; restored %d pages in %d batches (%d from daemon RAM), computed %d tokens, "
              "stored %d new pages by batch" % (eng.n["read"], eng.n["batches"],
                                                eng.n["from_ram"], len(req2) - hit * BLOCK,
                                                eng.n["batch"] - batch1))
        print("  decoded:", got_tokens)
    finally:
        eng.close()

    # The same request without kvfs: every block computed, same chunking.
    ref_tokens, ref = run(model, req2, n_decode)
    print("reference (no kvfs): computed %d tokens, decoded %s" % (len(req2), ref_tokens))
    problems = []
    if hit != 3:    # a lookup that never hits would make the comparison trivial
        problems.append("request 2 should restore the 3 blocks request 1 stored, got %d" % hit)
    same = [np.array_equal(a, b) for a, b in zip(got, ref)]
    identical = len(got) == len(ref) and all(same) and got_tokens == ref_tokens
    if not identical:
        problems.append("restored run differs from the reference: logits at steps %s, "
                        "tokens %s vs %s" % ([i for i, s in enumerate(same) if not s],
                                             got_tokens, ref_tokens))
    print("logits: %d steps compared with np.array_equal: %s"
          % (len(ref), "identical" if identical else "DIFFERENT"))

    # Prove the comparison can fail: replay the restored pages with one K
    # value nudged by 1e-3 (a single ulp can vanish in the rounding of a
    # dot product; 1e-3 cannot), and the logits must differ.
    if keep:
        bent = {l: r.copy() for l, r in keep.items()}
        bent[0][0, 0] += np.float32(1e-3)      # layer 0, block 0: K, token 0, head 0, dim 0
        _, alt = run(model, req2, n_decode, hit, replay(bent))
        diff = max(float(np.max(np.abs(a - b))) for a, b in zip(alt, ref))
        if diff == 0:
            problems.append("a perturbed K value left every logit unchanged: "
                            "the comparison proves nothing")
        print("perturbed: K[layer 0, block 0, token 0, head 0, dim 0] + 1e-3 -> logits %s "
              "(max |diff| %.3g)" % ("differ: the check can fail" if diff else "SAME", diff))
    print("summary: blocks restored %d, pages read via fast path %d, pages written via "
          "file path %d, via batch %d, tokens decoded %d, identical: %s"
          % (hit, eng.n["read"], file1, eng.n["batch"], len(got_tokens),
             "yes" if identical else "no"))
    for p in problems:
        print("engine_demo: FAILED:", p, file=sys.stderr)
    return 1 if problems else 0


@contextlib.contextmanager
def own_mount(kvfs_exe, store):
    """mkfs (unless store already holds one) and mount under /var/tmp (a
    real disk: the daemon uses O_DIRECT, which tmpfs refuses); unmount with
    `kvfs umount`, which returns once the daemon has committed and exited."""
    tmp = tempfile.mkdtemp(prefix="kvfs-engine-demo.", dir="/var/tmp")
    mnt = os.path.join(tmp, "mnt")
    os.mkdir(mnt)
    store = store or os.path.join(tmp, "store")
    try:
        if not os.path.exists(os.path.join(store, "kvfs.db")):
            sh(kvfs_exe, "mkfs", store)
        sh(kvfs_exe, "mount", store, mnt)          # detaches once mounted
        try:
            yield mnt
        finally:
            sh(kvfs_exe, "umount", mnt)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)    # the store too, unless --store gave it


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("mountpoint", nargs="?", help="a mounted kvfs (else mount one)")
    ap.add_argument("--store", help="store to mkfs/mount (default: a temporary one)")
    ap.add_argument("--decode", type=int, default=8, help="tokens to decode (default 8)")
    a = ap.parse_args()
    if a.mountpoint and a.store:
        ap.error("give a mountpoint or --store, not both")
    if not 0 <= a.decode <= MAX_TOKENS - 100:
        ap.error("--decode: 0 to %d tokens" % (MAX_TOKENS - 100))
    kvfs_exe = find_kvfs()
    try:
        if a.mountpoint:
            return demo(kvfs_exe, a.mountpoint, a.decode)
        with own_mount(kvfs_exe, a.store and os.path.abspath(a.store)) as mnt:
            return demo(kvfs_exe, mnt, a.decode)
    except (OSError, RuntimeError) as e:
        print("engine_demo: FAILED: %s" % e, file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
