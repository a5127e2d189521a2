#!/usr/bin/env bash
# A uid other than root owns at most -o dir_share directories (models and
# layers together): past it mkdir fails with EDQUOT and a log line; rmdir,
# chown to another owner and a rename over an empty directory give room
# back; the count survives a remount (it is made from the store at open);
# root is not limited. Before, a uid allowed to make models made 116,000
# directories in 30 s, about 360 bytes of daemon RAM each, without bound.
. "$(dirname "$0")/lib.sh"
NOBODY="setpriv --reuid=65534 --regid=65534 --clear-groups"
as_nobody() { $NOBODY "$@"; }

mkfs
chmod 755 "$T"    # uid 65534 reaches the mount
mount_kvfs -o allow_other,dir_share=5
chmod 1777 "$MNT"
as_nobody mkdir "$MNT/a" "$MNT/a/0" "$MNT/a/1" "$MNT/b" "$MNT/b/0" ||
	fail "uid 65534 could not make 5 directories with dir_share=5"
err=$(as_nobody mkdir "$MNT/a/2" 2>&1) && fail "a sixth directory of uid 65534 was made"
case $err in *"quota exceeded"*) ;; *) fail "sixth mkdir: $err, want EDQUOT" ;; esac
grep -q "mkdir by uid 65534 refused (EDQUOT): it owns 5 directories" "$LOG" ||
	fail "no log line for the refused mkdir"
mkdir "$MNT/r" "$MNT/r/0" "$MNT/r/1" || fail "root was limited by dir_share"
as_nobody rmdir "$MNT/b/0" || fail "rmdir b/0"
as_nobody mkdir "$MNT/a/2" || fail "mkdir after an rmdir gave one back"
chown 0 "$MNT/a/2" || fail "chown a/2 to root"
as_nobody mkdir "$MNT/c" || fail "mkdir after a chown to root gave one back"
as_nobody mkdir "$MNT/d" 2>/dev/null && fail "a sixth directory after the chown"
as_nobody mkdir "$MNT/b/7" 2>/dev/null && fail "a sixth directory, again"
umount_kvfs
mount_kvfs -o allow_other,dir_share=5
as_nobody mkdir "$MNT/d" 2>/dev/null && fail "the count was lost at the remount"
# A rename of an empty model of uid 65534 over another (its own) frees one.
as_nobody mv -T "$MNT/c" "$MNT/b" || fail "rename of model c over the empty model b"
as_nobody mkdir "$MNT/d" || fail "mkdir after a directory went"
umount_kvfs
mount_kvfs -o allow_other
as_nobody mkdir "$MNT/e" "$MNT/e/0" || fail "the default dir_share refused a seventh directory"
umount_kvfs
no_errors_in_log
echo "PASS: directories per uid"
