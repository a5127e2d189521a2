"""Empty page files against the capacity (driven by emptypages.sh).

A page of size 0 has no extent, yet its name costs a manifest row and
index RAM. Each is charged one 4 KiB block of the capacity, so that a
flood of empty files is bounded like pages of one byte: a cache evicts
the least recently used, an authoritative store refuses with ENOSPC.

Steps: `data` (root: two pages of 1 MiB), `flood DIR N` (create N empty
pages, print how many were made and how many got ENOSPC), `check CAP`
(the pages and the capacity agree), `count` (empty pages in the stats),
`room` (root writes 4 MiB and reads it back).
"""
import errno
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from semantics import fail, stats  # noqa: E402

MIB = 1 << 20
BLOCK = 4096


def flood(d, n):
    made = refused = 0
    for i in range(n):
        try:
            os.close(os.open(os.path.join(d, f'e{i:06d}'), os.O_CREAT | os.O_WRONLY, 0o644))
            made += 1
        except OSError as e:
            if e.errno != errno.ENOSPC:
                fail(f'create {i}: {e}')
            refused += 1
    print(made, refused)


def check(mnt, cap):
    """The empty pages fit in the capacity, and every measure of them agrees."""
    s = stats(mnt)['ssd']
    names = len(os.listdir(os.path.join(mnt, 'm', '1')))
    print(f'{names} empty pages listed, {s.get("empty_pages")} in the stats, '
          f'{s["evictions"]} evictions')
    if names * BLOCK > cap:
        fail(f'{names} empty pages of 4 KiB each are more than the capacity ({cap} bytes)')
    if s['empty_pages'] != names:
        fail(f'the stats count {s["empty_pages"]} empty pages, ls shows {names}')
    sv = os.statvfs(mnt)
    used = (sv.f_blocks - sv.f_bfree) * sv.f_frsize
    if used < names * BLOCK:
        fail(f'df shows {used} bytes used, less than the {names} empty pages charged')


def room(mnt):
    data = os.urandom(4 * MIB)
    p = os.path.join(mnt, 'm', '0', 'big')
    with open(p, 'wb') as f:
        f.write(data)
    with open(p, 'rb') as f:
        if f.read() != data:
            fail('the 4 MiB page reads back wrong')


def main():
    cmd, mnt = sys.argv[1], sys.argv[2]
    if cmd == 'data':
        for i in range(2):
            with open(os.path.join(mnt, 'm', '0', f'd{i}'), 'wb') as f:
                f.write(os.urandom(MIB))
    elif cmd == 'flood':
        flood(os.path.join(mnt, sys.argv[3]), int(sys.argv[4]))
    elif cmd == 'check':
        check(mnt, int(sys.argv[3]))
    elif cmd == 'count':
        print(stats(mnt)['ssd']['empty_pages'])
    elif cmd == 'room':
        room(mnt)
    else:
        fail(f'unknown step {cmd}')


if __name__ == '__main__':
    main()
