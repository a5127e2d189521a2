#!/usr/bin/env python3
"""The layering of docs/modules.md, checked on the built archives.

Arguments: the engine, fast and fuse static libraries. From `nm` of every
object it checks that
  - no engine or fast object refers to a FUSE symbol (fuse_*),
  - engine objects refer to nothing defined in fast/ or fuse/, and fast
    objects to nothing defined in fuse/ (calls point one way),
  - the engine's files call each other without a cycle (commit.c and
    commit_batch.c count as one module: they share commit_i.h).
Prints the engine's files by level, lowest first. Exit 1 on a violation.
"""
import collections
import subprocess
import sys

MODULE_OF = {"commit_batch": "commit"}


def symbols(archive):
    """{object: (defined, undefined)} for each object in archive."""
    out = subprocess.run(["nm", "-A", archive], capture_output=True, text=True,
                         check=True).stdout
    objs = collections.defaultdict(lambda: (set(), set()))
    for line in out.splitlines():
        where, _, rest = line.rpartition(":")
        obj = where.split(":")[-1].rsplit("/", 1)[-1].removesuffix(".c.o")
        parts = rest.split()
        if len(parts) == 3 and parts[1] in "TDBRC":
            objs[obj][0].add(parts[2])
        elif len(parts) == 2 and parts[0] == "U":
            objs[obj][1].add(parts[1])
    return objs


def main():
    engine, fast, fuse = (symbols(a) for a in sys.argv[1:4])
    bad = []
    defined_in = {}
    for layer, objs in (("engine", engine), ("fast", fast), ("fuse", fuse)):
        for obj, (defs, _) in objs.items():
            for s in defs:
                defined_in[s] = (layer, obj)
    rank = {"engine": 0, "fast": 1, "fuse": 2}
    for layer, objs in (("engine", engine), ("fast", fast)):
        for obj, (_, undefs) in objs.items():
            for s in sorted(undefs):
                if s.startswith("fuse_"):
                    bad.append(f"{layer}/{obj}.c calls FUSE: {s}")
                up = defined_in.get(s)
                if up and rank[up[0]] > rank[layer]:
                    bad.append(f"{layer}/{obj}.c calls up into {up[0]}/{up[1]}.c: {s}")
    calls = collections.defaultdict(set)
    for obj, (_, undefs) in engine.items():
        me = MODULE_OF.get(obj, obj)
        for s in undefs:
            up = defined_in.get(s)
            if up and up[0] == "engine":
                callee = MODULE_OF.get(up[1], up[1])
                if callee != me:
                    calls[me].add(callee)
    level, visiting = {}, set()

    def depth(m):
        if m in level:
            return level[m]
        if m in visiting:
            bad.append(f"engine: call cycle through {m}.c")
            return 0
        visiting.add(m)
        level[m] = 1 + max((depth(c) for c in calls[m]), default=-1)
        visiting.discard(m)
        return level[m]

    for m in {MODULE_OF.get(o, o) for o in engine}:
        depth(m)
    for m in sorted(level, key=lambda m: (level[m], m)):
        print(f"engine level {level[m]}: {m} -> {', '.join(sorted(calls[m])) or '-'}")
    for b in bad:
        print("LAYERING:", b)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
