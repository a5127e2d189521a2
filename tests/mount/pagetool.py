#!/usr/bin/env python3
"""Write and verify page files whose bytes are derived from their names, so
any reader can check a page without a side channel.

  pagetool.py write DIR PREFIX COUNT SIZE [--fsync]
  pagetool.py verify DIR PREFIX COUNT SIZE [--missing-ok]
  pagetool.py content NAME SIZE > file
"""
import errno
import hashlib
import os
import sys


def content(name, size):
    seed = hashlib.sha256(name.encode()).digest()
    block = b"".join(hashlib.sha256(seed + i.to_bytes(4, "little")).digest()
                     for i in range(128))   # 4 KiB of name-specific bytes
    return (block * (size // len(block) + 1))[:size]


def page_size(i, size):
    # size 0 means "varied sizes": exercises unaligned tails and tiny pages
    return size if size else 1 + (i * 7919) % 300000


def write_page(path, data, fsync):
    """Create a new page with data; fsync makes it durable before close."""
    fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    try:
        os.write(fd, data)
        if fsync:
            os.fsync(fd)
    finally:
        os.close(fd)


def write(d, prefix, count, size, fsync):
    for i in range(count):
        name = f"{prefix}{i:06d}"
        data = content(name, page_size(i, size))
        write_page(os.path.join(d, name), data, fsync)


def verify(d, prefix, count, size, missing_ok):
    seen = 0
    for i in range(count):
        name = f"{prefix}{i:06d}"
        path = os.path.join(d, name)
        try:
            with open(path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            if missing_ok:
                continue
            sys.exit(f"missing page {path}")
        except OSError as e:
            # EBUSY: still being written by another process (not readable
            # until sealed); with --missing-ok that is "not there yet".
            if missing_ok and e.errno == errno.EBUSY:
                continue
            raise
        if data != content(name, page_size(i, size)):
            sys.exit(f"wrong bytes in {path}: {len(data)} bytes")
        seen += 1
    print(seen)


def main(a):
    if a[0] == "content":
        sys.stdout.buffer.write(content(a[1], int(a[2])))
    elif a[0] == "write":
        write(a[1], a[2], int(a[3]), int(a[4]), "--fsync" in a)
    elif a[0] == "verify":
        verify(a[1], a[2], int(a[3]), int(a[4]), "--missing-ok" in a)
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
