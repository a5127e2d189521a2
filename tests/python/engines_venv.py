"""Run a test in the engines virtual environment (tools/engines_venv.sh):
in_venv(__file__) re-executes the calling test script with the venv's
interpreter, or exits 77 (skip) saying why the venv is unusable. Used by
the tests that need an engine or torch (test_sglang.py, test_torch.py).
KVFS_ENGINES_VENV: the venv (default /var/cache/kvfs/engines-venv).
"""
import os
import sys

SKIP = 77
VENV = os.environ.get("KVFS_ENGINES_VENV", "/var/cache/kvfs/engines-venv")


def venv_python():
    """The venv's interpreter, or exit 77 with the reason it is unusable."""
    ready = os.path.join(VENV, ".kvfs-ready")
    if not os.path.exists(ready):
        why = "no engines virtual environment at %s (tools/engines_venv.sh makes it)" % VENV
        try:
            with open(VENV + ".failed") as f:
                why = "tools/engines_venv.sh failed: " + f.read().strip()[-600:]
        except OSError:
            pass
        print("SKIP:", why)
        sys.exit(SKIP)
    return os.path.join(VENV, "bin", "python3")


def in_venv(script):
    """Unless this interpreter is the venv's, exec script with it (never
    returns), or exit 77."""
    if os.path.realpath(sys.prefix) == os.path.realpath(VENV):
        return
    py = venv_python()
    pre = os.environ.get("LD_PRELOAD", "")
    if "libasan" in pre and "libstdc++" not in pre:
        # tools/sanitize.sh preloads ASan alone; torch throws C++ exceptions
        # while it loads, and ASan then aborts (its __cxa_throw interceptor
        # finds no libstdc++ loaded before it). Preloaded after it, it does.
        os.environ["LD_PRELOAD"] = pre + " libstdc++.so.6"
    os.execv(py, [py, os.path.abspath(script)] + sys.argv[1:])
