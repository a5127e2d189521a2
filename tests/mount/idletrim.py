"""The idle-trim test's load (idletrim.sh): four engines write 4096 pages
of 64 KiB each through the fast path (model m, layer = engine, batches of
256), every page distinct; or read them all back and compare.
argv: MNT write|read."""
import multiprocessing
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                '..', '..', 'client', 'python'))
import kvfs  # noqa: E402

MNT, WHAT = sys.argv[1], sys.argv[2]
ENGINES, PAGES, SIZE, BATCH = 4, 4096, 65536, 256
FILL = bytes(range(256)) * (SIZE // 256)


def page(layer, i):
    return (layer << 32 | i).to_bytes(8, 'little') + FILL[8:]


def write(layer):
    with kvfs.Client(os.path.join(MNT, 'm')) as c:
        for first in range(0, PAGES, BATCH):
            c.write_pages([(layer, f'p{i:06d}', page(layer, i))
                           for i in range(first, first + BATCH)])


def read(layer):
    names = {int(n): n for n in os.listdir(os.path.join(MNT, 'm'))}
    d = os.path.join(MNT, 'm', names[layer])
    for i in range(0, PAGES, 97):
        with open(os.path.join(d, f'p{i:06d}'), 'rb') as f:
            if f.read() != page(layer, i):
                sys.exit(f'layer {layer} page {i}: wrong bytes')


if __name__ == '__main__':
    fn = write if WHAT == 'write' else read
    with multiprocessing.Pool(ENGINES) as pool:
        pool.map(fn, range(ENGINES))
