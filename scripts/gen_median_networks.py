#!/usr/bin/env python3
"""Generates cuda/kernels/median_networks.h: straight-line min/max networks that
give the exact median of K x K windows (K = 3, 5, 7) for ROWS vertically
adjacent outputs at once.

The scheme (after A. Adams, "Fast median filters using separable sorting
networks", 2021, in its simplest form): every input row of K values is sorted
once (a sorting network) and shared by the K windows that contain it; the
sorted rows of the rows every window shares (the "core") are merged once; each
window merges the core with its own extra rows and keeps only the median. The
merges are Batcher odd-even merges of arbitrary sizes; the last one is replaced
by a direct selection of the median from two sorted lists. Identical min/max
nodes are built once and everything that does not feed a median is dropped, so
the emitted code is the pruned network.

Each network is checked here on random inputs, and tests/core/test_gauss.cpp
checks the emitted code exhaustively on 0-1 inputs (the 0-1 principle) for
K = 3 and 5.

    python3 scripts/gen_median_networks.py > cuda/kernels/median_networks.h
"""
import random
import sys

# ---------------------------------------------------------------- the DAG
nodes = []  # (op, a, b) with a, b node ids; inputs are ('in', r, c)
memo = {}


def reset():
    nodes.clear()
    memo.clear()


def inp(r, c):
    key = ('in', r, c)
    if key not in memo:
        memo[key] = len(nodes)
        nodes.append(key)
    return memo[key]


def op(name, a, b):
    if a == b:
        return a
    if a is None:  # -inf
        return b if name == 'max' else None
    if b is None:
        return a if name == 'max' else None
    key = (name, min(a, b), max(a, b))
    if key not in memo:
        memo[key] = len(nodes)
        nodes.append(key)
    return memo[key]


def mn(a, b):
    return op('min', a, b)


def mx(a, b):
    return op('max', a, b)


# Optimal sorting networks (comparator pairs), checked below on 0-1 inputs.
SORT = {
    1: [],
    2: [(0, 1)],
    3: [(1, 2), (0, 2), (0, 1)],
    5: [(0, 1), (3, 4), (2, 4), (2, 3), (0, 3), (0, 2), (1, 4), (1, 3), (1, 2)],
    7: [(1, 2), (3, 4), (5, 6), (0, 2), (3, 5), (4, 6), (0, 1), (4, 5), (2, 6), (0, 4), (1, 5),
        (0, 3), (2, 5), (1, 3), (2, 4), (2, 3)],
}


def sort_list(values):
    v = list(values)
    if len(v) in SORT:
        for i, j in SORT[len(v)]:
            v[i], v[j] = mn(v[i], v[j]), mx(v[i], v[j])
        return v
    h = len(v) // 2
    return merge(sort_list(v[:h]), sort_list(v[h:]))


def merge(a, b):
    """Batcher's odd-even merge of two sorted lists of any sizes."""
    if not a:
        return list(b)
    if not b:
        return list(a)
    if len(a) == 1 and len(b) == 1:
        return [mn(a[0], b[0]), mx(a[0], b[0])]
    even = merge(a[0::2], b[0::2])
    odd = merge(a[1::2], b[1::2])
    out = [even[0]]
    k = 0
    n = len(a) + len(b)
    while len(out) < n:
        if k < len(odd) and k + 1 < len(even):
            out += [mn(odd[k], even[k + 1]), mx(odd[k], even[k + 1])]
        elif k < len(odd):
            out.append(odd[k])
        elif k + 1 < len(even):
            out.append(even[k + 1])
        k += 1
    return out


def select(a, b, k):
    """The k-th smallest (0-based) of two sorted lists: the k+1 smallest are the
    first i of a and the first k+1-i of b for some i, so the answer is the
    minimum over i of max(a[i-1], b[k-i])."""
    best = None
    for i in range(0, len(a) + 1):
        j = k + 1 - i
        if j < 0 or j > len(b):
            continue
        x = a[i - 1] if i > 0 else None
        y = b[j - 1] if j > 0 else None
        m = mx(x, y)
        best = m if best is None else mn(best, m)
    return best


# ------------------------------------------------------------- the scheme
def build(K, ROWS, final_select):
    reset()
    nrows = K + ROWS - 1
    rows = [sort_list([inp(r, c) for c in range(K)]) for r in range(nrows)]
    cache = {}

    def merged(lo, hi):  # the sorted union of rows lo..hi-1
        if hi <= lo:
            return []
        if (lo, hi) not in cache:
            if hi - lo == 1:
                cache[(lo, hi)] = rows[lo]
            else:
                m = (lo + hi) // 2
                cache[(lo, hi)] = merge(merged(lo, m), merged(m, hi))
        return cache[(lo, hi)]

    outs = []
    mid = K * K // 2
    for o in range(ROWS):
        core = merged(ROWS - 1, K) if ROWS <= K else []
        if ROWS <= K:
            top = merged(o, ROWS - 1)
            bottom = merged(K, K + o)
            extra = merge(top, bottom)
        else:
            core, extra = merged(o, o + K), []
        if final_select and extra:
            outs.append(select(core, extra, mid))
        else:
            outs.append(merge(core, extra)[mid])
    return outs


