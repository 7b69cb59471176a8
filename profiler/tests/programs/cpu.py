"""A CPU-bound pure-Python script for profiler/tests/programs.rs: integer arithmetic (Collatz
step counts), a dict of strings, and a JSON round trip (through the interpreter's `_json`
extension, loaded while the script runs). It prints one line that depends only on the work."""

import json


def collatz_steps(n):
    steps = 0
    while n != 1:
        n = n // 2 if n % 2 == 0 else 3 * n + 1
        steps += 1
    return steps


def squares_mod(n):
    return {str(i): i * i % 1009 for i in range(n)}


def main():
    total = sum(collatz_steps(i) for i in range(1, 180_000))
    table = squares_mod(200_000)
    text = json.dumps(table, sort_keys=True)
    back = json.loads(text)
    print(total, len(text), sum(back.values()))


main()
