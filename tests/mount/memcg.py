"""The memory test's load (memcg.sh): a flood of pages written and read
back by four engines at once, on a daemon mounted with -o
ram_cache=16M,dirty=16M. Three use the fast path (models m64, m4 and m1m:
8192 pages of 64 KiB, 65536 of 4 KiB, 256 of 1 MiB), one FUSE (model f:
2048 pages of 64 KiB, then cat). Pages are distinct (dedup would share
identical ones): each starts with its own number; each is read back and
compared. Prints the number of pages stored. argv: MNT."""
import multiprocessing
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                '..', '..', 'client', 'python'))
import kvfs  # noqa: E402

MNT = sys.argv[1]
# model: layers, pages per layer, page size, pages per batch
LOADS = {'m64': (8, 1024, 65536, 64), 'm4': (4, 16384, 4096, 1024),
         'm1m': (1, 256, 1 << 20, 16)}
FUSE = (2048, 65536)


def page(model, i, size):
    seed = sum(model.encode()) << 32
    return (seed | i).to_bytes(8, 'little') + BLOCK[8:size]


def fast_path(model):
    """Every page written through the fast path, then read back (batches
    into one region) and compared."""
    layers, per_layer, size, batch = LOADS[model]
    stride = (size + 4095) // 4096 * 4096
    with kvfs.Client(os.path.join(MNT, model)) as c:
        region = kvfs.Region.create(c, batch * stride + kvfs.Batch.ctl_bytes(batch) + 4096)
        for layer in range(layers):
            for first in range(0, per_layer, batch):
                idx = range(first, min(first + batch, per_layer))
                c.write_pages([(layer, f'p{i:06d}', page(model, layer * per_layer + i, size))
                               for i in idx])
        for layer in range(layers):
            for first in range(0, per_layer, batch):
                idx = list(range(first, min(first + batch, per_layer)))
                with region.batch(batch * stride, len(idx)) as b:
                    for k, i in enumerate(idx):
                        b.add(layer, f'p{i:06d}', k * stride, stride)
                    r = b.read()
                if r.failed:
                    sys.exit(f'{model} layer {layer}: {r.failed} pages failed to read')
                for k, i in enumerate(idx):
                    if bytes(region.buffer(k * stride, size)) != page(model, layer * per_layer + i, size):
                        sys.exit(f'{model} layer {layer} page {i}: wrong bytes')
        region.close()


def fuse():
    count, size = FUSE
    d = os.path.join(MNT, 'f', '00')
    os.makedirs(d, exist_ok=True)
    for i in range(count):
        with open(os.path.join(d, f'p{i:06d}'), 'wb') as f:
            f.write(page('f', i, size))
    for i in range(count):
        with open(os.path.join(d, f'p{i:06d}'), 'rb') as f:
            if f.read() != page('f', i, size):
                sys.exit(f'f/00/p{i:06d}: wrong bytes')


BLOCK = os.urandom(1 << 20)
if __name__ == '__main__':
    procs = [multiprocessing.Process(target=fast_path, args=(m,)) for m in LOADS]
    procs.append(multiprocessing.Process(target=fuse))
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    if any(p.exitcode for p in procs):
        sys.exit(f'engines exited with {[p.exitcode for p in procs]}')
    print(sum(load[0] * load[1] for load in LOADS.values()) + FUSE[0])
