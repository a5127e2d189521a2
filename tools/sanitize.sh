#!/usr/bin/env bash
# The test suite under sanitizers, as CI runs it after the plain suite:
#   - every test built with ASan+UBSan (build-asan/): any memory error or
#     undefined behaviour aborts the daemon or the test, which fails it;
#   - the concurrency tests and the unit tests built with TSan
#     (build-tsan/): a data race makes the daemon exit with status 66,
#     which the mount tests' clean unmount check reports.
# Python and the interpreter running meson load the ASan runtime by
# LD_PRELOAD (the client library they load is instrumented); leaks are not
# checked because the interpreter itself leaks by design. TSan cannot be
# preloaded into bash or Python, so only tests without the Python client
# run under it. Usage: tools/sanitize.sh [asan|tsan]... (default both).
set -euo pipefail
cd "$(dirname "$0")/.."

TSAN_TESTS="concurrent writeback dedup kill9 crashloop remount basic fastpath fastwrite metrics fsck errors writefail hung faults fastload events memstore lazyload indexbudget evictlru closeread openshare emptypages"

setup() {   # DIR SANITIZER
	[ -f "$1/build.ninja" ] ||
		meson setup "$1" -Db_sanitize="$2" -Db_lundef=false >/dev/null
	ninja -C "$1" >/dev/null
}

run_asan() {
	local tests
	setup build-asan address,undefined
	# The fuzz_NAME tests are clang's libFuzzer builds with their own ASan
	# already (and gcc's runtime preloaded into them would clash); their
	# gcc-built drivers fuzz_NAME_random and everything else run.
	tests=$(meson test -C build-asan --list 2>/dev/null | grep ' / ' |
		sed 's/.* \/ //' | awk '!/^fuzz_/ || /_random$/')
	echo "kvfs sanitize: the whole suite under ASan+UBSan"
	LD_PRELOAD="$(gcc -print-file-name=libasan.so)" \
	ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 \
	UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
		meson test -C build-asan --print-errorlogs --timeout-multiplier 3 $tests
}

run_tsan() {
	setup build-tsan thread
	echo "kvfs sanitize: unit and concurrency tests under TSan"
	export TSAN_OPTIONS="halt_on_error=0 exitcode=66 report_signal_unsafe=0"
	meson test -C build-tsan --print-errorlogs --timeout-multiplier 4 --suite unit
	meson test -C build-tsan --print-errorlogs --timeout-multiplier 4 $TSAN_TESTS
	unset TSAN_OPTIONS
}

for s in ${@:-asan tsan}; do
	case $s in
	asan) run_asan ;;
	tsan) run_tsan ;;
	*) echo "usage: tools/sanitize.sh [asan|tsan]..." >&2; exit 2 ;;
	esac
done
