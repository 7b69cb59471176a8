"""Writes a C file that keeps cc1 busy at -O2 (the benchmarks' cc1 sample sequence, scripts/bench):
N functions with loops to unroll and vectorize and a switch, all called from `main`.
Usage: generate-c.py N > FILE.c"""

import sys

n = int(sys.argv[1])
out = ["#include <stdio.h>"]
for i in range(n):
    out.append(
        f"""static unsigned f{i}(unsigned x) {{
    unsigned a[16];
    for (int k = 0; k < 16; k++) a[k] = x * {i + 3}u + k * (x ^ {i}u);
    for (int r = 0; r < 4; r++)
        for (int k = 1; k < 16; k++) a[k] += (a[k - 1] >> (r + 1)) ^ (a[k] * {2 * i + 1}u);
    switch (x % 7) {{
    case 0: return a[3] + a[5];
    case 1: return a[7] ^ a[1];
    case 2: return a[15] - x;
    case 3: return a[9] * 3u;
    case 4: return a[2] + a[11];
    default: return a[0] ^ a[14];
    }}
}}"""
    )
out.append("int main(void) {\n    unsigned s = 0;")
out += [f"    s += f{i}(s + {i}u);" for i in range(n)]
out.append('    printf("%u\\n", s);\n    return 0;\n}')
print("\n".join(out))
