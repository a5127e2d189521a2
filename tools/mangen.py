#!/usr/bin/env python3
"""Build kvfs(8) from its template and the kvfs binary's own help.

    mangen.py KVFS TEMPLATE OUTPUT

The COMMANDS section is `kvfs --help`'s command list, and one subsection
per command holding exactly what `kvfs COMMAND --help` prints: the man page
and the help cannot drift apart, and tests/unit/manpage.sh checks it.
Template markers: @VERSION@, @OVERVIEW@, @COMMANDS@.
"""
import re
import subprocess
import sys


def run_help(kvfs, *args):
    r = subprocess.run([kvfs, *args, "--help"], capture_output=True, text=True)
    if r.returncode != 0 or not r.stdout.strip():
        sys.exit(f"mangen: `kvfs {' '.join(args)} --help` failed "
                 f"(exit {r.returncode}): {r.stderr.strip()}")
    return r.stdout


def commands(overview):
    """Command names in the order `kvfs --help` lists them."""
    seen = []
    for m in re.finditer(r"^  ([a-z][a-z-]+)\b", overview, re.M):
        name = m.group(1)
        if name not in seen and name != "version":
            seen.append(name)
    return seen


def roff_text(text):
    """Verbatim lines for a .nf block: escapes, literal minus signs, and no
    line that roff would take for a request."""
    out = []
    for line in text.rstrip("\n").split("\n"):
        line = line.replace("\\", "\\e").replace("-", "\\-")
        if line.startswith((".", "'")):
            line = "\\&" + line
        out.append(line)
    return "\n".join(out)


def block(text):
    return ".nf\n.RS 4\n" + roff_text(text) + "\n.RE\n.fi"


def main():
    kvfs, template, output = sys.argv[1:4]
    overview = run_help(kvfs)
    version = subprocess.run([kvfs, "version"], capture_output=True,
                             text=True, check=True).stdout.split()[-1]
    cmds = commands(overview)
    if not cmds:
        sys.exit("mangen: no commands found in `kvfs --help`")
    sections = [f".SS kvfs {c}\n{block(run_help(kvfs, c))}" for c in cmds]
    with open(template) as f:
        page = f.read()
    page = (page.replace("@VERSION@", version)
                .replace("@OVERVIEW@", block(overview))
                .replace("@COMMANDS@", "\n".join(sections)))
    with open(output, "w") as f:
        f.write(page)


if __name__ == "__main__":
    main()
