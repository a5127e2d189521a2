#!/usr/bin/env python3
"""Load and checks for tests/mount/powercut.sh (power cut of the store's
backing filesystem).

  powercut.py load MODEL_DIR JOURNAL TAG SECONDS
  powercut.py check MODEL_DIR JOURNAL

Every payload names itself: its first HDR bytes are "kvfspc:<tag>" padded
with spaces and the rest is derived from the tag and the length, so any
visible page can be checked for being whole without a side channel (a torn,
zeroed or misplaced page fails). The journal lives outside the store's
filesystem; load appends, with a flush after each line:

  I <name> <tag> <time>  before a tmp+rename publish onto <name> (it may
                         or may not survive a crash)
  A <name> <tag> <time>  after an fsync (or a durable fast-path write) that
                         covers <name> holding <tag> RETURNED SUCCESS; never
                         before

and powercut.sh adds
  R - - <time>           before it starts a load
  C - - <time>           just before it cuts the power: an A after it (and
                         before the next R) was in flight at the cut

<time> is UTC HH:MM:SS.mmm, as in the daemon log.

check: every name acknowledged before a cut is present and holds its last
acknowledged tag, or (published names only) a tag published after that
acknowledgement; every visible page reads back without error and is whole.
A page acknowledged during a cut may be missing; if present it must hold
its tag, and it is required from then on (check appends K <name> <tag>).
Exits non-zero with one line per problem.
"""
import errno
import hashlib
import os
import random
import sys
import time

HDR = 48
LAYERS = ("00", "01", "02")


def payload(tag, size):
    head = f"kvfspc:{tag}".encode().ljust(HDR, b" ")
    seed = hashlib.sha256(tag.encode()).digest()
    block = b"".join(hashlib.sha256(seed + i.to_bytes(4, "little")).digest()
                     for i in range(128))   # 4 KiB of tag-specific bytes
    n = size - HDR
    return head + (block * (n // len(block) + 1))[:n]


def whole(data):
    """The tag of a whole page, or None."""
    if len(data) < HDR or not data.startswith(b"kvfspc:"):
        return None
    tag = data[7:HDR].rstrip(b" ").decode(errors="replace")
    return tag if data == payload(tag, len(data)) else None


# ---------------------------------------------------------------- load

class Journal:
    def __init__(self, path):
        self.f = open(path, "a")

    def __call__(self, kind, name, tag):
        t = time.time()   # UTC, as the daemon log's timestamps
        self.f.write(f"{kind} {name} {tag} {time.strftime('%H:%M:%S', time.gmtime(t))}"
                     f".{int(t * 1000) % 1000:03d}\n")
        self.f.flush()


def write_all(fd, data):
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def fsync_dir(path):
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fast_client(m):
    """A fast-path client of the model, or None (no library: FUSE only)."""
    try:
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                        "..", "..", "client", "python"))
        import kvfs
        return kvfs.Client(m)
    except Exception as e:  # noqa: BLE001 - optional part of the load
        print(f"powercut load: no fast path ({e!r})", file=sys.stderr)
        return None


