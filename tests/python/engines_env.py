"""What the engine backend tests share: running in their engines virtual
environment (tools/engines_venv.sh), skipping (exit 77) with the reason when
it or /dev/fuse is missing, and damaging a page where it lies on disk.

    import engines_env
    engines_env.enter("vllm", "from vllm.v1.kv_offload.tiering.spec import TieringOffloadingSpec")

enter() re-executes the calling script with the venv's interpreter when it
is not already running in it, then checks the imports. NAME's venv is
$KVFS_<NAME>_VENV (default /var/cache/kvfs/NAME-venv); SGLang's is
$KVFS_ENGINES_VENV (default /var/cache/kvfs/engines-venv).
"""
import contextlib
import os
import shutil
import subprocess
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SKIP = 77


def venv_dir(name):
    if name == "sglang":
        return os.environ.get("KVFS_ENGINES_VENV", "/var/cache/kvfs/engines-venv")
    return os.environ.get("KVFS_%s_VENV" % name.upper().replace("-", "_"),
                          "/var/cache/kvfs/%s-venv" % name)


def _venv_python(venv):
    """The venv's interpreter, or exit 77 with the reason it is unusable."""
    if not os.path.exists(os.path.join(venv, ".kvfs-ready")):
        why = "no engines virtual environment at %s (tools/engines_venv.sh makes it)" % venv
        try:
            with open(venv + ".failed") as f:
                why = "tools/engines_venv.sh failed: " + f.read().strip()[-600:]
        except OSError:
            pass
        print("SKIP:", why)
        sys.exit(SKIP)
    return os.path.join(venv, "bin", "python3")


def enter(name, imports):
    """Run the main script in venv `name`; exit 77 saying why if that, the
    imports (a statement) or /dev/fuse are not there."""
    venv = venv_dir(name)
    if os.path.realpath(sys.prefix) != os.path.realpath(venv):
        py = _venv_python(venv)
        pre = os.environ.get("LD_PRELOAD", "")
        if "libasan" in pre and "libstdc++" not in pre:
            # tools/sanitize.sh preloads ASan alone; torch throws C++
            # exceptions while it loads, and ASan then aborts (its
            # __cxa_throw interceptor finds no libstdc++ loaded before it).
            # Preloaded after it, it does.
            os.environ["LD_PRELOAD"] = pre + " libstdc++.so.6"
        script = os.path.abspath(sys.modules["__main__"].__file__)
        os.execv(py, [py, script] + sys.argv[1:])
    if not os.path.exists("/dev/fuse") or shutil.which("fusermount3") is None:
        print("SKIP: no /dev/fuse or fusermount3 on this machine")
        sys.exit(SKIP)
    sys.path.insert(0, os.path.join(HERE, "..", "..", "client", "python"))
    try:
        exec(imports, {})
    except Exception as e:      # an incomplete venv: say exactly what is missing
        print("SKIP: the %s engines venv (%s) does not import: %r" % (name, venv, e))
        sys.exit(SKIP)


def damage(page, at=100):
    """Flip one byte of a page where it lies in its segment file."""
    seg = os.getxattr(page, "user.kvfs.segment")
    ext = dict(kv.split(b"=") for kv in os.getxattr(page, "user.kvfs.extent").split())
    off = int(ext[b"offset"]) + at
    fd = os.open(seg, os.O_RDWR)
    try:
        os.pwrite(fd, bytes([os.pread(fd, 1, off)[0] ^ 0xFF]), off)
        os.fsync(fd)
    finally:
        os.close(fd)


class MountedCase(unittest.TestCase):
    """Tests that share one mount (self.m, a test_kvfs.Mount), with reads
    from the device (ram_cache=0), where damage is; the daemon must exit
    cleanly at the end."""

    OPTS = "ram_cache=0"

    @classmethod
    def setUpClass(cls):
        from test_kvfs import Mount
        cls.m = Mount()
        cls.m.start(cls.OPTS)

    @classmethod
    def tearDownClass(cls):
        rc, errors, tail = cls.m.finish()
        if rc not in (0, None):
            raise AssertionError("daemon exited %s:\n%s" % (rc, tail))

    def remount(self, opts=None):
        self.m.stop()
        self.m.start(opts or self.OPTS)


@contextlib.contextmanager
def small_store(testcase, capacity):
    """A mount of a fresh store of `capacity` (kvfs mkfs --capacity):
    yields the Mount; the daemon must exit cleanly."""
    from test_kvfs import Mount
    m = Mount()
    subprocess.run([m.kvfs, "mkfs", "--capacity", capacity, m.store], check=True,
                   stdout=subprocess.DEVNULL)
    m.start(MountedCase.OPTS)
    try:
        yield m
    finally:
        rc, errors, tail = m.finish()
    testcase.assertIn(rc, (0, None), tail)
