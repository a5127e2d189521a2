"""Checks for dedup.sh, one step per invocation: python3 dedup.py STEP MNT."""
import os
import random
import sys

sys.path.insert(0, os.path.dirname(__file__))
from pagetool import write_page  # noqa: E402

PAGE = 65536


def stats(mnt):
    raw = os.getxattr(mnt, "user.kvfs.stats").decode()
    return {k: int(v) for k, v in (line.split() for line in raw.splitlines())}


def xattr(path, name):
    return os.getxattr(path, "user.kvfs." + name).decode()


def write(path, data, fsync=True):
    write_page(path, data, fsync)


def settle(d):
    """fsync of a directory waits for every queued manifest change (and the
    extent frees that follow a delete)."""
    fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def check(cond, what):
    if not cond:
        sys.exit("FAIL: " + what)


def df_used(mnt):
    st = os.statvfs(mnt)
    return (st.f_blocks - st.f_bfree) * st.f_frsize


def du(path):
    return os.stat(path).st_blocks * 512


def blob(seed, n=PAGE):
    return random.Random(seed).randbytes(n)


def share(mnt):
    m = f"{mnt}/m"
    a, c = blob(1), blob(2)
    used0 = df_used(mnt)
    write(f"{m}/00/a", a)              # durable before its twin arrives
    write(f"{m}/01/b", a)              # another layer, same bytes
    write(f"{m}/00/twin", a, fsync=False)
    write(f"{m}/00/c", c)              # same length, other bytes
    settle(f"{m}/00")
    st = stats(mnt)
    check(st["pages_deduplicated"] == 2, f"2 pages deduplicated, stats say {st}")
    check(st["bytes_saved_by_dedup"] == 2 * PAGE, "bytes saved")
    ext_a = xattr(f"{m}/00/a", "extent")
    check(xattr(f"{m}/01/b", "extent") == ext_a, "b does not share a's extent")
    check(xattr(f"{m}/00/twin", "extent") == ext_a, "twin does not share a's extent")
    check(xattr(f"{m}/00/c", "extent") != ext_a, "c shares a's extent: other bytes")
    check(xattr(f"{m}/00/a", "refcount") == "3", "refcount of the shared extent")
    check(xattr(f"{m}/00/c", "refcount") == "1", "refcount of c")
    for p, want in (("00/a", a), ("01/b", a), ("00/twin", a), ("00/c", c)):
        check(open(f"{m}/{p}", "rb").read() == want, f"{p}: wrong bytes")
        check(du(f"{m}/{p}") == PAGE, f"du of {p}: each page counts in full")
    # df counts the shared extent once: two extents for four pages.
    check(df_used(mnt) - used0 == 2 * PAGE, f"df grew by {df_used(mnt) - used0}")


def after_remount(mnt):
    m = f"{mnt}/m"
    a = blob(1)
    check(xattr(f"{m}/00/a", "refcount") == "3", "refcount after remount")
    check(open(f"{m}/01/b", "rb").read() == a, "b after remount")
    used = df_used(mnt)
    os.unlink(f"{m}/00/a")
    settle(f"{m}/00")
    check(open(f"{m}/01/b", "rb").read() == a, "b after a was unlinked")
    check(xattr(f"{m}/01/b", "refcount") == "2", "refcount after one unlink")
    check(df_used(mnt) == used, "unlinking a shared page freed its extent")
    os.unlink(f"{m}/00/twin")
    check(xattr(f"{m}/01/b", "refcount") == "1", "refcount after two unlinks")
    write(f"{m}/00/again", a)          # shares the survivor's extent
    check(xattr(f"{m}/00/again", "extent") == xattr(f"{m}/01/b", "extent"),
          "a new twin of b does not share b's extent")
    settle(f"{m}/00")


def after_unlink(mnt):
    m = f"{mnt}/m"
    check(xattr(f"{m}/01/b", "refcount") == "2", "refcount after remount")
    used = df_used(mnt)
    os.unlink(f"{m}/01/b")
    settle(f"{m}/01")
    check(df_used(mnt) == used, "extent freed while 'again' still names it")
    os.unlink(f"{m}/00/again")
    settle(f"{m}/00")
    check(df_used(mnt) == used - PAGE, f"last unlink: df {used} -> {df_used(mnt)}")
    check(open(f"{m}/00/c", "rb").read() == blob(2), "c")


def collide(mnt):
    m = f"{mnt}/m"
    x, y = blob(10), blob(11)
    write(f"{m}/00/x", x)
    write(f"{m}/00/y", y)
    check(xattr(f"{m}/00/x", "checksum") == xattr(f"{m}/00/y", "checksum"),
          "the hook did not make the checksums collide")
    check(xattr(f"{m}/00/x", "extent") != xattr(f"{m}/00/y", "extent"),
          "pages with other bytes share an extent")
    write(f"{m}/00/x2", x)             # twin of x among colliding candidates
    write(f"{m}/00/y2", y)
    settle(f"{m}/00")
    check(xattr(f"{m}/00/x2", "extent") == xattr(f"{m}/00/x", "extent"), "x2 not shared")
    check(xattr(f"{m}/00/y2", "extent") == xattr(f"{m}/00/y", "extent"), "y2 not shared")
    for p, want in (("x", x), ("y", y), ("x2", x), ("y2", y)):
        check(open(f"{m}/00/{p}", "rb").read() == want, f"{p}: wrong bytes")
    st = stats(mnt)
    check(st["dedup_mismatches"] >= 1, f"mismatches not counted: {st}")
    check(st["pages_deduplicated"] == 2, f"pages deduplicated: {st}")


{"share": share, "after-remount": after_remount, "after-unlink": after_unlink,
 "collide": collide}[sys.argv[1]](sys.argv[2])
