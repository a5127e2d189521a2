#!/bin/bash
# One uid's open page files hold at most its share of the capacity against
# eviction (-o open_share, default 25%), together with the pages it is
# still writing: uid 65534 writing 4 MiB keeps 2 pages of 2 MiB open in a
# 32 MiB store (EMFILE for the rest, and for a create), and root's
# writes, which need room, still get it from the other pages.
. "$(dirname "$0")/lib.sh"
command -v setpriv >/dev/null || skip "setpriv (util-linux) is needed to act as uid 65534"

mkfs --capacity 32M
mount_kvfs -o allow_other
python3 "$(dirname "$0")/openshare.py" fill "$MNT" || fail "filling the store"
mkdir "$MNT/m/1" && chown 65534:65534 "$MNT/m/1" || fail "a layer for uid 65534"
chmod 755 "$T"
mkdir -p "$T/nobody" && cp "$(dirname "$0")/openshare.py" "$T/nobody/" &&
	chmod -R a+rwX "$T/nobody" || fail "copying the script for uid 65534"
PY3=$(command -v /usr/bin/python3 || command -v python3)   # not a shim under /root
timeout 150 setpriv --reuid 65534 --regid 65534 --clear-groups \
	"$PY3" "$T/nobody/openshare.py" hold "$MNT" "$T/nobody/ready" &
holder=$!
for _ in $(seq 100); do [ -e "$T/nobody/ready" ] && break; sleep 0.1; done
[ -e "$T/nobody/ready" ] || fail "uid 65534 did not get to hold its pages"
read -r held refused created < "$T/nobody/ready"
echo "uid 65534 writes 4 MiB, holds $held pages open ($refused opens refused), created $created more"
[ "$held" -eq 2 ] && [ "$refused" -ge 1 ] && [ "$created" -eq 0 ] ||
	fail "uid 65534 holds $held pages of 2 MiB open ($refused refused) beside 4 MiB it writes, and created $created more: its share of a 32M store is 8M"
grep -q "refused (EMFILE): uid 65534" "$LOG" || fail "the refusal is not logged"
python3 "$(dirname "$0")/openshare.py" flood "$MNT" || fail "root's writes"
kill -0 $holder 2>/dev/null || fail "the holder died: its pages read back wrong?"
kill $holder; wait $holder 2>/dev/null || true
for i in $(seq 0 14); do
	[ -e "$MNT/m/0/p$(printf %02d $i)" ] && kept=$((${kept:-0} + 1))
done
echo "pages left of the 15: ${kept:-0}"
umount_kvfs
no_errors_in_log
echo "PASS"
