#!/usr/bin/env bash
# Set up kvfs and show it working: build, create a store in /var/lib/kvfs,
# mount it on /mnt/kvfs, write and read some KV pages with ordinary tools,
# and leave it mounted to explore. Override with KVFS_STORE / KVFS_MNT.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh
KVFS=$PWD/build/tools/kvfs
STORE=${KVFS_STORE:-/var/lib/kvfs/store}
MNT=${KVFS_MNT:-/mnt/kvfs}
show() { echo; echo "\$ $*"; "$@"; }

[ -f "$STORE/kvfs.db" ] || "$KVFS" mkfs "$STORE" --capacity 8G
# A mount left by a daemon that died answers "Transport endpoint is not
# connected": detach it (kvfs umount, as its own error message says) and
# mount again, rather than fail on it.
if grep -q " $MNT fuse.kvfs " /proc/mounts && ! stat "$MNT" >/dev/null 2>&1; then
	echo "kvfs demo: $MNT is a stale mount (its daemon is gone): detaching it with kvfs umount"
	"$KVFS" umount "$MNT" || fusermount3 -u -z "$MNT"
fi
if grep -q " $MNT fuse.kvfs " /proc/mounts; then
	echo "kvfs demo: $MNT is already mounted; using it"
else
	mkdir -p "$MNT"
	"$KVFS" mount "$STORE" "$MNT"
fi

# A small model: 4 layers, pages of 16 tokens * 8 KV heads * 128 dims, bf16.
M=$MNT/demo-llama
[ -d "$M" ] || "$KVFS" model create "$M" --layers 4 --kv-heads 8 --head-dim 128 --dtype bf16 --page-tokens 16
page=$(getfattr --absolute-names --only-values -n user.kvfs.page_bytes "$M")
for layer in 00 01 02 03; do
	for blk in 0 1 2; do
		# a block's key names its token prefix, the same in every layer
		key=$(printf 'prefix%02d' "$blk" | sha256sum | cut -c1-32)
		[ -e "$M/$layer/$key" ] || head -c "$page" /dev/urandom > "$M/$layer/$key"
	done
done
show ls -l "$M/00"
first=$(ls "$M/00" | head -1)
show getfattr --absolute-names -d "$M/00/$first"
show getfattr --absolute-names -d "$M"
show du -sh "$M"
show df -h "$MNT"
show "$KVFS" model list "$MNT"

# The fast path: one prefix lookup over all layers, then each layer restored
# with one ioctl into shared memory, checked against what cat returns.
echo; echo "\$ python3: kvfs.Client('$M').lookup_prefix(...), read_layer(...)"
KVFS_LIB=$PWD/build/client/libkvfs.so.0 PYTHONPATH=$PWD/client/python \
/usr/bin/python3 - "$M" "$page" <<'PY'
import os, subprocess, sys
import kvfs
model, page = sys.argv[1], int(sys.argv[2])
layers = sorted(d for d in os.listdir(model))
keys = sorted(k for k in os.listdir(os.path.join(model, layers[0])) if not k.startswith("req2-"))
with kvfs.Client(model) as c:
    hit, handles, sizes = c.lookup_prefix(keys + ["not-cached"], layers)
    print(f"prefix hit: {hit} of {len(keys) + 1} blocks present in all {len(layers)} layers")
    for layer in layers:
        kv = c.read_layer(int(layer), keys[:hit], page)
        for i, k in enumerate(keys[:hit]):
            cat = subprocess.run(["cat", os.path.join(model, layer, k)],
                                 capture_output=True, check=True).stdout
            assert kv[i].tobytes() == cat, f"layer {layer} page {k} differs"
        print(f"layer {layer}: {kv.shape[0]} pages x {kv.shape[1]} bytes in one ioctl, identical to cat")
    # A second request with the same system prompt: its pages are stored
    # under its own keys in one batched write per layer, and dedup keeps
    # one copy of the bytes.
    for layer in layers:
        kv = c.read_layer(int(layer), keys[:hit], page)
        c.write_layer(int(layer), ["req2-" + k for k in keys[:hit]], kv,
                      durable=True, replace=True)
stats = dict(l.split() for l in os.getxattr(os.path.dirname(model), "user.kvfs.stats").decode().splitlines())
print(f"batched write of {hit * len(layers)} pages for a second request: "
      f"{stats['pages_deduplicated']} pages deduplicated since mount, "
      f"{int(stats['bytes_saved_by_dedup']) >> 10} KiB not written again")
PY
# An engine: a tiny transformer stores its KV per layer and block, a second
# request restores the shared prefix through the fast path, and its outputs
# are checked bit-identical to a run without kvfs (docs/engine.md).
echo; echo "\$ python3 tools/engine_demo.py $MNT"
KVFS=$KVFS KVFS_LIB=$PWD/build/client/libkvfs.so.0 /usr/bin/python3 tools/engine_demo.py "$MNT"
show du -sh "$M"
show df -h "$MNT"
show "$KVFS" stat "$MNT"
cat <<MSG

kvfs is mounted on $MNT (store $STORE, daemon log $STORE/kvfs.log).
Explore it with ls, cat, stat, getfattr -d, du, df; copy files into a layer
directory to add pages. Counters: $KVFS stat $MNT, or cat $MNT/.kvfs/stats
(JSON) and $MNT/.kvfs/metrics (Prometheus). Unmount with:  $KVFS umount $MNT
MSG
