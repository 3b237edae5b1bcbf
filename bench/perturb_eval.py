#!/usr/bin/env python3
"""Metamorphic robustness audit of the log path.

usage: perturb_eval.py BIN [LOG_OR_DIR ...] [--only NAME,NAME] [--show]

For every log (default: ../shared/eval/realworld, fixtures/engines, fixtures/pastes), applies
one realistic paste perturbation at a time (CRLF, colour codes, a per-line prefix, hard
wrapping, a code fence, cutting lines off, two ranks interleaved, tabs, gzip) and compares
`BIN --format json VARIANT` with the unperturbed file on: whether there is an incident, the
first incident's failure kind, cause and determined flag. Prints one line per changed
verdict, then a table perturbation -> files whose verdict changed.

The variants are written to a temporary folder and removed afterwards; nothing here is
needed by `cargo test` or `.ci/run`.
"""
import gzip, json, os, re, subprocess, sys, tempfile
from concurrent.futures import ThreadPoolExecutor

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

LEVEL = re.compile(r"\b(DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL)\b")
EXC = re.compile(r"\b([A-Za-z_.]*(?:Error|Exception))\b")


def lines_of(text):
    return text.split("\n")


def join(lines):
    return "\n".join(lines)


def prefix(p):
    def f(text):
        ls = lines_of(text)
        trailing = ls and ls[-1] == ""
        out = [p + l for l in (ls[:-1] if trailing else ls)]
        return join(out + ([""] if trailing else []))

    return f


def wrap(width):
    def f(text):
        out = []
        for l in lines_of(text):
            while len(l) > width:
                out.append(l[:width])
                l = l[width:]
            out.append(l)
        return join(out)

    return f


def cut_head(frac):
    def f(text):
        ls = lines_of(text)
        return join(ls[int(len(ls) * frac):])

    return f


def cut_tail(frac):
    def f(text):
        ls = lines_of(text)
        if ls and ls[-1] == "":
            ls = ls[:-1]
        keep = len(ls) - max(1, int(len(ls) * frac)) if len(ls) > 1 else len(ls)
        return join(ls[:keep]) + "\n"

    return f


def interleave_ranks(text):
    ls = lines_of(text)
    if ls and ls[-1] == "":
        ls = ls[:-1]
    out = []
    for l in ls:
        out.append("[rank0]: " + l)
        out.append("[rank1]: " + l)
    return join(out) + "\n"


def interleave_blocks(text):
    """Two ranks without prefixes whose output interleaves in runs of a few lines."""
    ls = lines_of(text)
    if ls and ls[-1] == "":
        ls = ls[:-1]
    out = []
    i = 0
    step = 3
    while i < len(ls):
        block = ls[i:i + step]
        out += block + block
        i += step
        step = 2 + (step % 4)
    return join(out) + "\n"


