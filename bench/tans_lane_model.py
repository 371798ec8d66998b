#!/usr/bin/env python3
"""What a tANS lane would cost beyond its symbols' information: a model for a
later format (docs/performance.md, "Tile layouts on the current code", "A
fourth way, with tANS lanes"). Not the format; plain Python, no dependencies.

Each lane codes N tokens drawn from geometric distributions over the format's
32 tokens (ratios RHO_MIN..RHO_MAX, a distribution per symbol in turn, as the
components' contexts change). The encoder runs backwards from a known final
state, writes each symbol's bits, and ends with the R-bit state the decoder
starts from; the decoder then decodes every lane and must end in that known
state with the same tokens. Printed per state size R: the lanes' bits beyond
the tokens' information under the true distributions, split into what the
coarser probabilities of R-bit tables cost and the rest (the lane's end), and
the same for the version 2 rANS lane (its 4-byte final state, 12-bit
frequencies, the information plus about 32 bits by the format's rule).

    bench/tans_lane_model.py [--lanes 200] [--tokens 768] [--seed 1] [--floor P]
"""
import argparse
import math
import random

TOKENS = 32


def geometric(rho, floor):
    """Geometric token probabilities, without the tokens below `floor` (a
    frame's tables have no count for tokens that do not occur; 0 keeps all
    32 tokens, however rare)."""
    w = [rho ** k for k in range(TOKENS)]
    s = sum(w)
    w = [x if x / s >= floor else 0.0 for x in w]
    s = sum(w)
    return [x / s for x in w]


def normalise(p, total):
    """Counts summing to `total`, at least 1 for each token that occurs (the
    most probable takes the rest)."""
    n = [max(1, int(x * total)) if x > 0 else 0 for x in p]
    n[max(range(TOKENS), key=lambda k: p[k])] += total - sum(n)
    assert sum(n) == total and all(c >= 1 for c, x in zip(n, p) if x > 0)
    return n


class Table:
    """A tANS table of 2**r states: the counts spread over the states with the
    step FSE uses; decoding entry i: token, bits to read, base of the next."""

    def __init__(self, p, r):
        self.r, self.L = r, 1 << r
        L = self.L
        self.n = normalise(p, L)
        sym = [0] * L
        step, pos = (L >> 1) + (L >> 3) + 3, 0
        for k in range(TOKENS):
            for _ in range(self.n[k]):
                sym[pos] = k
                pos = (pos + step) & (L - 1)
        nxt = list(self.n)
        self.dec = []
        self.enc = {}  # (token, q) -> state index
        for i in range(L):
            k = sym[i]
            q = nxt[k]
            assert self.n[k] > 0
            nxt[k] += 1
            nb = r - (q.bit_length() - 1)
            self.dec.append((k, nb, (q << nb) - L))
            self.enc[(k, q)] = i

    def encode(self, x, k):
        """From state index x (state x + L) to the index that decodes token k
        and leads back to x; returns (new index, bits, their count)."""
        X = x + self.L
        q0 = self.n[k]
        nb = 0
        while (X >> nb) >= 2 * q0:
            nb += 1
        return self.enc[(k, X >> nb)], X & ((1 << nb) - 1), nb


def run(lanes, tokens, r, rng, dists):
    """Per lane on average: the tokens' information, the tANS lane's bits,
    the tokens' cost under the tables' counts (the cross-entropy: what the
    coarser probabilities alone cost) and under 12-bit frequencies plus the
    rANS lane's 32-bit end (docs/performance.md, "Why a lane's state is
    hard to make cheaper")."""
    tables = [Table(p, r) for p in dists]
    f12 = [normalise(p, 4096) for p in dists]
    info = coded = cross = rans = 0.0
    for _ in range(lanes):
        seq = []
        for t in range(tokens):
            d = t % len(dists)
            seq.append((d, rng.choices(range(TOKENS), dists[d])[0]))
        info += sum(-math.log2(dists[d][k]) for d, k in seq)
        for d, k in seq:
            cross += -math.log2(tables[d].n[k] / tables[d].L)
            rans += -math.log2(f12[d][k] / 4096)
        # encoder: backwards from the known final state 0 (a checksum in a
        # format); bits as a stack that the decoder pops in reverse
        x, bits = 0, []
        for d, k in reversed(seq):
            x, v, nb = tables[d].encode(x, k)
            bits.append((v, nb))
        coded += sum(nb for _, nb in bits) + r  # the symbols' bits, the start state
        # decoder: from x, reading the bits in reverse order of writing
        for d, k in seq:
            tok, nb, base = tables[d].dec[x]
            assert tok == k
            v, n = bits.pop()
            assert n == nb
            x = base + v
        assert x == 0 and not bits
    return info / lanes, coded / lanes, cross / lanes, rans / lanes + 32


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lanes", type=int, default=200)
    ap.add_argument("--tokens", type=int, default=768, help="tokens per lane (3 x 256 samples)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--floor", type=float, default=1 / 4096,
                    help="tokens less probable than this do not occur (0: all 32 occur)")
    a = ap.parse_args()
    print("lanes of %d tokens, %d lanes per row, tokens below %g left out; bits per lane beyond "
          "the tokens' information" % (a.tokens, a.lanes, a.floor))
    print("| distributions (geometric ratios) | information | R | tANS bits | beyond | of which "
          "the R-bit state | the coarser probabilities | rANS (12-bit frequencies, 4-byte end) |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for lo, hi in ((0.02, 0.1), (0.1, 0.5), (0.3, 0.8)):
        dists = [geometric(lo + (hi - lo) * i / 12, a.floor) for i in range(13)]
        for r in (10, 11, 12):
            info, coded, cross, rans = run(a.lanes, a.tokens, r, random.Random(a.seed), dists)
            print("| %.2f-%.2f | %.1f | %d | %.1f | %.1f | %d | %.1f | %.1f |"
                  % (lo, hi, info, r, coded, coded - info, r, cross - info, rans - info))


if __name__ == "__main__":
    main()
