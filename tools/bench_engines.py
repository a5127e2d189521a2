#!/usr/bin/env python3
"""Restore benchmark for the engine backends (issue 18): an engine's own
objects, restored cold through each engine's kvfs backend and through that
engine's own file backend, on the same disk, in one run.

usage: tools/bench_engines.sh [DIR ...] [-- OPTIONS]      (mounts, venv, root)
       python3 tools/bench_engines.py --dir DIR [--gib G] [--runs R]
                                      [--backends NAME,NAME] [--kvfs-opts O]
                                      [--perf DIR] [--list]

Each backend is a row of BACKENDS (one module per engine:
tools/bench_engines_<engine>.py registers its rows with @backend). A row
stores --gib GiB of the engine's pages through the engine's own store
calls, once; then, --runs times and interleaved with the other rows (so
the machine's noise hits every row alike), its data is made cold and
restored through the engine's own restore calls, timed, and checked bit
for bit against what was stored. Cold: `sync`, then
/proc/sys/vm/drop_caches, and for kvfs rows a remount (an empty RAM tier),
before a fresh backend instance (as after an engine restart) is made; only
the restore calls are timed. On tmpfs (/dev/shm) dropping caches does not
drop the files: there the numbers are the software's cost alone.

Reported per row and run: GB/s (10^9 bytes), this process's CPU seconds
and the kvfs daemon's CPU seconds per GB restored, calls made and ms per
call, and "others s": CPU seconds the rest of the machine used meanwhile
(on a shared machine, the noise); then per engine the ratio kvfs / the engine's own backend, per run
(same run, same disk) and their median.

Engines: one module each, tools/bench_engines_<engine>.py (sglang, vllm,
lmcache), with classes decorated @backend (subclasses of Backend; a row's
name starts with its engine's) and optional module functions
add_arguments(parser) and configure(args) for its own options; a new
engine goes in ENGINE_MODULES. The engines live in two virtual
environments (SGLang's pins another torch than vLLM's and LMCache's), so
a run loads the engines of its interpreter: $KVFS_BENCH_ENGINES (which
bench_engines.sh sets per venv), else every module that imports;
--engines narrows them. Rows of --backends whose engine is not loaded are
left to the other venv's run. Environment: KVFS (the kvfs binary),
KVFS_LIB (libkvfs.so); run as root in an engines venv.
"""
import argparse
import importlib
import os
import signal
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "client", "python"))
sys.path.insert(0, os.path.join(ROOT, "tests", "python"))
sys.path.insert(0, os.path.join(ROOT, "tools"))
os.environ.setdefault("KVFS", os.path.join(ROOT, "build", "tools", "kvfs"))
os.environ.setdefault("KVFS_LIB", os.path.join(ROOT, "build", "client", "libkvfs.so"))

# The engine modules import this one as bench_engines: one registry.
sys.modules.setdefault("bench_engines", sys.modules[__name__])

ENGINE_MODULES = {"sglang": "bench_engines_sglang", "vllm": "bench_engines_vllm",
                  "lmcache": "bench_engines_lmcache"}
BACKENDS = {}       # name -> Backend subclass, in registration order


def backend(cls):
    """Register a Backend subclass as a row, under cls.name."""
    if cls.name in BACKENDS:
        raise ValueError("two benchmark rows are named %r" % cls.name)
    BACKENDS[cls.name] = cls
    return cls


class Backend:
    """One row. Subclasses set name ("sglang-file"), engine ("sglang"),
    label (how the table shows it), baseline (True for the engine's own
    backend, which the kvfs rows of the engine are compared with) and
    uses_kvfs, and implement the methods below. self.bench is the Bench:
    its args, workdir and (for uses_kvfs rows) mount."""
    name = engine = label = None
    baseline = False
    uses_kvfs = False

    def __init__(self, bench):
        self.bench = bench

    def prepare(self, nbytes):
        """Make the engine's objects: about nbytes of pages, and what they
        are restored into. Returns the bytes of pages. Not timed."""
        raise NotImplementedError

    def store(self):
        """Store every page through the engine's own store calls. Timed,
        but not cold: reported as a store rate, for reference."""
        raise NotImplementedError

    def reopen(self):
        """After the data went cold: a fresh backend instance, as after an
        engine restart, with the restore destination cleared. Not timed."""
        raise NotImplementedError

    def restore(self):
        """Restore everything through the engine's own restore calls:
        timed. Returns (bytes restored, calls made)."""
        raise NotImplementedError

    def verify(self):
        """Raise AssertionError unless what restore() brought back is what
        prepare() stored, bit for bit."""
        raise NotImplementedError

    def close(self):
        pass


