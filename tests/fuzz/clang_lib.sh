#!/bin/sh
# Build the kvfs sources a libFuzzer target links into one static archive,
# compiled by clang with the fuzzer's instrumentation (meson's own targets
# are gcc-built and cannot be linked into a libFuzzer binary).
# Usage: clang_lib.sh CLANG OUT.a BUILD_ROOT SOURCE_ROOT SRC.c...
set -eu
cc=$1 out=$2 build=$3 src=$4
shift 4
obj="$out.d"
rm -rf "$obj" "$out"
mkdir -p "$obj"
flags="-g -O1 -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=all
 -D_GNU_SOURCE -D_FILE_OFFSET_BITS=64 -std=gnu11 -I$build -I$src/store -I$src/index
 -I$src/engine -I$src/fast -I$src/fuse -I$src/client $(pkg-config --cflags fuse3)"
# One object per source, named after its directory too (engine/x.c, index/x.c).
for f in "$@"; do
	printf '%s\n' "$f"
done | xargs -P "$(nproc)" -I{} sh -c \
	'o="$2/$(basename "$(dirname "$1")")_$(basename "$1" .c).o"; exec $0 $3 -c "$1" -o "$o"' \
	"$cc" {} "$obj" "$flags"
ar rcs "$out" "$obj"/*.o
