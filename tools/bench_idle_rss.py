"""The flood of tools/bench_idle_rss.sh: four engines write PAGES pages
of SIZE bytes each through the fast path (layer = engine), distinct pages
in batches of 4096 (4 KiB) or 256 (64 KiB). argv: MNT PAGES SIZE."""
import multiprocessing
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                '..', 'client', 'python'))
import kvfs  # noqa: E402

MNT, PAGES, SIZE = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
ENGINES, BATCH = 4, 4096 if SIZE <= 4096 else 256


def write(layer):
    fill = os.urandom(SIZE)
    with kvfs.Client(os.path.join(MNT, 'm')) as c:
        for first in range(0, PAGES, BATCH):
            c.write_pages([(layer, f'{i:016x}',
                            (layer << 32 | i).to_bytes(8, 'little') + fill[8:])
                           for i in range(first, min(PAGES, first + BATCH))])
    return 0


if __name__ == '__main__':
    with multiprocessing.Pool(ENGINES) as pool:
        pool.map(write, range(ENGINES))
