"""Checks for metrics.sh, one step per invocation: python3 metrics.py STEP MNT [ARGS].

The control directory MOUNT/.kvfs: stats (JSON) and metrics (Prometheus
text), their agreement with each other, with docs/metrics.md and with the
user.kvfs.stats xattr, and the counters moving as pages are written and read.
"""
import errno
import json
import math
import os
import re
import sys

DOC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "docs", "metrics.md")
SECTIONS = ["ram", "ssd", "namespace", "reads", "writes", "dedup", "pages", "writeback", "sched", "fastpath", "events"]
LAT_OPS = ["read", "write", "lookup", "prefetch"]
SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+)$')


def check(cond, what):
    if not cond:
        sys.exit("FAIL: " + what)


def stats(mnt):
    with open(f"{mnt}/.kvfs/stats") as f:
        return json.load(f)


def prom(mnt):
    """{family: type}, {(name, labels): value}, with the format checked."""
    types, helps, samples = {}, set(), {}
    with open(f"{mnt}/.kvfs/metrics") as f:
        text = f.read()
    check(text.endswith("\n"), "metrics file does not end in a newline")
    for line in text.splitlines():
        if line.startswith("# HELP "):
            helps.add(line.split()[2])
            continue
        if line.startswith("# TYPE "):
            _, _, name, typ = line.split()
            check(name not in types, f"two TYPE lines for {name}")
            check(typ in ("counter", "gauge", "histogram"), f"type {typ} of {name}")
            types[name] = typ
            continue
        m = SAMPLE.match(line)
        check(m is not None, f"not a sample line: {line!r}")
        name, labels, value = m.group(1), m.group(2) or "", m.group(3)
        check(name.startswith("kvfs_"), f"{name}: no kvfs_ prefix")
        fam = re.sub(r"_(bucket|sum|count)$", "", name) if name.startswith(
            "kvfs_fastpath_latency_seconds") else name
        check(fam in types, f"sample {name} before its TYPE line")
        check((name, labels) not in samples, f"duplicate sample {name}{labels}")
        samples[(name, labels)] = float(value)
    check(set(types) == helps, f"HELP and TYPE differ: {set(types) ^ helps}")
    for name, typ in types.items():
        if typ == "counter":
            check(name.endswith("_total"), f"counter {name} does not end in _total")
        elif typ == "gauge":
            check(not name.endswith("_total"), f"gauge {name} ends in _total")
    return types, samples


def doc_table():
    """Families and JSON keys listed in docs/metrics.md's tables."""
    fams, keys = {}, set()
    with open(DOC) as f:
        for line in f:
            m = re.match(r"^\| `(kvfs_[a-z0-9_]+)` \| (\w+) \| [^|]* \| ([^|]*) \|", line)
            if m:
                fams[m.group(1)] = m.group(2)
                keys.update(re.findall(r"`([a-z_]+\.[a-z0-9_]+)`", m.group(3)))
    return fams, keys


def json_keys(s):
    return {f"{sec}.{k}" for sec in SECTIONS for k in s[sec]}


def step_docs(mnt):
    """(1) every documented family is in the file and every family in the
    file is documented, with the same type; the same for JSON keys."""
    s = stats(mnt)
    types, _ = prom(mnt)
    fams, keys = doc_table()
    check(len(fams) > 40, f"only {len(fams)} families parsed from {DOC}")
    missing = set(fams) - set(types)
    undocumented = set(types) - set(fams)
    check(not missing, f"documented but not in .kvfs/metrics: {sorted(missing)}")
    check(not undocumented, f"in .kvfs/metrics but not documented: {sorted(undocumented)}")
    for name, typ in types.items():
        check(fams[name] == typ, f"{name}: type {typ}, documented as {fams[name]}")
    check(sorted(s) == sorted(SECTIONS + ["latency"]), f"JSON sections {sorted(s)}")
    jk = json_keys(s) - {"ssd.mode"}
    check(not keys - jk, f"documented JSON keys missing: {sorted(keys - jk)}")
    check(not jk - keys, f"JSON keys not documented: {sorted(jk - keys)}")
    with open(DOC) as f:
        doc = f.read()
    check("`ssd.mode`" in doc and "`latency.<op>.p99_seconds`" in doc, "JSON-only keys documented")
    check(s["ssd"]["mode"] in ("cache", "authoritative"), f"ssd.mode {s['ssd']['mode']}")


