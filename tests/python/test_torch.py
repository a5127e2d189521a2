#!/usr/bin/env python3
"""torch tensors in the Python binding, against a real mount (the model of
test_kvfs.py): Region.tensor() views (bf16 included) that keep their region
alive; read_layer returning a bf16 tensor that views the region; write_layer
and write_layer_async from bf16 tensor rows (staged, or straight from a
region's tensor); read_layer(out=tensor) into an ordinary tensor (staged:
one memcpy) and into a region's tensor (direct); a tensor as a Batch
destination; device and non-contiguous tensors refused.

Runs in the engines virtual environment (torch; tools/engines_venv.sh):
started by any python3, it re-executes itself there, and exits 77 saying
why without it. Environment and other skips: as test_kvfs.py.
"""
import asyncio
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import engines_env  # noqa: E402
from engines_env import SKIP  # noqa: E402

if __name__ == "__main__":
    engines_env.enter("sglang", "import torch")

import test_kvfs  # noqa: E402
from test_kvfs import NPAGES, PAGE, MountedModel, cat  # noqa: E402

if __name__ == "__main__" and test_kvfs.skip_reason():
    print("SKIP:", test_kvfs.skip_reason())
    sys.exit(SKIP)

import torch  # noqa: E402

import kvfs  # noqa: E402

NAMES = ["p%d" % i for i in range(NPAGES)]
BF16 = torch.bfloat16


def noise(rows, cols, dtype=BF16):
    """Random bits as dtype (any bit pattern: bit-exactness, not values)."""
    return torch.frombuffer(bytearray(os.urandom(rows * cols * dtype.itemsize)),
                            dtype=dtype).reshape(rows, cols)


def raw(t):
    return t.contiguous().view(torch.uint8).numpy().tobytes()