def load(m, journal, tag, seconds):
    J = Journal(journal)
    rnd = random.Random()
    client = fast_client(m)
    deadline = time.monotonic() + seconds
    stats = dict(acked=0, plain=0, published=0, unlinked=0, fast=0, errors=0)
    i = 0
    while time.monotonic() < deadline:
        i += 1
        t = f"{tag}-{i}"
        try:
            op = i % 5
            if op in (0, 1):
                # fsync'ed page: acknowledged only once fsync returned
                name = f"00/d{t}"
                data = payload(name, rnd.choice([100, 4096, 65536, 200000, 1 + rnd.randrange(300000)]))
                fd = os.open(f"{m}/{name}", os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
                try:
                    write_all(fd, data)
                    os.fsync(fd)
                    J("A", name, name)
                    stats["acked"] += 1
                finally:
                    os.close(fd)
            elif op == 2:
                # plain pages (no fsync), most unlinked again a little later
                name = f"00/p{t}"
                with open(f"{m}/{name}", "wb") as f:
                    f.write(payload(name, rnd.choice([4096, 65536, 1 + rnd.randrange(200000)])))
                stats["plain"] += 1
                if i > 20 and i % 3:
                    try:
                        os.unlink(f"{m}/00/p{tag}-{i - 15}")
                        stats["unlinked"] += 1
                    except FileNotFoundError:
                        pass
            elif op == 3:
                # tmp+rename publish over one of a few names; every 4th one
                # is made durable with an fsync of the directory
                name = f"01/pub{i % 4}"
                data = payload(f"{name}@{t}", rnd.choice([1000, 8192, 70000]))
                with open(f"{m}/01/tmp{t}", "wb") as f:
                    f.write(data)
                J("I", name, f"{name}@{t}")
                os.rename(f"{m}/01/tmp{t}", f"{m}/{name}")
                stats["published"] += 1
                if i % 4 == 3:
                    fsync_dir(f"{m}/01")
                    J("A", name, f"{name}@{t}")
                    stats["acked"] += 1
                # dedup under the cut: a few payloads shared by pages that
                # come and go, so refcounts change in every transaction
                with open(f"{m}/01/same{t}", "wb") as f:
                    f.write(payload(f"same{i % 3}", 8192))
                if i > 20:
                    try:
                        os.unlink(f"{m}/01/same{tag}-{i - 10}")
                        stats["unlinked"] += 1
                    except FileNotFoundError:
                        pass
            elif client is not None:
                # fast-path batch: durable ones acknowledged per page
                durable = i % 2 == 0
                names = [f"f{t}.{k}" for k in range(4)]
                pages = [(2, n, payload(f"02/{n}", rnd.choice([4096, 30000, 65536])))
                         for n in names]
                client.write_pages(pages, durable=durable)
                stats["fast"] += len(names)
                if durable:
                    for n in names:
                        J("A", f"02/{n}", f"02/{n}")
                    stats["acked"] += len(names)
        except OSError as e:
            stats["errors"] += 1
            if e.errno in (errno.ENOTCONN, errno.ECONNABORTED) or not os.path.isdir(m):
                break       # the daemon is gone
            if stats["errors"] % 100 == 0:
                time.sleep(0.01)
    print("powercut load " + " ".join(f"{k}={v}" for k, v in stats.items()), file=sys.stderr)


# ---------------------------------------------------------------- check

def read_page(path):
    with open(path, "rb") as f:
        return f.read()


def check(m, journal):
    problems = []
    acked, later, where = {}, {}, {}    # required acks: tag, later publishes, line
    inflight = {}                       # acks recorded during a cut: optional
    cutting = False
    for no, line in enumerate(open(journal), 1):
        kind, name, tag = line.split()[:3]
        if kind == "C":
            cutting = True
        elif kind == "R":
            cutting = False
        elif kind == "K" or (kind == "A" and not cutting):
            acked[name], later[name], where[name] = tag, set(), no
            inflight.pop(name, None)
        elif kind == "A":
            inflight[name] = (tag, no)
        elif name in later:
            later[name].add(tag)

    for name, tag in sorted(acked.items()):
        what = f"acknowledged page {name} (journal line {where[name]})"
        try:
            data = read_page(f"{m}/{name}")
        except OSError as e:
            problems.append(f"{what}: {e}")
            continue
        got = whole(data)
        if got is None:
            problems.append(f"{what}: torn or wrong bytes ({len(data)} bytes)")
        elif got != tag and got not in later[name]:
            problems.append(f"{what}: holds {got}, acknowledged {tag}"
                            f" (later publishes: {len(later[name])})")

    # Acked while the cut was under way: the fsync was in flight when the
    # disk went away and need not have survived (the kernel may even report
    # success for it). One that did survive is committed and, from now on,
    # required (K).
    kept, lost = [], 0
    for name, (tag, no) in sorted(inflight.items()):
        if name in acked:
            continue            # a publish: the name is checked above
        try:
            got = whole(read_page(f"{m}/{name}"))
        except FileNotFoundError:
            lost += 1
            continue
        except OSError:
            continue            # reported below with every visible page
        if got == tag:
            kept.append(f"K {name} {tag}\n")
        elif got is not None:
            problems.append(f"page {name} (journal line {no}): holds {got}, acknowledged {tag}")
    with open(journal, "a") as f:
        f.writelines(kept)

    seen = 0
    for layer in LAYERS:
        d = f"{m}/{layer}"
        if not os.path.isdir(d):
            continue
        for n in sorted(os.listdir(d)):
            try:
                data = read_page(f"{d}/{n}")
            except OSError as e:
                problems.append(f"visible page {layer}/{n}: {e}")
                continue
            seen += 1
            if whole(data) is None:
                problems.append(f"visible page {layer}/{n}: torn or wrong bytes ({len(data)} bytes)")
    for p in problems:
        print(p)
    print(f"powercut check: {len(acked)} acknowledged names, {seen} visible pages;"
          f" acks during the cut: {len(kept)} survived, {lost} lost (allowed);"
          f" {len(problems)} problem(s)", file=sys.stderr)
    sys.exit(1 if problems else 0)


def main(a):
    if len(a) == 5 and a[0] == "load":
        load(a[1], a[2], a[3], float(a[4]))
    elif len(a) == 3 and a[0] == "check":
        check(a[1], a[2])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
