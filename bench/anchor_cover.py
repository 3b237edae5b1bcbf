#!/usr/bin/env python3
"""The anchor audit behind README's "Speed and memory" (issue 15): which anchors hit how many
lines of some logs, and how many literals a prefilter cover of the anchors needs.

    python3 bench/anchor_cover.py hits LOG...               lines each anchor hits, most first
    python3 bench/anchor_cover.py cover MINLEN K LOG...     a greedy set cover of the anchors
    python3 bench/anchor_cover.py list                      the anchors, one a line (lower case,
                                                            not folded): `rg -i -F -f` input

Anchors are read from the `fn anchors` lists of src/ingest/log/engines/*.rs. Bytes are folded
as a prefilter would fold them (each byte OR 0x20; here newlines are kept), so a literal found in folded text is
found whatever the case. `cover` picks substrings of MINLEN..6 bytes (or a whole anchor,
when shorter) by (occurrences in the logs + K) / anchors newly covered: a larger K buys
fewer, commoner literals. Slow (pure Python): give it tens of MiB, not the 1 GiB log.
"""
import glob
import os
import re
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")


def anchor_literals(src):
    """The string literals of a recogniser's `fn anchors` list, as written in `src`."""
    m = re.search(r"fn anchors\(&self\)[^{]*\{(.*?)\n    \}", src, re.S)
    if not m:
        return []
    body = m.group(1)
    # A list built once (`&HOST_ANCHORS`), and the constant lists it chains in.
    for name in re.findall(r"&([A-Z][A-Z_]+)\b", body):
        d = re.search(r"static " + name + r"\b.*?\n\}\);", src, re.S)
        if d:
            body += d.group(0)
            for const in re.findall(r"\b([A-Z][A-Z_]+)\.iter\(\)", d.group(0)):
                c = re.search(r"const " + const + r"\b.*?\n\];", src, re.S)
                if c:
                    body += c.group(0)
    body = re.sub(r"//[^\n]*", "", body)
    return [lit.encode().decode("unicode_escape").encode("latin1").decode("utf-8")
            for lit in re.findall(r'"((?:[^"\\]|\\.)*)"', body)]


def engine_sources():
    for f in sorted(glob.glob(os.path.join(ROOT, "src/ingest/log/engines/*.rs"))):
        yield os.path.basename(f)[:-3], open(f).read()


def anchors():
    owner = {}
    for name, src in engine_sources():
        for lit in anchor_literals(src):
            owner.setdefault(fold(lit.encode()), set()).add(name)
    return owner


NL = b"\n"
FOLD = bytes(b if b == 0x0A else b | 0x20 for b in range(256))  # newlines kept


def fold(b):
    return b.translate(FOLD)


def logs(paths):
    return fold(b"\n".join(open(p, "rb").read() for p in paths))


def lines_hit(text, lit):
    n, i, last = 0, text.find(lit), -1
    while i >= 0:
        end = text.find(NL, i)
        end = len(text) if end < 0 else end
        if end != last:
            n, last = n + 1, end
        i = text.find(lit, end + 1)
    return n


def plain_anchors():
    return sorted({lit.lower() for _, src in engine_sources() for lit in anchor_literals(src)})


def main():
    if sys.argv[1] == "list":
        print("\n".join(plain_anchors()))
        return
    owner = anchors()
    if sys.argv[1] == "hits":
        text = logs(sys.argv[2:])
        print(f"{len(owner)} anchors, {text.count(NL)} lines")
        for n, a in sorted(((lines_hit(text, a), a) for a in owner), reverse=True):
            print(f"{n:9d} {len(a):3d} {','.join(sorted(owner[a]))} {a.decode('latin1')!r}")
    elif sys.argv[1] == "cover":
        minlen, k, text = int(sys.argv[2]), float(sys.argv[3]), logs(sys.argv[4:])
        cands = {}
        for a in owner:
            for n in range(min(minlen, len(a)), min(len(a), 6) + 1):
                for i in range(len(a) - n + 1):
                    cands.setdefault(a[i : i + n], set()).add(a)
        cands = {c: s for c, s in cands.items() if len(c) >= minlen or c in owner}
        cost = {c: text.count(c) for c in cands}
        left, cover = set(owner), []
        while left:
            best = min(
                (c for c in cands if cands[c] & left),
                key=lambda c: (cost[c] + k) / len(cands[c] & left),
            )
            cover.append(best)
            left -= cands[best]
        print(f"{len(cover)} literals, {sum(cost[c] for c in cover)} occurrences in the logs")
        for c in cover:
            print(f"{cost[c]:9d} {len(cands[c]):4d} {c.decode('latin1')!r}")


if __name__ == "__main__":
    main()