def step_hist(mnt):
    """The histogram: cumulative buckets, le from 1e-06 doubling, +Inf last,
    +Inf == _count; the JSON buckets say the same."""
    s = stats(mnt)
    _, samples = prom(mnt)
    for op in LAT_OPS:
        les = [(lab, v) for (n, lab), v in samples.items()
               if n == "kvfs_fastpath_latency_seconds_bucket" and f'op="{op}"' in lab]
        check(len(les) == 24, f"{op}: {len(les)} buckets")
        bounds = [re.search(r'le="([^"]+)"', lab).group(1) for lab, _ in les]
        check(bounds[-1] == "+Inf", f"{op}: last bucket le={bounds[-1]}")
        for i, b in enumerate(bounds[:-1]):
            check(math.isclose(float(b), 2 ** i / 1e6), f"{op}: bucket {i} le={b}")
        counts = [v for _, v in les]
        check(all(a <= b for a, b in zip(counts, counts[1:])), f"{op}: not cumulative {counts}")
        total = samples[("kvfs_fastpath_latency_seconds_count", f'{{op="{op}"}}')]
        check(counts[-1] == total, f"{op}: +Inf {counts[-1]} != _count {total}")
        check(("kvfs_fastpath_latency_seconds_sum", f'{{op="{op}"}}') in samples, f"{op}: _sum")
        jb = s["latency"][op]["buckets"]
        check(len(jb) == 24 and jb[-1]["le"] == "+Inf", f"JSON buckets of {op}")
        check(s["latency"][op]["count"] == jb[-1]["count"], f"JSON count of {op}")


def agree(s, samples):
    """(4) JSON and Prometheus carry the same numbers."""
    pairs = [
        (s["writes"]["bytes_accepted_fuse"], "kvfs_accepted_bytes_total", '{path="fuse"}'),
        (s["writes"]["ssd_bytes_written"], "kvfs_ssd_written_bytes_total", '{path="writeback"}'),
        (s["pages"]["sealed"], "kvfs_pages_sealed_total", ""),
        (s["ssd"]["pages"], "kvfs_tier_pages", '{tier="ssd"}'),
        (s["ssd"]["physical_bytes"], "kvfs_ssd_physical_bytes", ""),
        (s["ram"]["budget_bytes"], "kvfs_ram_budget_bytes", ""),
        (s["reads"]["fuse_bytes_disk"], "kvfs_read_bytes_total", '{path="fuse",tier="ssd"}'),
        (s["writeback"]["budget_bytes"], "kvfs_writeback_budget_bytes", ""),
    ]
    for jv, name, labels in pairs:
        pv = samples.get((name, labels))
        check(pv is not None, f"no sample {name}{labels}")
        check(pv == jv, f"{name}{labels} = {pv}, JSON says {jv}")
    wa = samples[("kvfs_write_amplification_ratio", "")]
    check(math.isclose(wa, s["writes"]["write_amplification"], rel_tol=1e-5),
          f"write amplification {wa} vs {s['writes']['write_amplification']}")


def xattr_stats(mnt):
    raw = os.getxattr(mnt, "user.kvfs.stats").decode()
    return {k: int(v) for k, v in (line.split() for line in raw.splitlines())}


def step_save(mnt, path):
    """Keep a snapshot of both files for a later step."""
    s = stats(mnt)
    _, samples = prom(mnt)
    agree(s, samples)
    with open(path, "w") as f:
        json.dump(s, f)


def step_writes(mnt, before, pages, size):
    """(2) after `cp` of `pages` pages of `size` distinct bytes through FUSE."""
    with open(before) as f:
        b = json.load(f)
    s = stats(mnt)
    _, samples = prom(mnt)
    agree(s, samples)
    n, nbytes = int(pages), int(pages) * int(size)
    grew = s["writes"]["bytes_accepted_fuse"] - b["writes"]["bytes_accepted_fuse"]
    check(grew == nbytes, f"bytes_accepted_fuse grew by {grew}, {nbytes} written")
    check(s["writes"]["bytes_accepted_fast"] == b["writes"]["bytes_accepted_fast"],
          "fast-path bytes moved without fast-path writes")
    check(s["pages"]["sealed"] - b["pages"]["sealed"] == n, "pages sealed")
    check(s["ssd"]["pages"] - b["ssd"]["pages"] == n, "ssd pages")
    check(s["ssd"]["logical_bytes"] - b["ssd"]["logical_bytes"] == nbytes, "ssd logical bytes")
    check(s["writes"]["ssd_bytes_written"] - b["writes"]["ssd_bytes_written"] >= nbytes,
          "write-back wrote fewer bytes than were accepted (distinct pages, no dedup)")
    check(s["writes"]["write_amplification"] >= 1.0,
          f"write amplification {s['writes']['write_amplification']} < 1")
    check(s["writeback"]["dirty_bytes"] == 0, "dirty bytes left after the directory fsync")
    check(s["writeback"]["peak_bytes"] >= int(size), "write-back peak below one page")
    x = xattr_stats(mnt)
    check(x["pages_sealed"] == s["pages"]["sealed"], "user.kvfs.stats pages_sealed disagrees")
    for k in ("pages_deduplicated", "bytes_saved_by_dedup", "dirty_bytes", "dirty_peak",
              "sched_fifo", "bytes_read_disk"):
        check(k in x, f"user.kvfs.stats lost key {k}")


