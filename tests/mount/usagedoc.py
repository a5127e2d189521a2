"""docs/usage.md's fast-path C snippets, as printed (see usagedoc.sh).

The read snippet ("Batched reads: the fast path") and the write snippet
("Batched writes") are taken from the doc unchanged but for the model's
path and the "...;" the doc leaves to the reader. Around them go only the
declarations they use (n, layer, keys, bytes) and checks: 1,024 pages
stored through FUSE come back bit-exact in the region, and 1,024 new
pages written from it read back through FUSE bit-exact.

usage: usagedoc.py MODEL_DIR DOC CLIENT_DIR LIB_DIR TMPDIR
"""
import os
import re
import subprocess
import sys

MODEL, DOC, CLIENT, LIBDIR, TMP = sys.argv[1:6]
PAGE, N, LAYER = 65536, 1024, 3
doc = open(DOC).read()


def section(title):
    m = re.search(r"^#+ " + re.escape(title) + r"\n(.*?)(?=^#+ )", doc, re.S | re.M)
    assert m, f"no section {title!r} in {DOC}"
    blocks = re.findall(r"^```c\n(.*?)^```", m.group(1), re.S | re.M)
    assert len(blocks) == 1, f"section {title!r}: {len(blocks)} C blocks, want 1"
    return blocks[0]


def seed(kind, i):
    return (i * 7 + (1 if kind == "r" else 101)) & 0xFF


read_c = section("Batched reads: the fast path")
write_c = section("Batched writes")
assert '"/mnt/kvfs/llama3-8b"' in read_c and "\t\t...;" in read_c, read_c
read_c = read_c.replace('"/mnt/kvfs/llama3-8b"', "argv[1]")
read_c = read_c.replace("\t\t...;", "\t\tok++;\n\telse\n\t\tbad++;")

program = r"""#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <kvfs/libkvfs.h>

static int page_ok(const unsigned char *p, unsigned seed)
{
	for (size_t j = 0; j < %(page)d; j++)
		if (p[j] != (unsigned char)(j * 31 + seed))
			return 0;
	return 1;
}

int main(int argc, char **argv)
{
	int n = %(n)d, ok = 0, bad = 0, whole = 0;
	uint32_t layer = %(layer)d;
	uint64_t bytes;
	static char names[%(n)d][16];
	const char *keys[%(n)d];
	unsigned char *base;

	(void)argc;
	for (int i = 0; i < n; i++) {
		snprintf(names[i], sizeof(names[i]), "r%%04d", i);
		keys[i] = names[i];
	}
%(read)s
	base = kvfs_region_base(r);
	for (int i = 0; i < n; i++)
		whole += page_ok(base + data + (size_t)i * 65536, (unsigned)((i * 7 + 1) & 0xff));
	printf("read: status 0 %%d, failed %%d, bytes right %%d of %%d; res.done %%u\n",
	       ok, bad, whole, n, res.done);
	if (ok != n || whole != n || res.done != (uint32_t)n)
		return 1;
	for (int i = 0; i < n; i++) {
		unsigned char *p = base + data + (size_t)i * 65536;

		snprintf(names[i], sizeof(names[i]), "w%%04d", i);
		for (size_t j = 0; j < 65536; j++)
			p[j] = (unsigned char)(j * 31 + ((i * 7 + 101) & 0xff));
	}
%(write)s
	printf("write: res.done %%u, res.failed %%u\n", res.done, res.failed);
	for (int i = 0; i < n; i++)
		if (kvfs_batch_status(wb, i, &bytes) != 0)
			return printf("write: page %%d failed\n", i), 1;
	return res.done == (uint32_t)n && res.failed == 0 ? 0 : 1;
}
""" % {"page": PAGE, "n": N, "layer": LAYER, "read": read_c, "write": write_c}

layer_dir = f"{MODEL}/{LAYER:02d}"
for i in range(N):
    s = seed("r", i)
    with open(f"{layer_dir}/r{i:04d}", "wb") as f:
        f.write(bytes(((j * 31 + s) & 0xFF) for j in range(PAGE)))

inc = f"{TMP}/inc"
os.makedirs(f"{inc}/kvfs", exist_ok=True)
for h in ("libkvfs.h", "kvfs_ioctl.h"):   # <kvfs/...>, their installed names
    if not os.path.exists(f"{inc}/kvfs/{h}"):
        os.symlink(os.path.abspath(f"{CLIENT}/{h}"), f"{inc}/kvfs/{h}")
src, exe = f"{TMP}/usagedoc.c", f"{TMP}/usagedoc"
open(src, "w").write(program)
cc = subprocess.run([os.environ.get("CC", "cc"), "-std=gnu11", "-Wall", "-Werror",
                     "-Wno-unused-variable", "-Wno-misleading-indentation", "-I", inc, src, "-o", exe, "-L", LIBDIR,
                     "-lkvfs",
                     # a sanitizer build's libkvfs needs its runtime, which
                     # tools/sanitize.sh preloads into every process
                     "-Wl,--allow-shlib-undefined"], capture_output=True, text=True)
if cc.returncode != 0:
    sys.exit(f"the snippets do not compile:\n{cc.stderr}\n--- program ---\n{program}")
env = dict(os.environ, LD_LIBRARY_PATH=LIBDIR)
run = subprocess.run([exe, MODEL], capture_output=True, text=True, env=env, timeout=120)
print(run.stdout, end="")
if run.returncode != 0:
    sys.exit(f"the snippets failed (exit {run.returncode}): {run.stderr}")
for i in range(N):
    s = seed("w", i)
    got = open(f"{layer_dir}/w{i:04d}", "rb").read()
    want = bytes(((j * 31 + s) & 0xFF) for j in range(PAGE))
    if got != want:
        sys.exit(f"page w{i:04d} as written by the snippet reads back wrong through FUSE")
print(f"usage.md's snippets: {N} pages read and {N} written, bit-exact")