def drop_caches():
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def busy():
    """CPU seconds the whole machine spent busy (all CPUs, steal
    included): less this process's and the daemon's, what other work on
    a shared machine took while a restore was timed."""
    with open("/proc/stat") as f:
        t = [int(x) for x in f.readline().split()[1:9]]
    return (sum(t) - t[3] - t[4]) / os.sysconf("SC_CLK_TCK")   # less idle, iowait


def cpu_of(pid):
    """User + system CPU seconds of a process (all its threads)."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Bench:
    def __init__(self, args):
        self.args = args
        os.environ["KVFS_TEST_DIR"] = args.dir
        from test_kvfs import Mount
        self.kmount = Mount()            # its tmp directory is the workdir
        self.workdir = self.kmount.tmp
        self.mount = None
        self.perf_runs = 0

    def start_kvfs(self):
        if self.mount is None:
            self.kmount.start(self.args.kvfs_opts or None)
            self.mount = self.kmount.mnt

    def stop_kvfs(self):
        if self.mount is not None:
            rc = self.kmount.stop()
            self.mount = None
            if rc not in (0, None):
                raise RuntimeError("kvfs daemon exited %s:\n%s" % (rc, self.kmount.log_tail()))

    def daemon_cpu(self):
        return cpu_of(self.kmount.daemon.pid) if self.mount else 0.0

    def perf_start(self, row):
        """With --perf DIR: `perf record` the daemon while a kvfs row
        restores (DIR/<row>.<n>.data; perf report --sort sym)."""
        if not self.args.perf or not self.mount:
            return None
        os.makedirs(self.args.perf, exist_ok=True)
        self.perf_runs += 1
        out = os.path.join(self.args.perf, "%s.%d.data" % (row.name, self.perf_runs))
        p = subprocess.Popen(["perf", "record", "-q", "-F", "999", "-g", "-o", out,
                              "-p", str(self.kmount.daemon.pid)], stderr=subprocess.DEVNULL)
        time.sleep(0.5)          # attached before the timed calls start
        return p

    def perf_stop(self, p):
        if p is not None:
            p.send_signal(signal.SIGINT)
            p.wait()

    def close(self):
        self.stop_kvfs()
        if os.environ.get("KVFS_TEST_KEEP"):
            print("kept", self.workdir, file=sys.stderr)
        else:
            self.kmount.remove()


def run_cold(bench, rows):
    """One cold restore of every row, in this order; returns a dict per
    row."""
    out = {}
    for r in rows:
        for o in rows:             # every backend closed: nothing held open
            o.close()
        bench.stop_kvfs()
        drop_caches()
        if r.uses_kvfs:
            bench.start_kvfs()
        r.reopen()
        prof = bench.perf_start(r)
        s0, c0, d0 = busy(), time.process_time(), bench.daemon_cpu()
        t0 = time.perf_counter()
        nbytes, calls = r.restore()
        dt = time.perf_counter() - t0
        s1, c1, d1 = busy(), time.process_time(), bench.daemon_cpu()
        bench.perf_stop(prof)
        r.verify()
        gb = nbytes / 1e9
        out[r.name] = dict(bytes=nbytes, s=dt, gbs=gb / dt, calls=calls,
                           ms_call=dt * 1e3 / max(calls, 1),
                           cpu_gb=(c1 - c0) / gb, dcpu_gb=(d1 - d0) / gb,
                           others=max(0.0, (s1 - s0) - (c1 - c0) - (d1 - d0)))
    return out


def report(args, rows, runs, stores):
    print("\n%s (%s), %.2f GiB per row, %d cold runs, kvfs -o %s"
          % (args.dir, fs_type(args.dir), args.gib, len(runs), args.kvfs_opts or "(defaults)"))
    print("%-20s %3s %9s %6s %8s %11s %5s %8s %8s" % (
        "backend", "run", "restore s", "GB/s", "CPU s/GB", "daemon s/GB", "calls",
        "ms/call", "others s"))
    for r in rows:
        for i, res in enumerate(runs):
            x = res[r.name]
            print("%-20s %3d %9.3f %6.2f %8.3f %11.3f %5d %8.2f %8.2f" % (
                r.label, i + 1, x["s"], x["gbs"], x["cpu_gb"], x["dcpu_gb"],
                x["calls"], x["ms_call"], x["others"]))
    for r in rows:
        if r.name in stores:
            print("store (warm, not cold): %-22s %.2f GB/s" % (r.label, stores[r.name]))
    for base in (r for r in rows if r.baseline):
        for k in (r for r in rows if r.engine == base.engine and not r.baseline):
            ratios = [res[k.name]["gbs"] / res[base.name]["gbs"] for res in runs]
            print("ratio %s: %s / %s = %.2fx median (runs: %s)" % (
                base.engine, k.label, base.label, statistics.median(ratios),
                " ".join("%.2f" % x for x in ratios)))


def fs_type(path):
    best, kind = "", "?"
    with open("/proc/mounts") as f:
        for line in f:
            p = line.split()
            if path.startswith(p[1].rstrip("/") + "/") or path == p[1]:
                if len(p[1]) > len(best):
                    best, kind = p[1], p[2]
    return kind


LOADED = []


def other_engines_options(extra):
    """What is left of extra once the options of engines not loaded here
    (--<engine>-..., each with its value) are dropped: bench_engines.sh
    passes the same options to every venv's run."""
    rest, skip = [], False
    for a in extra:
        if skip and not a.startswith("--"):
            skip = False
            continue
        eng = a[2:].split("-")[0] if a.startswith("--") else None
        skip = eng in ENGINE_MODULES and eng not in LOADED
        if not skip:
            rest.append(a)
        elif "=" in a:
            skip = False
    return rest


