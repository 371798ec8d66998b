#!/usr/bin/env python3
"""What version 2's bodies would cost with tANS lanes and a palette of small
tables: a model for a later format, on real frames (docs/performance.md, "A
body of tANS lanes on real frames"). Not the format; plain Python, no
dependencies, slow (the symbols come from a decoder written in Python).

A GPU decoder's step with tANS lanes is cheaper than the format's rANS step
only while the frame's tables sit in shared memory ("The same step with
tANS"), and a frame of version 2 has up to about 120 distributions with a
table of its own. This codes the clips with the CPU encoder
(build/bench/codec2_decode --encode, in each layout asked for), decodes every
body with the second decoder (tests/core/codec2_reference.py), keeps each
lane's tokens in the order they are decoded, and codes them again:

  - the tokens with a table of 2^R states per distribution (its counts in the
    frame normalised to 2^R, each token that occurs at least one state), and
    with a palette of P tables of 2^R states per frame (the distributions
    clustered into P groups: the two whose merge costs the fewest bits merged
    until P remain, then each moved to the group whose table codes it
    cheapest; one table per group), as information under those tables, a
    change of the body's bytes (table 1, the first layout only);
  - each coded tile's lanes with real tANS tables of the palette (FSE's spread
    of states, bench/tans_lane_model.py's Table; every lane decoded back and
    checked): each lane its tokens' bits, the raw bits of tokens of 16 and
    more as now, its R-bit first state and a 5-bit header (the fill of its
    first word), the tile's bits rounded up to bytes; skipped, raw and
    indexed tiles as they are; the model section with the palette (P tables
    at the average size of the tables the bodies describe, and each used
    distribution's group) instead of its tables (table 2, every layout,
    against the first layout's bodies of today).

The shared memory a palette takes in a decoder is P * 2^R entries of 4 bytes
(token, bits to read, the next state's base).

    bench/tans_body_model.py [--build build] [--frames 12] [--k 0,5,10,20]
        [--formats BGR,I420] [--layouts default,4x2/256] [--bits 10,11,12]
        [--palettes 8,16,32] [--lane-palette 16] [--lane-bits 10,11] CLIP...
"""
import argparse
import math
import os
import struct
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "tests", "core"))
import codec2_reference as ref  # noqa: E402
from codec_eval import decode_clip  # noqa: E402
from tans_lane_model import Table  # noqa: E402

TOKENS = 32
HEADER_BITS = 5  # a tANS lane's header: the fill of its first word


def bodies(path):
    data = open(path, "rb").read()
    at = 0
    while at < len(data):
        n = struct.unpack_from("<I", data, at)[0]
        yield data[at + 4:at + 4 + n]
        at += 4 + n


def raw_bits(t):
    return 4 + (t - 16) // 2 - 1 if t >= 16 else 0


def self_bits(c):
    """Bits to code counts `c` with their own exact distribution."""
    n = sum(c)
    return n * math.log2(n) - sum(x * math.log2(x) for x in c if x) if n else 0.0


