#!/usr/bin/env bash
# docs/usage.md's C snippets for the fast path, as printed: the batched
# read and the batched write that reuses its region are pasted into one
# program (usagedoc.py adds only declarations and checks), compiled
# against client/ and run on a mount; every page must come back whole.
. "$(dirname "$0")/lib.sh"
SRC=$(cd "$(dirname "$0")/../.." && pwd)
export CC=${CC:-$(command -v cc || command -v gcc || command -v clang || true)}
[ -n "$CC" ] || fail "no C compiler (cc, gcc or clang) for the doc's snippets"
LIBDIR=$(dirname "${KVFS_LIB:-}")
[ -n "${KVFS_LIB:-}" ] && [ -e "$KVFS_LIB" ] || fail "KVFS_LIB (the built libkvfs) not set"

mkfs
mount_kvfs -o ram_cache=0
"$KVFS" model create "$MNT/llama3-8b" --layers 32 --kv-heads 8 --head-dim 128 \
	--dtype bf16 --page-tokens 16 >/dev/null || fail "kvfs model create"
python3 "$(dirname "$0")/usagedoc.py" "$MNT/llama3-8b" "$SRC/docs/usage.md" \
	"$SRC/client" "$LIBDIR" "$T" || fail "docs/usage.md's C snippets do not work as printed"
no_errors_in_log
umount_kvfs
echo "PASS: usage.md's batched read and write snippets work as printed"