def load_engines(ap, wanted):
    """Import the engines' modules: those named (an error if one does not
    import), else every one that imports in this interpreter."""
    here = [n for n in os.environ.get("KVFS_BENCH_ENGINES", "").split(",") if n]
    names = [n for n in wanted.split(",") if n]
    bad = [n for n in names + here if n not in ENGINE_MODULES]
    if bad:
        ap.error("unknown engines %s (%s)" % (", ".join(bad), ", ".join(ENGINE_MODULES)))
    if here:                    # this venv's engines, narrowed by --engines
        names = [n for n in here if n in names] if names else here
        if not names:
            return []
    mods = []
    for eng in names or list(ENGINE_MODULES):
        try:
            mods.append(importlib.import_module(ENGINE_MODULES[eng]))
        except ImportError as e:
            if names:
                ap.error("engine %s does not import here (%s): %s" % (eng, sys.prefix, e))
            continue
        LOADED.append(eng)
    if not mods:
        ap.error("no engine imports in %s: run it in an engines venv" % sys.prefix)
    return mods


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dir", default="/var/tmp", help="where the stores go (one disk)")
    ap.add_argument("--gib", type=float, default=1.0, help="GiB of pages per row")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--backends", default="", help="rows, comma-separated (default: all)")
    ap.add_argument("--kvfs-opts", default="", help="kvfs mount -o options")
    ap.add_argument("--perf", default="", metavar="DIR",
                    help="perf record the daemon during each kvfs restore, into DIR")
    ap.add_argument("--list", action="store_true", help="list the rows and exit")
    ap.add_argument("--engines", default="", help="engines to load, comma-separated "
                    "(default: $KVFS_BENCH_ENGINES, else those that import here)")
    pre, _ = ap.parse_known_args()
    mods = load_engines(ap, pre.engines)
    for m in mods:                  # an engine's own options (geometry)
        if hasattr(m, "add_arguments"):
            m.add_arguments(ap)
    args, extra = ap.parse_known_args()
    rest = other_engines_options(extra)
    if rest:
        ap.error("unrecognized arguments: %s" % " ".join(rest))
    for m in mods:
        if hasattr(m, "configure"):
            m.configure(args)
    if args.list:
        for name, cls in BACKENDS.items():
            print("%-22s %s" % (name, cls.__doc__.strip().splitlines()[0]))
        return 0
    names = [n for n in args.backends.split(",") if n] or list(BACKENDS)
    # another venv's rows: its own run measures them
    names = [n for n in names if n in BACKENDS or n.split("-")[0] not in ENGINE_MODULES
             or n.split("-")[0] in LOADED]
    unknown = [n for n in names if n not in BACKENDS]
    if unknown:
        ap.error("unknown backends %s (--list shows them)" % ", ".join(unknown))
    if not names:
        print("bench_engines: no rows asked for among this venv's engines (%s)"
              % (", ".join(LOADED) or os.environ.get("KVFS_BENCH_ENGINES", "none")))
        return 0
    if os.geteuid() != 0:
        ap.error("run as root: it drops the kernel's caches and mounts kvfs")
    bench = Bench(args)
    rows = [BACKENDS[n](bench) for n in names]
    try:
        stores = {}
        for r in rows:
            if r.uses_kvfs:
                bench.start_kvfs()
            n = r.prepare(int(args.gib * (1 << 30)))
            t0 = time.perf_counter()
            r.store()
            stores[r.name] = n / 1e9 / (time.perf_counter() - t0)
            r.close()
        # each run in another order: no row always goes first (or last)
        runs = [run_cold(bench, rows[i % len(rows):] + rows[:i % len(rows)])
                for i in range(args.runs)]
        report(args, rows, runs, stores)
    finally:
        for r in rows:
            r.close()
        bench.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