def tabs(text):
    out = []
    for l in lines_of(text):
        m = re.match(r"^( +)", l)
        if m:
            n = len(m.group(1))
            l = "\t" * max(1, n // 4) + " " * (n % 4 if n >= 4 else 0) + l[n:]
        out.append(l)
    return join(out)


def ansi_levels(text):
    return LEVEL.sub(lambda m: "\x1b[1;31m" + m.group(1) + "\x1b[0m", text)


def ansi_words(text):
    return EXC.sub(lambda m: "\x1b[31m" + m.group(1) + "\x1b[0m", text)


def fence(text):
    return "```\n" + text.rstrip("\n") + "\n```\n"


def whitespace(text):
    ls = lines_of(text.rstrip("\n"))
    return "\n\n  \n" + join(l + "  " for l in ls) + "\n\n\n"


def indent(text):
    return join(("    " + l) if l else l for l in lines_of(text))


PERTURB = [
    ("crlf", lambda t: t.replace("\r\n", "\n").replace("\n", "\r\n")),
    ("ansi-levels", ansi_levels),
    ("ansi-words", ansi_words),
    ("pfx-iso", prefix("2026-01-01T10:00:00.123456Z ")),
    ("pfx-rank", prefix("[rank3]: ")),
    ("pfx-ray", prefix("(RayWorkerWrapper pid=1234) ")),
    ("pfx-pylog", prefix("2026-01-01 10:00:00,123 - INFO - ")),
    ("pfx-pylog-name", prefix("2026-01-01 10:00:00,123 - trainer - INFO - ")),
    ("pfx-loguru", prefix("2026-01-01 10:00:00.123 | INFO     | __main__:main:42 - ")),
    ("pfx-compose", prefix("svc-1  | ")),
    ("pfx-kubectl", prefix("[pod/trainer-7d9f8/main] ")),
    ("pfx-kubectl-bare", prefix("trainer-7d9f8 ")),
    ("pfx-pdsh", prefix("worker-1: ")),
    ("pfx-gha", prefix("2026-01-01T10:00:00.1234567Z ")),
    ("pfx-quote", prefix("> ")),
    ("wrap80", wrap(80)),
    ("wrap100", wrap(100)),
    ("wrap120", wrap(120)),
    ("whitespace", whitespace),
    ("indent4", indent),
    ("fence", fence),
    ("cut-head30", cut_head(0.3)),
    ("cut-tail10", cut_tail(0.1)),
    ("ranks2-prefixed", interleave_ranks),
    ("ranks2-blocks", interleave_blocks),
    ("tabs", tabs),
    ("gzip", None),
]


def verdict(binary, path):
    p = subprocess.run([binary, "--format", "json", path], capture_output=True, timeout=60)
    try:
        out = json.loads(p.stdout.decode("utf-8", "replace") or "{}")
    except ValueError:
        return ("unreadable",), None
    inc = out.get("incidents", [])
    if not inc:
        return ("none",), None
    i = inc[0]
    line = (i.get("location") or {}).get("line")
    return (i.get("kind"), i.get("cause"), i.get("determined", True)), line


def removed(name, raw, line):
    """Whether a cut perturbation removed the baseline's failure line itself."""
    if line is None:
        return False
    ls = lines_of(raw)
    if name == "cut-head30":
        return line <= int(len(ls) * 0.3)
    if name == "cut-tail10":
        if ls and ls[-1] == "":
            ls = ls[:-1]
        return line > len(ls) - max(1, int(len(ls) * 0.1))
    return False


def fmt(v):
    if v[0] in ("none", "unreadable"):
        return v[0]
    return f"{v[0]}/{v[1]}{'' if v[2] else '?'}"


def collect(args):
    paths = []
    for a in args:
        if os.path.isdir(a):
            for n in sorted(os.listdir(a)):
                if n.endswith((".log", ".txt")):
                    paths.append(os.path.join(a, n))
        else:
            paths.append(a)
    return paths


def main():
    argv = sys.argv[1:]
    only = None
    if "--only" in argv:
        i = argv.index("--only")
        only = set(argv[i + 1].split(","))
        del argv[i:i + 2]
    show = "--show" in argv
    argv = [a for a in argv if a != "--show"]
    binary = os.path.abspath(argv[0])
    targets = argv[1:] or [
        os.path.join(ROOT, "..", "shared", "eval", "realworld"),
        os.path.join(ROOT, "fixtures", "engines"),
        os.path.join(ROOT, "fixtures", "pastes"),
    ]
    files = collect(targets)
    perturbs = [p for p in PERTURB if only is None or p[0] in only]
    changed = {name: [] for name, _ in perturbs}
    gone = {name: [] for name, _ in perturbs}
    raws = {}
    with tempfile.TemporaryDirectory(prefix="perturb-") as tmp, ThreadPoolExecutor(2) as pool:
        jobs = []
        for f in files:
            base = os.path.basename(f)
            raw = open(f, "rb").read().decode("utf-8", "surrogateescape")
            raws[base] = raw
            jobs.append((base, None, pool.submit(verdict, binary, f)))
            for name, fn in perturbs:
                stem = os.path.join(tmp, f"{name}--{base}")
                if fn is None:
                    path = stem + ".gz"
                    with gzip.open(path, "wb") as g:
                        g.write(raw.encode("utf-8", "surrogateescape"))
                else:
                    path = stem
                    with open(path, "wb") as o:
                        o.write(fn(raw).encode("utf-8", "surrogateescape"))
                jobs.append((base, name, pool.submit(verdict, binary, path)))
        baseline = {}
        for base, name, fut in jobs:
            v, line = fut.result()
            if name is None:
                baseline[base] = (v, line)
                continue
            b, bline = baseline[base]
            if v != b:
                # Cutting the failure line itself off is not a robustness failure.
                cut_off = removed(name, raws[base], bline)
                (gone if cut_off else changed)[name].append(base)
                if show:
                    note = "  (failure line cut off)" if cut_off else ""
                    print(f"{name:18s} {base}: {fmt(b)} -> {fmt(v)}{note}")
    print()
    print(f"{len(files)} files x {len(perturbs)} perturbations")
    total = 0
    for name, _ in perturbs:
        fs = changed[name]
        total += len(fs)
        extra = f"  [+{len(gone[name])} with the failure line cut off]" if gone[name] else ""
        print(f"{name:18s} {len(fs):3d}  {' '.join(sorted(fs))}{extra}")
    print(f"changed verdicts: {total} (not counting the failure line cut off)")


if __name__ == "__main__":
    main()
