#!/usr/bin/env python3
"""What an engine with a host pool and a scheduler loop needs from the
Python binding, against a real mount (the model of test_kvfs.py): page
bytes in a data region registered at an offset of a pool file (at the
right file offsets, nothing else of the file changed), two ranks' halves of
one pool, Batch.poll and the client's event fd (None while a call runs,
readable once it completes), asyncio with the loop never blocked, and
memory given as objects (buffers, data_ptr()); then the layer calls
(LayerCallsTest): read_layer_async and write_layer_async completing
through poll(), the event fd, wait() and asyncio, and read_layer(out=...)
into the caller's memory, straight when it lies in a region of the client
and staged (one memcpy) when it does not (tests/python/test_torch.py does
the same with torch tensors). Every wait has a timeout: a lost wakeup
fails, never hangs.

Environment and skips: as test_kvfs.py.
"""
import asyncio
import errno
import os
import select
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

try:
    import test_kvfs  # noqa: E402  (skips, mounts, the model)
except ImportError as e:    # numpy missing
    print("SKIP:", e)
    sys.exit(77)
from test_kvfs import NPAGES, PAGE, MountedModel, cat  # noqa: E402

if __name__ == "__main__" and test_kvfs.skip_reason():
    print("SKIP:", test_kvfs.skip_reason())
    sys.exit(test_kvfs.SKIP)

import numpy as np  # noqa: E402

import kvfs  # noqa: E402


def _round4k(n):
    return (n + 4095) // 4096 * 4096


