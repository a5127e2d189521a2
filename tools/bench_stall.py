"""How long the mount keeps other callers waiting while it loads: ask the
daemon the same small thing over and over (a lookup of a name that is not
there, or a listing) for up to SECS seconds, or until the background load
is over (--until-loaded), and print how many answers came and their
latency (p50, p99, max). The daemon answers each one under the index's
read lock, so the max is the longest the loader held the write lock.
argv: MNT DIR SECS [--list] [--until-loaded] [--label L]"""
import json
import os
import sys
import time


def loading(mnt):
    with open(os.path.join(mnt, '.kvfs', 'stats')) as f:
        return json.load(f)['namespace']['loading'] != 0


def main():
    args = [a for a in sys.argv[1:] if not a.startswith('--')]
    mnt, path, secs = args[0], args[1], float(args[2])
    label = sys.argv[sys.argv.index('--label') + 1] if '--label' in sys.argv else ''
    listing, until_loaded = '--list' in sys.argv, '--until-loaded' in sys.argv
    lat, end, i = [], time.time() + secs, 0
    while time.time() < end:
        t0 = time.perf_counter()
        if listing:
            os.listdir(path)
        else:
            try:
                os.stat(os.path.join(path, f'nope{i}'))
            except FileNotFoundError:
                pass
        lat.append(time.perf_counter() - t0)
        i += 1
        if until_loaded and i % 200 == 0 and not loading(mnt):
            break
    lat.sort()
    print(f'{label}{"listings" if listing else "lookups"} {len(lat)}, '
          f'p50 {lat[len(lat) // 2] * 1e3:.3f} ms, p99 {lat[int(len(lat) * 0.99)] * 1e3:.3f} ms, '
          f'max {lat[-1] * 1e3:.1f} ms')


if __name__ == '__main__':
    main()
