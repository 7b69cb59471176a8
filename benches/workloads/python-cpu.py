"""A CPU-bound Python script for the benchmarks' sample sequences (scripts/bench): JSON
encoding and decoding (the `_json` extension), regular expressions (`_sre`) and a recursive
function, so that samples land in the interpreter's eval loop, its object code and two
extension modules, at the stack depths of real Python programs. Prints one line that depends
only on the work."""

import json
import re
import sys

WORD = re.compile(r"([a-z]+)(\d+)")


def tree(depth, seed):
    if depth == 0:
        return {"leaf": f"w{seed % 97}x{seed}", "n": seed}
    return {"l": tree(depth - 1, seed * 3 + 1), "r": tree(depth - 1, seed * 5 + 2)}


def walk(node):
    if "leaf" in node:
        m = WORD.match(node["leaf"])
        return node["n"] + (len(m.group(1)) if m else 0)
    return walk(node["l"]) ^ walk(node["r"])


def main(rounds):
    total = 0
    for i in range(rounds):
        doc = tree(11, i)
        text = json.dumps(doc, sort_keys=True)
        back = json.loads(text)
        total ^= walk(back)
        total += sum(int(d) for _, d in WORD.findall(text[:4000]))
    print(total)


main(int(sys.argv[1]) if len(sys.argv) > 1 else 40)
