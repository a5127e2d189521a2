#!/usr/bin/env python3
"""tools/engine_demo.py against a real mount: it must exit 0 with
bit-identical logits, and what it claims must be true on the mount: the
pages exist with the geometry's size, sealed, in every layer, no temporary
name is left, and the daemon counted the fast-path reads and batch writes.
Also: a page that disappears between the prefix lookup and the read (as an
evicted one does) is a cache miss the engine recomputes past, with the same
logits; and the demo's own mkfs/mount/umount mode leaves a clean store.

Environment as test_kvfs.py (KVFS, KVFS_LIB). Exits 77 without /dev/fuse,
fusermount3 or numpy.
"""
import io
import contextlib
import json
import os
import re
import stat
import subprocess
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
TOOLS = os.path.join(HERE, "..", "..", "tools")
DEMO = os.path.join(TOOLS, "engine_demo.py")
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "client", "python"))
sys.path.insert(0, TOOLS)

from test_kvfs import skip_reason  # noqa: E402  (one list of what a mount test needs)

if __name__ == "__main__" and skip_reason():
    print("SKIP:", skip_reason())
    sys.exit(77)

import numpy as np  # noqa: E402

import engine_demo as demo  # noqa: E402
import kvfs  # noqa: E402
import test_kvfs as base  # noqa: E402

LAYER_DIRS = ["%02d" % l for l in range(demo.LAYERS)]


def run_demo(*args):
    return subprocess.run([sys.executable, DEMO] + list(args), stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=240)


class EngineDemo(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.m = base.Mount()
        try:
            # No RAM tier: the restore must come from the SSD through io_uring.
            cls.m.start("ram_cache=0")
        except BaseException:
            cls.m.stop()
            cls.m.remove()
            raise
        cls.model_dir = os.path.join(cls.m.mnt, demo.MODEL)
        cls.out = run_demo(cls.m.mnt)
        print(cls.out.stdout)

    @classmethod
    def tearDownClass(cls):
        rc, errors, tail = cls.m.finish()
        if rc != 0 or errors:
            raise AssertionError("daemon exit %s, errors in its log:\n%s" % (rc, tail))

    def test_1_demo_passes(self):
        out = self.out.stdout
        self.assertEqual(self.out.returncode, 0, out)
        for want in ("identical: yes", "blocks restored 3", "pages read via fast path 12",
                     "file path 8", "via batch 20", "tokens decoded 8",
                     "restored 12 pages in 4 batches (0 from daemon RAM)",
                     "logits differ: the check can fail"):
            self.assertIn(want, out)

    def test_2_pages_on_mount(self):
        """7 distinct block keys (5 from request 1, 2 new in request 2), in
        every layer, each a sealed page of exactly the geometry's size."""
        self.assertEqual(sorted(os.listdir(self.model_dir)), LAYER_DIRS)
        names = None
        for layer in LAYER_DIRS:
            d = os.path.join(self.model_dir, layer)
            got = sorted(os.listdir(d))
            self.assertEqual(len(got), 7, got)
            for name in got:
                self.assertRegex(name, r"^[0-9a-f]{32}$")      # no temporary name left
                st = os.stat(os.path.join(d, name))
                self.assertTrue(stat.S_ISREG(st.st_mode))
                self.assertEqual(st.st_size, demo.PAGE_BYTES)
                self.assertEqual(stat.S_IMODE(st.st_mode), 0o444)   # sealed
            self.assertEqual(got, names or got)
            names = got
        keys1, keys2 = (demo.block_keys(r) for r in demo.requests())
        self.assertEqual(sorted(set(keys1) | set(keys2)), names)
        self.assertEqual(os.getxattr(self.model_dir, "user.kvfs.page_bytes"),
                         str(demo.PAGE_BYTES).encode())

    def test_3_daemon_counted_fast_path(self):
        """kvfs stat: the restore really went through the fast path."""
        text = subprocess.run([self.m.kvfs, "stat", self.m.mnt], check=True,
                              stdout=subprocess.PIPE, text=True).stdout
        m = re.search(r"fast path: .* in (\d+) pages, (\d+) batches", text)
        self.assertIsNotNone(m, text)
        self.assertGreaterEqual(int(m.group(1)), 12, text)
        s = json.loads(subprocess.run([self.m.kvfs, "stat", self.m.mnt, "--json"], check=True,
                                      stdout=subprocess.PIPE, text=True).stdout)
        self.assertGreaterEqual(s["reads"]["fast_pages"], 12)
        self.assertGreaterEqual(s["writes"]["fast_pages"], 20)

    def test_4_page_gone_after_lookup_is_a_miss(self):
        """A page removed between the lookup and the read (what eviction
        does) fails only itself: the engine restores the blocks before it,
        recomputes the rest, stores the missing page again, and the logits
        are still bit-identical to a run without kvfs."""
        model = demo.Model()
        _, req2 = demo.requests()
        keys = demo.block_keys(req2)
        eng = demo.Engine(kvfs, self.model_dir)
        try:
            looked_up = eng.client.lookup_prefix(keys, demo.LAYERS)
            self.assertEqual(looked_up[0], 5)       # request 2 stored its own blocks
            gone = os.path.join(self.model_dir, "02", keys[1])
            os.unlink(gone)
            eng.client.lookup_prefix = lambda names, layers: looked_up   # the stale answer
            buf = io.StringIO()
            with contextlib.redirect_stdout(buf):
                toks, logits, hit = eng.serve(model, req2, 4)
        finally:
            eng.close()
        self.assertIn("cache miss (block 1: No such file or directory)", buf.getvalue())
        self.assertEqual(hit, 1)
        ref_toks, ref = demo.run(model, req2, 4)
        self.assertEqual(toks, ref_toks)
        self.assertTrue(all(np.array_equal(a, b) for a, b in zip(logits, ref)))
        self.assertEqual(os.stat(gone).st_size, demo.PAGE_BYTES)   # stored again

    def test_5_own_mount(self):
        """--store: the demo makes, mounts and unmounts a store itself; the
        store it leaves is clean and holds the pages."""
        store = os.path.join(self.m.tmp, "own-store")
        out = run_demo("--store", store)
        self.assertEqual(out.returncode, 0, out.stdout)
        self.assertIn("identical: yes", out.stdout)
        with open("/proc/mounts") as f:
            self.assertNotIn(store, f.read())
        fsck = subprocess.run([self.m.kvfs, "fsck", store], stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True)
        self.assertEqual(fsck.returncode, 0, fsck.stdout)
        self.assertIn("28 pages", fsck.stdout)


if __name__ == "__main__":
    unittest.main(verbosity=2)