def live(outs):
    seen = set()
    stack = list(outs)
    while stack:
        x = stack.pop()
        if x in seen:
            continue
        seen.add(x)
        n = nodes[x]
        if n[0] != 'in':
            stack += [n[1], n[2]]
    return sorted(seen)


def evaluate(outs, env):
    val = {}
    for i in live(outs):
        n = nodes[i]
        if n[0] == 'in':
            val[i] = env[(n[1], n[2])]
        else:
            a, b = val[n[1]], val[n[2]]
            val[i] = min(a, b) if n[0] == 'min' else max(a, b)
    return [val[o] for o in outs]


def check(K, ROWS, outs, trials=400):
    rnd = random.Random(1234 + K * 10 + ROWS)
    for t in range(trials):
        hi = rnd.choice([1, 3, 255])
        env = {(r, c): rnd.randint(0, hi) for r in range(K + ROWS - 1) for c in range(K)}
        got = evaluate(outs, env)
        for o in range(ROWS):
            window = sorted(env[(r, c)] for r in range(o, o + K) for c in range(K))
            assert got[o] == window[K * K // 2], (K, ROWS, o)


def check_sorts():
    import itertools
    for n, net in SORT.items():
        for bits in itertools.product([0, 1], repeat=n):
            v = list(bits)
            for i, j in net:
                v[i], v[j] = min(v[i], v[j]), max(v[i], v[j])
            assert v == sorted(bits), n


# Rows per thread chosen per K (fewest min/max per output with modest registers).
CHOICES = {3: 2, 5: 2, 7: 3}


def emit(K, ROWS, outs, out):
    order = live(outs)
    ops = sum(1 for i in order if nodes[i][0] != 'in')
    name = {}
    out.append('')
    out.append('// %dx%d median of %d vertically adjacent windows: %d min/max operations '
               '(%.1f per output).' % (K, K, ROWS, ops, ops / ROWS))
    out.append('// in[r][c]: row r (0 = top row of the first window), column c; out[o]: the')
    out.append('// median of rows o .. o+%d.' % (K - 1))
    out.append('template <>')
    out.append('struct MedianNetwork<%d> {' % K)
    out.append('  static constexpr int kRows = %d;     // outputs per call' % ROWS)
    out.append('  static constexpr int kInputRows = %d;' % (K + ROWS - 1))
    out.append('  static constexpr int kOps = %d;' % ops)
    out.append('  template <class L>')
    out.append('  static MEDIAN_NET_HD void run(const typename L::T (&in)[%d][%d], '
               'typename L::T (&out)[%d]) {' % (K + ROWS - 1, K, ROWS))
    t = 0
    for i in order:
        n = nodes[i]
        if n[0] == 'in':
            name[i] = 'in[%d][%d]' % (n[1], n[2])
            continue
        name[i] = 't%d' % t
        t += 1
        out.append('    const typename L::T %s = L::%s(%s, %s);' %
                   (name[i], n[0], name[n[1]], name[n[2]]))
    for o, x in enumerate(outs):
        out.append('    out[%d] = %s;' % (o, name[x]))
    out.append('  }')
    out.append('};')


def main():
    check_sorts()
    if '--table' in sys.argv:
        for K in (3, 5, 7):
            for ROWS in (1, 2, 3, 4, 5, 6):
                for fs in (False, True):
                    outs = build(K, ROWS, fs)
                    check(K, ROWS, outs, 50)
                    n = sum(1 for i in live(outs) if nodes[i][0] != 'in')
                    print('K=%d ROWS=%d select=%d: %d ops, %.1f per output' %
                          (K, ROWS, fs, n, n / ROWS))
        return
    out = ['// Generated by scripts/gen_median_networks.py: do not edit.',
           '// clang-format off',
           '//',
           '// Exact medians of K x K windows as pruned min/max networks (see the',
           '// script for the scheme). L is a lane type: L::T a value type, L::min and',
           '// L::max element-wise operations on it (16-bit lanes on the GPU, one byte',
           '// per lane in the CPU backend, 64 0-1 inputs at a time in the exhaustive',
           '// test). On the host the networks are always inlined, so that the CPU',
           '// backend\'s loop over a row around them is vectorised.',
           '#pragma once',
           '',
           '#if defined(__CUDACC__)',
           '#define MEDIAN_NET_HD __host__ __device__ __forceinline__',
           '#elif defined(__GNUC__) || defined(__clang__)',
           '#define MEDIAN_NET_HD inline __attribute__((always_inline))',
           '#else',
           '#define MEDIAN_NET_HD inline',
           '#endif',
           '',
           'namespace cudadiff {',
           'namespace median_net {',
           '',
           'template <int K>',
           'struct MedianNetwork;']
    for K in (3, 5, 7):
        ROWS = CHOICES[K]
        outs = build(K, ROWS, True)
        check(K, ROWS, outs)
        emit(K, ROWS, outs, out)
    out += ['', '}  // namespace median_net', '}  // namespace cudadiff', '']
    sys.stdout.write('\n'.join(out))


if __name__ == '__main__':
    main()
