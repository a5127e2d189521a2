#!/usr/bin/env bash
# docs/abi.md as a client's only source: its C example compiled and run as
# printed, its structs and numbers checked against client/kvfs_ioctl.h, and
# a client written from the doc alone checking what it promises (abidoc.py).
. "$(dirname "$0")/lib.sh"
SRC=$(cd "$(dirname "$0")/../.." && pwd)
export CC=${CC:-$(command -v cc || command -v gcc || command -v clang || true)}
[ -n "$CC" ] || fail "no C compiler (cc, gcc or clang) for the doc's example"

mkfs
chmod 755 "$T"   # uid 65534 takes part (allow_other)
mount_kvfs -o allow_other,ram_cache=0
# The model the doc's example expects: 64 KiB pages, layer 3 is "03".
"$KVFS" model create "$MNT/llama-8b" --layers 32 --kv-heads 8 --head-dim 128 \
	--dtype bf16 --page-tokens 16 >/dev/null || fail "kvfs model create"
python3 "$(dirname "$0")/abidoc.py" "$MNT" "$SRC/docs/abi.md" "$SRC/client" "$LOG" "$T" \
	|| fail "docs/abi.md does not match the daemon"
no_errors_in_log
umount_kvfs
