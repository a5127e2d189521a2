#!/usr/bin/python3
"""RAM tier benchmark, one store, one run: fast-path READ of one layer
with the tier off (the device), cold with the tier on (the device, plus
keeping a copy), warm (the RAM tier), and after a PREFETCH.

usage: tools/bench_ramtier.py [--pages N] [--size BYTES] [--dir DIR] [--runs R]
Needs KVFS (the kvfs binary, default build/tools/kvfs) and KVFS_LIB
(libkvfs.so, default build/client/libkvfs.so); run as root (it mounts and
drops the kernel's caches between cold runs).
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
os.environ.setdefault("KVFS_LIB", os.path.join(ROOT, "build", "client", "libkvfs.so"))
sys.path.insert(0, os.path.join(ROOT, "client", "python"))
import kvfs  # noqa: E402

KVFS = os.environ.get("KVFS", os.path.join(ROOT, "build", "tools", "kvfs"))


def mounted(mnt):
    with open("/proc/mounts") as f:
        return any(line.split()[1] == mnt for line in f)


class Daemon:
    def __init__(self, store, mnt, opts):
        self.mnt = mnt
        self.p = subprocess.Popen([KVFS, "mount", store, mnt, "-f", "-o", opts],
                                  stderr=subprocess.DEVNULL)
        for _ in range(100):
            if mounted(mnt):
                return
            time.sleep(0.1)
        raise RuntimeError("mount did not appear")

    def stop(self):
        subprocess.run(["fusermount3", "-u", self.mnt], check=True)
        self.p.wait()


def drop_caches():
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


class Reader:
    """One client, region and batch for the layer: only READ is timed."""

    def __init__(self, model, names, size):
        self.c = kvfs.Client(model)
        n = len(names)
        self.r = self.c.region(n * size + kvfs.Batch.ctl_bytes(n))
        self.b = self.r.batch(n * size, n)
        for i, name in enumerate(names):
            self.b.add(0, name, i * size, size)

    def read(self):
        t0 = time.perf_counter()
        res = self.b.read()
        dt = time.perf_counter() - t0
        if res.failed:
            raise RuntimeError("%d pages failed" % res.failed)
        return dt

    def close(self):
        self.b.close()
        self.r.close()
        self.c.close()


def timed_reads(model, names, size, n):
    rd = Reader(model, names, size)
    try:
        return [rd.read() for _ in range(n)]
    finally:
        rd.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pages", type=int, default=1024)
    ap.add_argument("--size", type=int, default=65536)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--dir", default="/var/tmp")
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="kvfs-ramtier.", dir=a.dir)
    store, mnt = os.path.join(tmp, "store"), os.path.join(tmp, "mnt")
    os.mkdir(mnt)
    names = ["p%06d" % i for i in range(a.pages)]
    total = a.pages * a.size
    try:
        subprocess.run([KVFS, "mkfs", store], check=True, stdout=subprocess.DEVNULL)
        d = Daemon(store, mnt, "ram_cache=0")
        model = os.path.join(mnt, "m")
        os.makedirs(os.path.join(model, "00"))
        with kvfs.Client(model) as c:
            c.write_pages([(0, n, os.urandom(a.size)) for n in names], durable=True)
        d.stop()
        cache = "ram_cache=%d" % (2 * total + (64 << 20))
        res = {"tier off": [], "cold": [], "warm": [], "prefetched": []}
        for _ in range(a.runs):
            drop_caches()
            d = Daemon(store, mnt, "ram_cache=0")  # the device, nothing kept
            res["tier off"].append(timed_reads(model, names, a.size, 1)[0])
            d.stop()
            drop_caches()
            d = Daemon(store, mnt, cache)         # an empty tier
            t = timed_reads(model, names, a.size, 4)
            res["cold"].append(t[0])
            res["warm"].append(min(t[1:]))
            d.stop()
            drop_caches()
            d = Daemon(store, mnt, cache)
            with kvfs.Client(model) as c:
                c.prefetch_layer(0, names)
            time.sleep(2)                          # "computing" while it loads
            res["prefetched"].append(timed_reads(model, names, a.size, 1)[0])
            d.stop()
        print("%d pages of %d KiB (%.0f MiB), best of %d runs:"
              % (a.pages, a.size // 1024, total / 2**20, a.runs))
        cold = min(res["tier off"])
        for k in ("tier off", "cold", "warm", "prefetched"):
            t = min(res[k])
            print("  %-11s %8.2f ms  %7.2f GB/s  %6.2fx the device"
                  % (k, t * 1e3, total / t / 1e9, cold / t))
    finally:
        if mounted(mnt):
            subprocess.run(["fusermount3", "-u", "-z", mnt])
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