class TorchTest(MountedModel):
    def want(self, layer, names):
        return b"".join(self.pages[(layer, n)] for n in names)

    def test_region_tensor_view(self):
        with self.client.region(1 << 20) as r:
            t = r.tensor(BF16, 4096, shape=(2, 8))
            self.assertEqual((t.dtype, tuple(t.shape)), (BF16, (2, 8)))
            self.assertEqual(t.data_ptr(), r.base + 4096)
            t.fill_(1.5)
            self.assertEqual(r.buffer(4096, 32).tobytes(), raw(torch.full((16,), 1.5, dtype=BF16)))
            whole = r.tensor()
            self.assertEqual((whole.dtype, whole.numel()), (torch.uint8, r.size))
            self.assertEqual(r.tensor(torch.float32, 8).numel(), (r.size - 8) // 4)
            self.assertRaises(ValueError, r.tensor, BF16, 1)          # misaligned
            self.assertRaises(ValueError, r.tensor, BF16, 0, shape=(r.size,))   # too big
            self.assertRaises(BufferError, r.close)                    # views alive
            del t, whole
        self.assertIsNone(r._h)

    def test_read_layer_bf16_view(self):
        rows = self.client.read_layer(1, NAMES, PAGE, dtype=BF16)
        self.assertIsInstance(rows, torch.Tensor)
        self.assertEqual((rows.dtype, tuple(rows.shape)), (BF16, (NPAGES, PAGE // 2)))
        self.assertEqual(raw(rows), self.want(1, NAMES))
        region = next(r for r in self.client._regions
                      if r._h is not None and r.base <= rows.data_ptr() < r.base + r.size)
        self.assertEqual(rows.stride(), (PAGE // 2, 1))
        self.assertEqual(rows[3].data_ptr(), rows.data_ptr() + 3 * PAGE)
        self.assertRaises(BufferError, region.close)    # the tensor views it
        del rows

    def test_write_layer_bf16(self):
        src = noise(3, PAGE // 2)
        names = ["t-bf16-%d" % i for i in range(3)]
        self.client.write_layer(1, names, src, durable=True)
        for i, name in enumerate(names):
            self.assertEqual(cat(self.path(1, name)), raw(src[i]))
        back = self.client.read_layer(1, names, PAGE, dtype=BF16)
        self.assertTrue(torch.equal(back.view(torch.int16), src.view(torch.int16)))
        del back

    def test_write_layer_async_tensors(self):
        """Staged from an ordinary tensor (free again at once), and
        straight from a region's tensor (zero copy), awaited."""
        src = noise(2, PAGE // 2)
        keep = src.clone()
        x = self.client.write_layer_async(3, ["t-a0", "t-a1"], src)
        self.assertTrue(x.staged)
        src.zero_()
        self.assertEqual(len(x.wait()), 2)
        self.assertEqual(cat(self.path(3, "t-a0")) + cat(self.path(3, "t-a1")), raw(keep))
        with self.client.region(1 << 20) as pool:
            rows = pool.tensor(BF16, 8192, shape=(2, PAGE // 2))
            rows.copy_(noise(2, PAGE // 2))
            y = self.client.write_layer_async(3, ["t-d0", "t-d1"], rows, durable=True)
            self.assertFalse(y.staged)
            self.assertTrue(all(asyncio.run(asyncio.wait_for(y.wait_async(), 10))))
            self.assertEqual(cat(self.path(3, "t-d0")) + cat(self.path(3, "t-d1")), raw(rows))
            del rows

    def test_read_out_tensor_staged(self):
        """An ordinary tensor (memory with no fd, as a pin_memory tensor)
        is filled through a staging region, one memcpy; a short page is
        padded with zeros."""
        out = torch.full((2, PAGE // 2), 7.0, dtype=BF16)
        x = self.client.read_layer_async(0, ["p2", "odd"], PAGE, out=out)
        self.assertTrue(x.staged)
        self.assertIs(x.wait(), out)
        got = raw(out)
        self.assertEqual(got[:PAGE], self.pages[(0, "p2")])
        self.assertEqual(got[PAGE:PAGE + 5000], self.pages[(0, "odd")])
        self.assertEqual(got[PAGE + 5000:], bytes(PAGE - 5000))

    def test_read_out_region_tensor_direct(self):
        with self.client.region(2 << 20) as pool:
            out = pool.tensor(BF16, PAGE, shape=(4, PAGE // 2))
            x = self.client.read_layer_async(3, NAMES[:4], PAGE, out=out)
            self.assertFalse(x.staged)
            self.assertEqual(x.batch.descs["dst_off"].tolist(),
                             [PAGE * (1 + i) for i in range(4)])
            self.assertIs(x.wait(), out)
            self.assertEqual(raw(out), self.want(3, NAMES[:4]))
            del out, x

    def test_batch_tensor_destination(self):
        with self.client.region(1 << 20) as r, r.batch(512 << 10, 1) as b:
            dst = r.tensor(BF16, 4096, shape=(PAGE // 2,))
            b.add(2, "p5", dst)
            self.assertEqual(b.read(), kvfs.Result(1, 0, PAGE))
            self.assertEqual(b.descs["dst_off"].tolist(), [4096])
            self.assertEqual(raw(dst), self.pages[(2, "p5")])
            del dst

    def test_refused(self):
        src = noise(2, PAGE)
        self.assertRaises(ValueError, self.client.write_layer, 0, ["t-x", "t-y"],
                          src[:, ::2])                               # not contiguous
        self.assertRaises(ValueError, self.client.read_layer, 0, ["p0"], PAGE,
                          out=torch.empty(PAGE // 2, dtype=BF16, device="meta"))
        self.assertRaises(ValueError, self.client.read_layer, 0, ["p0"], PAGE,
                          out=torch.empty(PAGE, dtype=BF16))          # twice the size
        self.assertFalse(os.path.exists(self.path(0, "t-x")))


if __name__ == "__main__":
    test_kvfs.main()
