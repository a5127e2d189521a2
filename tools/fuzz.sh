#!/usr/bin/env bash
# Long fuzzing runs of the libFuzzer targets (tests/fuzz/; the suite runs
# each for 10 s only). Builds them with clang into build-fuzz/, then runs
# each TARGET (default: all) for SECONDS (default 300) with a persistent
# corpus under /var/tmp/kvfs-fuzz/TARGET (seeded from tests/fuzz/corpus and,
# for the manifest, from valid and corrupted manifests the gcc driver
# writes), crashes under /var/tmp/kvfs-fuzz/artifacts/TARGET/, and prints
# each run's final stats. Exit status 1 if any target found a crash.
#   tools/fuzz.sh [--time SECONDS] [--jobs N] [TARGET...]
# TARGET: batch, manifest, names. --jobs N runs N targets at a time.
# A crash input reproduces with build-fuzz/tests/fuzz/fuzz_TARGET FILE;
# fix the bug and commit the input under tests/fuzz/corpus/TARGET/ (the
# suite replays it). See docs/fuzzing.md.
set -euo pipefail
cd "$(dirname "$0")/.."

time=300 jobs=1 build=build-fuzz
work=${KVFS_FUZZ_WORK:-/var/tmp/kvfs-fuzz}
targets=()
while [ $# -gt 0 ]; do
	case $1 in
	--time) time=$2; shift 2 ;;
	--jobs) jobs=$2; shift 2 ;;
	-h|--help) sed -n '2,13p' "$0"; exit 0 ;;
	batch|manifest|names) targets+=("$1"); shift ;;
	*) echo "usage: tools/fuzz.sh [--time SECONDS] [--jobs N] [batch|manifest|names]..." >&2
	   exit 2 ;;
	esac
done
[ ${#targets[@]} -gt 0 ] || targets=(batch manifest names)

command -v clang >/dev/null || { echo "tools/fuzz.sh: clang is needed (apt-get install clang)" >&2; exit 2; }
[ -f "$build/build.ninja" ] || meson setup "$build" >/dev/null
ninja -C "$build" $(printf 'tests/fuzz/fuzz_%s ' "${targets[@]}") \
	tests/fuzz/fuzz_manifest_random >/dev/null
[ -x "$build/tests/fuzz/fuzz_${targets[0]}" ] ||
	{ echo "tools/fuzz.sh: clang has no libFuzzer here" >&2; exit 2; }

max_len() {
	case $1 in batch) echo 4168 ;; manifest) echo 65536 ;; *) echo 512 ;; esac
}

run_one() {   # TARGET: prints its log's summary lines
	local t=$1 corpus="$work/$t" art="$work/artifacts/$t" log="$work/$t.log"
	local seeds=()

	mkdir -p "$corpus" "$art"
	[ -d "tests/fuzz/corpus/$t" ] && seeds+=("tests/fuzz/corpus/$t")
	if [ "$t" = manifest ] && [ ! -d "$work/manifest-seeds" ]; then
		"$build/tests/fuzz/fuzz_manifest_random" --seeds "$work/manifest-seeds" >/dev/null
	fi
	[ "$t" = manifest ] && seeds+=("$work/manifest-seeds")
	local rc=0
	"$build/tests/fuzz/fuzz_$t" "$corpus" "${seeds[@]}" -max_total_time="$time" \
		-max_len="$(max_len "$t")" -timeout=10 -rss_limit_mb=4096 \
		-artifact_prefix="$art/" -print_final_stats=1 >"$log" 2>&1 || rc=$?
	{
		echo "== fuzz_$t: ${time}s, exit $rc, corpus $corpus ($(ls "$corpus" | wc -l) files)"
		grep -E '^#[0-9]+[[:space:]]+(INITED|DONE)' "$log" | tail -2
		grep -E '^stat::|^(==[0-9]+==)?ERROR|SUMMARY|property violated|Test unit written' "$log" || true
		echo "   crashes: $(ls "$art" | wc -l) file(s) in $art; full log $log"
	}
	return "$rc"
}

mkdir -p "$work"
status=0 pids=()
for t in "${targets[@]}"; do
	run_one "$t" >"$work/$t.summary" 2>&1 &
	pids+=($!)
	if [ ${#pids[@]} -ge "$jobs" ]; then
		wait "${pids[0]}" || status=1
		pids=("${pids[@]:1}")
	fi
done
for p in "${pids[@]}"; do
	wait "$p" || status=1
done
for t in "${targets[@]}"; do
	cat "$work/$t.summary"
done
exit "$status"