def step_reads(mnt, before, nbytes):
    """(2) after cat of nbytes of pages (fresh mount: not in the kernel's cache)."""
    with open(before) as f:
        b = json.load(f)
    s = stats(mnt)
    _, samples = prom(mnt)
    agree(s, samples)
    grew = sum(s["reads"][k] - b["reads"][k] for k in ("fuse_bytes_disk", "fuse_bytes_ram"))
    check(grew >= int(nbytes), f"FUSE reads grew by {grew} after reading {nbytes} bytes")
    ram = s["ram"]
    hits = ram["hits"] + s["ssd"]["hits"] - b["ram"]["hits"] - b["ssd"]["hits"]
    if ram["budget_bytes"]:
        check(hits > 0, "a read tier saw no lookup")
    check(0 <= ram["hit_ratio"] <= 1, f"hit ratio {ram['hit_ratio']}")


def step_chunked(mnt):
    """One open = one snapshot: 7-byte reads add up to valid JSON."""
    fd = os.open(f"{mnt}/.kvfs/stats", os.O_RDONLY)
    parts = []
    try:
        while True:
            b = os.read(fd, 7)
            if not b:
                break
            parts.append(b)
    finally:
        os.close(fd)
    check(len(parts) > 10, "stats is tiny")
    json.loads(b"".join(parts))
    st = os.stat(f"{mnt}/.kvfs/stats")
    check(st.st_mode & 0o777 == 0o444, f"stats mode {oct(st.st_mode)}")
    check(st.st_ino > 2 ** 63, f"stats inode {st.st_ino} could collide with the index's")
    check(st.st_blocks == 0, "control files must not count for du")


def expect(code, want, what):
    try:
        code()
    except OSError as e:
        check(e.errno in want, f"{what}: {errno.errorcode.get(e.errno)}, want "
              + "/".join(errno.errorcode[w] for w in want))
        return
    check(False, f"{what}: succeeded")


def step_readonly(mnt):
    """(3) nothing in .kvfs can be written, created or removed."""
    import fcntl
    ctl, f = f"{mnt}/.kvfs", f"{mnt}/.kvfs/stats"
    deny = (errno.EPERM, errno.EACCES)
    for g in (f, f"{mnt}/.kvfs/events"):
        expect(lambda: open(g, "w"), deny, f"open {g} for writing")
        expect(lambda: os.open(g, os.O_RDWR), deny, f"open {g} O_RDWR")
        expect(lambda: os.open(g, os.O_RDONLY | os.O_TRUNC), deny, f"open {g} O_TRUNC")
        expect(lambda: os.truncate(g, 0), deny, f"truncate {g}")
        expect(lambda: os.chmod(g, 0o666), deny, f"chmod {g}")
        expect(lambda: os.utime(g, (0, 0)), deny, f"utime {g}")
        expect(lambda: os.unlink(g), deny, f"unlink {g}")
    expect(lambda: os.open(f"{ctl}/new", os.O_CREAT | os.O_WRONLY, 0o644), deny, "create")
    expect(lambda: os.mkdir(f"{ctl}/d"), deny, "mkdir inside")
    expect(lambda: os.unlink(f), deny, "unlink")
    expect(lambda: os.rmdir(ctl), deny + (errno.ENOTEMPTY,), "rmdir .kvfs")
    expect(lambda: os.rename(f, f"{ctl}/x"), deny, "rename inside")
    expect(lambda: os.rename(ctl, f"{mnt}/kvfs2"), deny, "rename .kvfs")
    expect(lambda: os.rename(f"{mnt}/m", ctl), deny + (errno.ENOTEMPTY, errno.EEXIST),
           "rename a model over .kvfs")
    expect(lambda: os.rename(f"{mnt}/m", f"{mnt}/.kvfs2"), deny, "rename a model to .kvfs*")
    expect(lambda: os.mkdir(f"{mnt}/.kvfs"), (errno.EEXIST,), "mkdir .kvfs")
    expect(lambda: os.mkdir(f"{mnt}/.kvfsx"), deny, "mkdir .kvfsx")
    expect(lambda: os.setxattr(f, "user.kvfs.geometry", b"layers=1"), deny, "setxattr")
    expect(lambda: os.symlink("x", f"{ctl}/l"), deny, "symlink")
    expect(lambda: os.link(f, f"{mnt}/m/00/l"), deny + (errno.EXDEV,), "link")
    fd = os.open(ctl, os.O_RDONLY | os.O_DIRECTORY)
    try:
        expect(lambda: fcntl.ioctl(fd, 0x40087801, b"\0" * 8), (errno.ENOTTY,), "ioctl")
    finally:
        os.close(fd)
    check(sorted(os.listdir(ctl)) == ["events", "metrics", "stats"], f"ls .kvfs: {os.listdir(ctl)}")
    check(os.path.isdir(f"{mnt}/m"), "the model went away")


STEPS = {
    "docs": step_docs, "hist": step_hist, "save": step_save, "writes": step_writes,
    "reads": step_reads, "chunked": step_chunked, "readonly": step_readonly,
}

if __name__ == "__main__":
    STEPS[sys.argv[1]](*sys.argv[2:])