class HostPoolTest(MountedModel):
    # ---- data regions, regions at an offset ----

    POOL = 4 << 20
    POOL_OFF = 1 << 20
    FILL = 0x5A

    def pool_fd(self):
        """An engine's host pool: a memfd, every byte allocated (the daemon
        refuses holes) and set to FILL."""
        fd = os.memfd_create("kvfs-pytest-pool", os.MFD_CLOEXEC)
        self.addCleanup(os.close, fd)
        self.refill(fd)
        return fd

    def refill(self, fd):
        os.pwrite(fd, bytes([self.FILL]) * self.POOL, 0)

    def assertPool(self, fd, placed):
        """The pool file holds placed {file offset: bytes} and FILL elsewhere."""
        want = bytearray([self.FILL]) * self.POOL
        for off, data in placed.items():
            want[off:off + len(data)] = data
        got = os.pread(fd, self.POOL, 0)
        self.assertEqual(len(got), self.POOL)
        if got != want:
            bad = next(i for i in range(self.POOL) if got[i] != want[i])
            self.fail("pool byte %d is %#x, want %#x" % (bad, got[bad], want[bad]))

    def test_data_region_at_offset(self):
        """Descriptors in a small region, page bytes in part of a pool
        file: writes take their sources from it and reads land in it, at
        the right file offsets and nowhere else."""
        fd = self.pool_fd()
        n = 4
        with self.client.region_from_fd(fd, size=2 << 20, offset=self.POOL_OFF) as pool, \
                self.client.region(_round4k(kvfs.Batch.ctl_bytes(n))) as ctl:
            self.assertEqual((pool.offset, pool.size), (self.POOL_OFF, 2 << 20))
            b = ctl.batch(0, n)
            b.set_data_region(pool)
            self.assertIs(b.data_region, pool)
            # Write: sources placed through the region view; the file agrees.
            want = [os.urandom(PAGE) for _ in range(n)]
            a = pool.array()
            for i in range(n):
                a[(i + 1) * PAGE:(i + 2) * PAGE] = np.frombuffer(want[i], np.uint8)
                self.assertEqual(os.pread(fd, PAGE, self.POOL_OFF + (i + 1) * PAGE), want[i])
                b.add(3, "w-dr%d" % i, (i + 1) * PAGE, PAGE)
            del a
            self.assertEqual(b.write(replace=True), kvfs.Result(n, 0, n * PAGE))
            for i in range(n):
                self.assertEqual(cat(self.path(3, "w-dr%d" % i)), want[i])
            # Read: destinations given as arrays in the pool, out of order.
            self.refill(fd)
            rows = pool.array(np.uint8, 8 * PAGE, n * PAGE).reshape(n, PAGE)
            b.reset()
            for i in range(n):
                b.add(1, "p%d" % i, rows[n - 1 - i])
            self.assertEqual(b.read(), kvfs.Result(n, 0, n * PAGE))
            del rows
            self.assertPool(fd, {self.POOL_OFF + (8 + n - 1 - i) * PAGE: self.pages[(1, "p%d" % i)]
                                 for i in range(n)})
            # Submitted, collected by poll after the event fd.
            self.refill(fd)
            self.client.drain_events()
            b.submit()
            self.assertErrno(errno.EBUSY, b.set_data_region, None)
            self.assertTrue(select.select([self.client.event_fd()], [], [], 10)[0],
                            "event fd not readable 10 s after submitting")
            self.assertEqual(b.poll(), kvfs.Result(n, 0, n * PAGE))
            self.assertPool(fd, {self.POOL_OFF + (8 + n - 1 - i) * PAGE: self.pages[(1, "p%d" % i)]
                                 for i in range(n)})
            # Refusals: another client's region; closing a data region in use;
            # memory outside the data region as a destination.
            with kvfs.Client(self.model) as c2, c2.region(1 << 20) as other:
                self.assertErrno(errno.EXDEV, b.set_data_region, other)
            self.assertIs(b.data_region, pool)
            self.assertErrno(errno.EBUSY, pool.close)
            with self.assertRaises(ValueError):
                b.add(1, "p0", ctl.buffer(0, PAGE))
            b.set_data_region(None)
            b.close()
        self.assertErrno(errno.EINVAL, self.client.region_from_fd, fd, 4096, 100)
        self.assertErrno(errno.ERANGE, self.client.region_from_fd, fd, 0, self.POOL)
        self.assertErrno(errno.ERANGE, self.client.region_from_fd, fd, 2 << 20, 3 << 20)

    def test_two_halves_of_one_pool(self):
        """Two ranks each register their half of one pool file and read
        into it. (That the daemon counts the file once shows only at its
        cap of half the machine's memory: not asserted here.)"""
        fd = self.pool_fd()
        half = self.POOL // 2
        with self.client.region_from_fd(fd, size=half) as h0, \
                self.client.region_from_fd(fd, offset=half) as h1, \
                self.client.region(1 << 20) as ctl:
            self.assertEqual((h0.offset, h0.size, h1.offset, h1.size), (0, half, half, half))
            for h, name in ((h0, "p5"), (h1, "p6")):
                with ctl.batch(0, 1) as b:
                    b.set_data_region(h)
                    b.add(2, name, PAGE, PAGE)
                    self.assertEqual(b.read().done, 1)
        self.assertPool(fd, {PAGE: self.pages[(2, "p5")], half + PAGE: self.pages[(2, "p6")]})

    def test_close_with_data_region(self):
        """Client.close closes a data region once the batch using it went
        with its own region, whichever region it tries first."""
        c = kvfs.Client(self.model)
        pool, ctl = c.region(1 << 20), c.region(1 << 20)
        b = ctl.batch(0, 1)
        b.set_data_region(pool)
        c.close()
        self.assertEqual((pool._h, ctl._h, b._h, c._h), (None, None, None, None))

    # ---- poll, event fd, asyncio ----

    def big_batch(self, r, n, k=0):
        """Batch k of region r: n pages of the model, cycling (a read of
        1024 takes milliseconds)."""
        keys = sorted(key for key in self.pages if key[1] != "odd")
        base = k * (n * PAGE + _round4k(kvfs.Batch.ctl_bytes(n)))
        b = r.batch(base + n * PAGE, n)
        for i in range(n):
            b.add(*keys[i % len(keys)], base + i * PAGE, PAGE)
        return b, [keys[i % len(keys)] for i in range(n)], base

    def check_big(self, r, keys, base):
        for i in range(0, len(keys), 37):
            self.assertEqual(r.buffer(base + i * PAGE, PAGE).tobytes(), self.pages[keys[i]])

    def test_poll_and_event_fd(self):
        n = 1024
        efd = self.client.event_fd()
        with self.client.region(n * PAGE + _round4k(kvfs.Batch.ctl_bytes(n))) as r:
            b, keys, base = self.big_batch(r, n)
            self.assertErrno(errno.EINVAL, b.poll)          # never submitted
            self.client.drain_events()
            self.assertEqual(select.select([efd], [], [], 0)[0], [])
            b.submit()
            # Microseconds after submitting a call of milliseconds.
            self.assertIsNone(b.poll())
            self.assertEqual(select.select([efd], [], [], 0)[0], [])
            self.assertEqual(select.select([efd], [], [], 10)[0], [efd],
                             "event fd not readable 10 s after submitting")
            self.assertEqual(b.poll(), kvfs.Result(n, 0, n * PAGE))
            self.assertErrno(errno.EINVAL, b.poll)          # collected
            self.assertEqual(self.client.drain_events(), 1)
            self.assertEqual(select.select([efd], [], [], 0)[0], [])
            self.check_big(r, keys, base)
            b.close()

    def test_wait_async(self):
        """Three batches awaited together on one loop, and the loop is
        never blocked: a ticker runs while they are in flight."""
        n = 256
        with self.client.region(3 * (n * PAGE + _round4k(kvfs.Batch.ctl_bytes(n)))) as r:
            made = [self.big_batch(r, n, k) for k in range(3)]

            async def main():
                ticks = 0

                async def ticker():
                    nonlocal ticks
                    while True:
                        ticks += 1
                        await asyncio.sleep(0)

                t = asyncio.ensure_future(ticker())
                for b, _, _ in made:
                    b.submit()
                res = await asyncio.wait_for(
                    asyncio.gather(*(b.wait_async() for b, _, _ in made)), 10)
                t.cancel()
                with self.assertRaises(OSError) as cm:
                    await made[0][0].wait_async()    # nothing submitted
                self.assertEqual(cm.exception.errno, errno.EINVAL)
                return res, ticks

            res, ticks = asyncio.run(main())
            self.assertEqual(res, [kvfs.Result(n, 0, n * PAGE)] * 3)
            self.assertGreater(ticks, 0)
            for b, keys, base in made:
                self.check_big(r, keys, base)
                b.close()

    # ---- memory given as objects ----

    def test_tensor_like_memory(self):
        """Objects with data_ptr() (as torch tensors) as a write's data
        and as a read's destination; device memory refused."""

        class FakeTensor:
            def __init__(self, arr, device="cpu"):
                self.arr, self.device = arr, type("Dev", (), {"type": device})()

            def data_ptr(self):
                return self.arr.__array_interface__["data"][0]

            def numel(self):
                return self.arr.size

            def element_size(self):
                return self.arr.itemsize

            def is_contiguous(self):
                return self.arr.flags.c_contiguous

        src = np.frombuffer(os.urandom(PAGE), np.uint16).copy()
        self.client.write_pages([(2, "w-tensor", FakeTensor(src))])
        self.assertEqual(cat(self.path(2, "w-tensor")), src.tobytes())
        self.assertRaises(ValueError, self.client.write_pages,
                          [(2, "w-cuda", FakeTensor(src, "cuda"))])
        self.assertRaises(ValueError, self.client.write_pages,
                          [(2, "w-strided", FakeTensor(src.reshape(2, -1)[:, ::2]))])
        with self.client.region(1 << 20) as r, r.batch(512 << 10, 2) as b:
            dst = FakeTensor(r.array(np.uint16, 4096, PAGE // 2))
            b.add(2, "w-tensor", dst)
            b.add(2, "p0", r.buffer(4096 + PAGE, PAGE))
            self.assertEqual(b.read(), kvfs.Result(2, 0, 2 * PAGE))
            self.assertEqual(b.descs["dst_off"].tolist(), [4096, 4096 + PAGE])
            self.assertEqual(dst.arr.tobytes(), src.tobytes())
            self.assertEqual(r.buffer(4096 + PAGE, PAGE).tobytes(), self.pages[(2, "p0")])
            del dst


# ---- the layer calls: read_layer_async, write_layer_async, out= ----

NAMES = ["p%d" % i for i in range(NPAGES)]


def ready(fd, timeout):
    return select.select([fd], [], [], timeout)[0] == [fd]


class LayerCallsTest(MountedModel):
    def want(self, layer, names):
        return b"".join(self.pages[(layer, n)] for n in names)

    # ---- read_layer_async ----

    def test_read_async_event_fd_and_poll(self):
        """Two layers in flight at once; the event fd wakes the loop and
        poll() gives each layer's rows, views of their own regions."""
        efd = self.client.event_fd()
        self.client.drain_events()
        calls = {layer: self.client.read_layer_async(layer, NAMES, PAGE) for layer in (1, 3)}
        for x in calls.values():
            self.assertIsInstance(x, kvfs.LayerRead)
            self.assertFalse(x.staged)
        got = {}
        for _ in range(100):
            if len(got) == 2:
                break
            self.assertTrue(ready(efd, 10), "event fd not readable within 10 s")
            self.client.drain_events()
            for layer, x in calls.items():
                if layer not in got:
                    res = x.poll()
                    if res is not None:
                        got[layer] = res
        self.assertEqual(sorted(got), [1, 3])
        for layer, rows in got.items():
            self.assertEqual(rows.shape, (NPAGES, PAGE))
            self.assertEqual(rows.tobytes(), self.want(layer, NAMES))
            self.assertTrue(calls[layer].done)
            self.assertIs(calls[layer].poll(), rows)     # collected once, kept

    def test_read_async_wait_page_error(self):
        """A missing page fails the call with PageError, given again by
        every later wait or poll; the other pages arrived."""
        with self.client.region(1 << 20) as r:
            out = r.array(np.uint8, 0, 2 * PAGE).reshape(2, PAGE)
            x = self.client.read_layer_async(2, ["p2", "p3"], PAGE, out=out)
            for collect in (x.wait, x.wait, x.poll):
                with self.assertRaises(kvfs.PageError) as cm:
                    collect()
                self.assertEqual((cm.exception.errno, cm.exception.index),
                                 (errno.ENOENT, 1))
            self.assertEqual(out[0].tobytes(), self.pages[(2, "p2")])
            del out, x, cm, collect    # x holds out, and the region with it

    def test_read_async_asyncio(self):
        async def main():
            xs = [self.client.read_layer_async(layer, NAMES[4:8], PAGE, dtype=np.uint16)
                  for layer in range(4)]
            return await asyncio.wait_for(asyncio.gather(*(x.wait_async() for x in xs)), 10)

        res = asyncio.run(main())
        for layer, rows in enumerate(res):
            self.assertEqual(rows.dtype, np.uint16)
            self.assertEqual(rows.tobytes(), self.want(layer, NAMES[4:8]))

    # ---- out: the caller's memory ----

    def test_read_out_in_a_region_is_direct(self):
        """out lying in a region of the client (a host pool) is filled in
        place: the descriptors point into it, nothing is staged."""
        with self.client.region(4 << 20) as pool:
            pool.buffer()[:] = b"\x5a" * pool.size
            out = pool.array(np.uint8, 8192, 3 * PAGE).reshape(3, PAGE)
            x = self.client.read_layer_async(1, ["p4", "p5", "p6"], PAGE, out=out)
            self.assertFalse(x.staged)
            self.assertIs(x.data, pool)
            self.assertEqual(x.batch.descs["dst_off"].tolist(),
                             [8192, 8192 + PAGE, 8192 + 2 * PAGE])
            self.assertIs(x.wait(), out)
            self.assertEqual(out.tobytes(), self.want(1, ["p4", "p5", "p6"]))
            whole = pool.buffer()     # nothing outside out changed
            self.assertEqual(bytes(whole[:8192]), b"\x5a" * 8192)
            self.assertEqual(bytes(whole[8192 + 3 * PAGE:]),
                             b"\x5a" * (pool.size - 8192 - 3 * PAGE))
            del out, whole, x

    def test_read_out_staged(self):
        """Memory that is in no region (a numpy array, a bytearray) is
        staged: filled with the pages, a short page padded with zeros."""
        out = np.full((2, PAGE), 0x77, np.uint8)
        x = self.client.read_layer_async(0, ["p7", "odd"], PAGE, out=out)
        self.assertTrue(x.staged)
        self.assertIs(x.wait(), out)
        self.assertEqual(out[0].tobytes(), self.pages[(0, "p7")])
        self.assertEqual(out[1, :5000].tobytes(), self.pages[(0, "odd")])
        self.assertFalse(out[1, 5000:].any())
        buf = bytearray(3 * PAGE)
        self.assertIs(self.client.read_layer(3, ["p1", "p2", "p3"], PAGE, out=buf), buf)
        self.assertEqual(bytes(buf), self.want(3, ["p1", "p2", "p3"]))

    def test_read_out_errors(self):
        self.assertRaises(ValueError, self.client.read_layer, 0, ["p0"], PAGE,
                          out=bytearray(PAGE - 1))                   # wrong size
        self.assertRaises(ValueError, self.client.read_layer, 0, ["p0", "p1"], PAGE,
                          out=np.zeros((2, 2 * PAGE), np.uint8)[:, ::2])  # strided
        self.assertRaises(TypeError, self.client.read_layer, 0, ["p0"], PAGE,
                          out=bytes(PAGE))                           # read-only
        self.assertRaises(ValueError, self.client.read_layer_async, 0, [], PAGE)
        with self.client.region(1 << 20) as r:
            out = r.array(np.uint8, 0, PAGE).reshape(1, PAGE)
            self.assertRaises(ValueError, self.client.read_layer, 0, ["p0"], PAGE,
                              region=r, offset=4096, out=out)        # control over out
            del out

    # ---- write_layer_async ----

    def test_write_async_staged_and_direct(self):
        """Rows in no region are copied into one (staged, the caller's
        memory free at once); rows in a region are stored from it."""
        rows = np.frombuffer(os.urandom(3 * PAGE), np.uint8).reshape(3, PAGE).copy()
        x = self.client.write_layer_async(2, ["wa0", "wa1", "wa2"], rows, durable=True)
        self.assertTrue(x.staged)
        rows[:] = 0                                  # already copied
        handles = x.wait()
        self.assertEqual(len(handles), 3)
        self.assertTrue(all(handles))
        with self.client.region(1 << 20) as pool:
            src = pool.array(np.uint8, 4096, 2 * PAGE).reshape(2, PAGE)
            src[:] = np.frombuffer(os.urandom(2 * PAGE), np.uint8).reshape(2, PAGE)
            y = self.client.write_layer_async(2, ["wd0", "wd1"], src)
            self.assertFalse(y.staged)
            self.assertEqual(y.batch.descs["dst_off"].tolist(), [4096, 4096 + PAGE])
            self.assertTrue(all(asyncio.run(asyncio.wait_for(y.wait_async(), 10))))
            self.assertEqual(cat(self.path(2, "wd0")) + cat(self.path(2, "wd1")),
                             src.tobytes())
            del src
        # the staged rows were stored as they were when submitted
        self.assertNotEqual(cat(self.path(2, "wa1")), bytes(PAGE))
        self.assertEqual(len(cat(self.path(2, "wa2"))), PAGE)

    def test_write_async_errors(self):
        x = self.client.write_layer_async(1, ["p0", "wnew"], [b"a" * 100, b"b" * 100])
        with self.assertRaises(kvfs.PageError) as cm:
            x.wait()
        self.assertEqual((cm.exception.errno, cm.exception.index), (errno.EEXIST, 0))
        self.assertEqual(cat(self.path(1, "wnew")), b"b" * 100)
        self.assertEqual(cat(self.path(1, "p0")), self.pages[(1, "p0")])
        self.assertRaises(ValueError, self.client.write_layer_async, 1, ["a", "b"], [b"x"])
        self.assertRaises(ValueError, self.client.write_layer_async, 1, ["a"], [b""])


if __name__ == "__main__":
    test_kvfs.main()