def normalise(c, total):
    """Counts summing to `total`, at least 1 for each token that occurs."""
    n = sum(c)
    q = [max(1, x * total // n) if x else 0 for x in c]
    q[max(range(TOKENS), key=lambda t: c[t])] += total - sum(q)
    return q


def cost(c, q, r):
    """Bits of counts `c` under a table `q` of 2^r states (inf if a token has none)."""
    bits = 0.0
    for x, f in zip(c, q):
        if x:
            if not f:
                return math.inf
            bits += x * (r - math.log2(f))
    return bits


def merge_to(dists, p):
    """Groups of indices of `dists` (count vectors): one each to start with,
    then the pair whose merge costs the fewest bits merged until `p` remain."""
    groups = {i: ([i], list(c)) for i, c in enumerate(dists)}
    own = {i: self_bits(g[1]) for i, g in groups.items()}
    merged = lambda i, j: [x + y for x, y in zip(groups[i][1], groups[j][1])]
    pair = {(i, j): self_bits(merged(i, j)) - own[i] - own[j]
            for i in groups for j in groups if i < j}
    while len(groups) > p:
        i, j = min(pair, key=pair.get)
        groups[i] = (groups[i][0] + groups[j][0], merged(i, j))
        del groups[j]
        own[i] = self_bits(groups[i][1])
        pair = {k: v for k, v in pair.items() if j not in k and i not in k}
        for o in groups:
            if o != i:
                pair[(min(i, o), max(i, o))] = self_bits(merged(i, o)) - own[i] - own[o]
    return [g[0] for g in groups.values()]


def summed(dists, group):
    return [sum(dists[i][t] for i in group) for t in range(TOKENS)]


def palette(dists, p, r, rounds=4):
    """Groups of `dists` for a palette of at most `p` tables of 2^r states."""
    if len(dists) <= p:
        return [[i] for i in range(len(dists))]
    groups = merge_to(dists, p)
    for _ in range(rounds):
        tables = [normalise(summed(dists, g), 1 << r) for g in groups]
        new = [[] for _ in tables]
        for i, c in enumerate(dists):
            new[min(range(len(tables)), key=lambda k: cost(c, tables[k], r))].append(i)
        new = [g for g in new if g]
        if sorted(map(sorted, new)) == sorted(map(sorted, groups)):
            break
        groups = new
    return groups


def palette_bits(dists, groups, r):
    total = 0.0
    for g in groups:
        q = normalise(summed(dists, g), 1 << r)
        total += sum(cost(dists[i], q, r) for i in g)
    return total


class Frame:
    """One body: its size, model, the tables it describes, each distribution's
    token counts, the tokens' bits under its own tables, and its coded tiles
    (payload size, each lane's (distribution, token) in decoding order)."""

    def __init__(self, size, model_bytes, described, counts, today, tiles):
        self.size, self.model_bytes, self.described = size, model_bytes, described
        self.counts, self.today, self.tiles = counts, today, tiles


def encode_clip(build, fmt, w, h, k, raw, n, layout, out):
    cmd = [os.path.join(build, "bench", "codec2_decode"), "--format", fmt, "--size",
           "%dx%d" % (w, h), "--threshold", str(k), "--frames", str(n)]
    if layout != "default":
        tiles, lane = layout.split("/")
        cmd += ["--tiles", tiles, "--lane-samples", lane]
    subprocess.run(cmd + ["--encode", raw, out], check=True, stdout=subprocess.DEVNULL)


def frames_of(path, fmt, w, h):
    dec = ref.Decoder(fmt, w, h)
    described = [0]
    read_table = ref.read_table

    def counting(bits):
        described[0] += 1
        return read_table(bits)
    ref.read_table = counting
    result = []
    try:
        for body in bodies(path):
            counts, today, tiles = {}, [0.0], []

            def on_tile(kind, lanes, size):
                tiles.append((size, [[] for _ in range(lanes)]) if kind == 1 else None)

            def on_token(d, t, freq, lane):
                counts.setdefault(d, [0] * TOKENS)[t] += 1
                today[0] += 12 - math.log2(freq[t])
                tiles[-1][1][lane].append((d, t))
            dec.on_tile, dec.on_token = on_tile, on_token
            described[0] = 0
            dec.decode(body)
            result.append(Frame(len(body), dec.model_bytes, described[0], counts, today[0],
                                [t for t in tiles if t]))
    finally:
        ref.read_table = read_table
    return result


def model_change(frames, p):
    """Bits the palette's description adds to the model sections (may be < 0)."""
    described = sum(f.described for f in frames)
    per_table = 8.0 * sum(f.model_bytes for f in frames) / described if described else 0.0
    return sum(min(p, len(f.counts)) * per_table + len(f.counts) * math.ceil(math.log2(p)) -
               8 * f.model_bytes for f in frames)


def tans_bytes(frames, p, r):
    """The bodies' bytes with tANS lanes and a palette of p tables of 2^r states."""
    total = 0.0
    for f in frames:
        ds = sorted(f.counts)
        dists = [f.counts[d] for d in ds]
        groups = palette(dists, p, r)
        tables, of = [], {}
        for g in groups:
            s = summed(dists, g)
            tables.append(Table([x / sum(s) for x in s], r))
            for i in g:
                of[ds[i]] = len(tables) - 1
        coded = 0
        for size, lanes in f.tiles:
            bits = 0
            for seq in lanes:
                # the encoder backwards from the state the decoder must end
                # in, then the decoder from the encoder's last state: the
                # same tokens, back to that state
                x, stack = 0, []
                for d, t in reversed(seq):
                    x, v, nb = tables[of[d]].encode(x, t)
                    stack.append((v, nb))
                    bits += nb + raw_bits(t)
                bits += r + HEADER_BITS
                for d, t in seq:
                    tok, nb, next_base = tables[of[d]].dec[x]
                    v, n = stack.pop()
                    assert tok == t and n == nb
                    x = next_base + v
                assert x == 0
            coded += (bits + 7) // 8 - size
        total += f.size + coded
    return total + model_change(frames, p) / 8


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--frames", type=int, default=12)
    ap.add_argument("--k", default="0,5,10,20")
    ap.add_argument("--formats", default="BGR,I420")
    ap.add_argument("--layouts", default="default,4x2/256",
                    help="tile layouts, 'default' or BXxBY/lane samples")
    ap.add_argument("--bits", default="10,11,12", help="table 1's state sizes")
    ap.add_argument("--palettes", default="8,16,32", help="table 1's palette sizes")
    ap.add_argument("--lane-palette", type=int, default=16, help="table 2's palette size")
    ap.add_argument("--lane-bits", default="10,11", help="table 2's state sizes")
    ap.add_argument("clips", nargs="+")
    a = ap.parse_args()
    ks = [int(x) for x in a.k.split(",")]
    rs = [int(x) for x in a.bits.split(",")]
    ps = [int(x) for x in a.palettes.split(",")]
    lrs = [int(x) for x in a.lane_bits.split(",")]
    layouts = a.layouts.split(",")
    one, two = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for clip in a.clips:
            for fmt in a.formats.split(","):
                raw = os.path.join(tmp, "raw")
                w, h, _, n = decode_clip(clip, fmt, raw, a.frames)
                for k in ks:
                    row2 = [os.path.basename(clip), fmt, str(k)]
                    base = None
                    for li, layout in enumerate(layouts):
                        out = os.path.join(tmp, "bodies")
                        encode_clip(a.build, fmt, w, h, k, raw, n, layout, out)
                        frames = frames_of(out, fmt, w, h)
                        body = sum(f.size for f in frames)
                        base = base or body
                        pct = lambda b: "%+.1f %%" % (100.0 * (b - base) / base)
                        if li == 0:
                            today = sum(f.today for f in frames)
                            used = sum(len(f.counts) for f in frames)
                            row = [os.path.basename(clip), fmt, str(k), "%.0f" % (body / n),
                                   "%.0f" % (today / 8 / n),
                                   "%.0f" % (sum(f.model_bytes for f in frames) / n),
                                   "%.1f" % (used / n)]
                            change = lambda bits: "%+.2f %%" % (100.0 * bits / 8 / body)
                            for r in rs:
                                row.append(change(sum(
                                    cost(c, normalise(c, 1 << r), r)
                                    for f in frames for c in f.counts.values()) - today))
                            for r in rs:
                                for p in ps:
                                    bits = 0.0
                                    for f in frames:
                                        dists = list(f.counts.values())
                                        bits += palette_bits(dists, palette(dists, p, r), r)
                                    row.append(change(bits - today) + " / " +
                                               change(bits - today + model_change(frames, p)))
                            one.append(row)
                            row2.append("%.0f" % (body / n))
                        else:
                            row2.append("%.0f (%s)" % (body / n, pct(body)))
                        for r in lrs:
                            b = tans_bytes(frames, a.lane_palette, r)
                            row2.append("%.0f (%s)" % (b / n, pct(b)))
                    two.append(row2)
                    print("\t".join(row2), file=sys.stderr, flush=True)
    head = ["clip", "format", "k", "body B/frame", "tokens B/frame", "model B/frame",
            "distributions"]
    head += ["R = %d, own tables" % r for r in rs]
    head += ["P = %d, R = %d: tokens / + model" % (p, r) for r in rs for p in ps]
    print("Table 1, the tokens' information with smaller tables (layout %s), as a change of "
          "the bodies' bytes" % layouts[0])
    print("| " + " | ".join(head) + " |")
    print("|---|---|" + "---:|" * (len(head) - 2))
    for row in one:
        print("| " + " | ".join(row) + " |")
    head = ["clip", "format", "k"]
    for li, layout in enumerate(layouts):
        head.append("%s: today B/frame" % layout)
        head += ["%s: tANS, P = %d, R = %d" % (layout, a.lane_palette, r) for r in lrs]
    print("\nTable 2, bodies with tANS lanes (bytes per frame, against %s today)" % layouts[0])
    print("| " + " | ".join(head) + " |")
    print("|---|---|" + "---:|" * (len(head) - 2))
    for row in two:
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
