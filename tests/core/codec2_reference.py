#!/usr/bin/env python3
"""A second decoder of version 2 bodies, written from docs/stream-format.md
("Version 2: the body") alone (plain Python, no dependencies, slow), to check
that the text says everything a decoder needs.

  codec2_reference.py --check-doc docs/stream-format.md [EXAMPLES...]
      decodes the example bodies of the document and compares the pictures
      with the ones it gives (a meson test runs this, also on
      tests/core/codec2_tiles.example: bodies of several tiles each, which
      the CPU encoder writes exactly, test_codec2.cpp checks);
  codec2_reference.py --trace FORMAT W H BODY.hex [BODY.hex...]
      decodes the bodies (files of hex text) in the order given, a delta
      after the body before it, and prints every decoded symbol.

Bodies with rANS lanes and with tANS lanes (flag 0x04, "tANS lanes (flag
0x04)"); the document's examples have rANS lanes only.

Formats: GRAY8, BGR, RGB, I420 (enough for the examples; the others only
change the layer table).
"""
import re
import sys

LEVEL_WEIGHT = [0] + [[256, 304, 362, 431][(level - 1) % 4] << ((level - 1) // 4)
                      for level in range(1, 50)]
EDGES = [1, 2, 3, 5, 7, 10, 14, 20, 28, 40, 56, 80]


class Invalid(Exception):
    pass


def layers_of(fmt, w, h):
    """(width, height, channels, ycocg, sx, sy, placement) per layer; placement
    maps (channel, x, y) to a byte offset of the canonical frame."""
    cw, ch = (w + 1) // 2, (h + 1) // 2
    if fmt in ("BGR", "RGB"):
        order = {"BGR": (2, 1, 0), "RGB": (0, 1, 2)}[fmt]
        return [(w, h, 3, True, 0, 0, lambda c, x, y: y * 3 * w + 3 * x + order[c])]
    if fmt == "GRAY8":
        return [(w, h, 1, False, 0, 0, lambda c, x, y: y * w + x)]
    if fmt == "I420":
        return [(w, h, 1, False, 0, 0, lambda c, x, y: y * w + x),
                (cw, ch, 2, False, 1, 1, lambda c, x, y: w * h + c * cw * ch + y * cw + x)]
    raise ValueError("format not in this script: " + fmt)


class Bits:
    def __init__(self, data, past="model runs past the body"):
        self.data, self.pos, self.past = data, 0, past

    def get(self, n):
        v = 0
        for i in range(n):
            if self.pos >= 8 * len(self.data):
                raise Invalid(self.past)
            v |= ((self.data[self.pos >> 3] >> (self.pos & 7)) & 1) << i
            self.pos += 1
        return v


def read_table(bits):
    """A table description: the levels of tokens 0..n-1."""
    n = bits.get(5) + 1
    levels, prev = [], 49
    for _ in range(n):
        if bits.get(1) == 0:
            levels.append(0 if bits.get(1) else prev)
            continue
        ones = 1
        while ones < 4 and bits.get(1):
            ones += 1
        down = bits.get(1)
        d = [0, 1, 3, 7, 15][ones] + bits.get([0, 1, 2, 3, 6][ones])
        level = prev - d if down else prev + d
        if not 1 <= level <= 49:
            raise Invalid("level out of range")
        levels.append(level)
        prev = level
    if levels[-1] == 0:
        raise Invalid("last token absent")
    return levels


def frequencies(levels, scale):
    """The frequencies of levels, summing to scale (4096 for rANS lanes, 1024
    for tANS lanes); the remainder, possibly negative, to the first largest."""
    total = sum(LEVEL_WEIGHT[l] for l in levels)
    freq = [max(1, LEVEL_WEIGHT[l] * scale // total) if l else 0 for l in levels]
    largest = freq.index(max(freq))
    freq[largest] += scale - sum(freq)
    return freq


class TansTable:
    """A palette table: frequencies summing to 1024 spread over 1024 entries
    with step 643; entry i: (token, nb, base)."""

    def __init__(self, levels):
        self.freq = frequencies(levels, 1024)
        token, pos = [None] * 1024, 0
        for t, f in enumerate(self.freq):
            for _ in range(f):
                token[pos] = t
                pos = (pos + 643) % 1024
        seen = [0] * len(self.freq)
        self.entries = []
        for i in range(1024):
            t = token[i]
            q = self.freq[t] + seen[t]
            seen[t] += 1
            nb = 10 - (q.bit_length() - 1)
            self.entries.append((t, nb, q * (1 << nb) - 1024))


def med(a, b, c):
    if c >= max(a, b):
        return min(a, b)
    if c <= min(a, b):
        return max(a, b)
    return a + b - c


def ycocg(ch):
    r, g, b = ch[:3]
    co = r - b
    t = b + (co >> 1)
    cg = g - t
    return [t + (cg >> 1), co, cg] + ch[3:]


def ycocg_inverse(comp):
    y, co, cg = comp[:3]
    t = y - (cg >> 1)
    g = cg + t
    b = t - (co >> 1)
    return [b + co, g, b] + comp[3:]


def quant_diff(e, k):
    s = 2 * k + 1
    return (e + k) // s if e >= 0 else -((k - e) // s)


class RansLanes:
    """The rANS lanes of a coded tile ("Coded tiles"): token() decodes a token
    (renormalised later by settle()), raw() reads raw bits and renormalises,
    finish() checks the lanes' ends. tables: distribution -> 4096 frequencies."""

    def __init__(self, payload, lanes, tables, k, log, on_token):
        if len(payload) < 4 * lanes:
            raise Invalid("coded tile of %d bytes smaller than its %d states"
                          % (len(payload), lanes))
        self.payload, self.tables, self.k = payload, tables, k
        self.log, self.on_token = log, on_token
        self.state = [int.from_bytes(payload[4 * l:4 * l + 4], "little") for l in range(lanes)]
        self.checksum = [0] * lanes  # of each lane's symbols: tokens and raw bits
        self.pos = 4 * lanes
        self.start = "initial states %s" % self.state

    def settle(self, l):
        """Renormalise lane l from the shared byte stream."""
        L = 1 << 23
        read = []
        while self.state[l] < L:
            if self.pos >= len(self.payload):
                raise Invalid("stream ends early")
            self.state[l] = (self.state[l] << 8) | self.payload[self.pos]
            read.append("%02x" % self.payload[self.pos])
            self.pos += 1
        if read:
            self.log("    lane %d reads %s: state %d" % (l, " ".join(read), self.state[l]))

    def token(self, l, d):
        if d not in self.tables:
            raise Invalid("unused table")
        freq = self.tables[d]
        x = self.state[l]
        slot, cum = x & 4095, 0
        for t, f in enumerate(freq):
            if cum <= slot < cum + f:
                self.state[l] = f * (x >> 12) + slot - cum
                self.log("    lane %d: state %d, slot %d -> token %d (f %d, c %d), state %d"
                         % (l, x, slot, t, f, cum, self.state[l]))
                if self.on_token:
                    self.on_token(d, t, freq, l)
                self.checksum[l] = (self.checksum[l] * 33 + t) & 0x1FFFF
                return t
            cum += f
        raise Invalid("no token")

    def raw(self, l, n):
        bits = self.state[l] & ((1 << n) - 1)
        self.state[l] >>= n
        self.checksum[l] = (self.checksum[l] * 33 + bits) & 0x1FFFF
        self.log("    lane %d: %d raw bits %d, state %d" % (l, n, bits, self.state[l]))
        self.settle(l)
        return bits

    def finish(self):
        for l, x in enumerate(self.state):
            if x != (1 << 23) + (self.checksum[l] << 13) + 32 * self.k + l:
                raise Invalid("final state of lane %d" % l)
        if self.pos != len(self.payload):
            raise Invalid("bytes left in the tile")


class TansLanes:
    """The tANS lanes of a coded tile ("tANS lanes (flag 0x04)"), with the
    methods of RansLanes. tables: distribution -> TansTable. Each lane reads
    its own bits: its fill first, then words of the word area, one when a
    read needs more bits than the lane holds, in the order of the reads."""

    def __init__(self, payload, lanes, tables, k, log, on_token):
        if len(payload) < (5 * lanes + 7) // 8:
            raise Invalid("coded tile of %d bytes smaller than its %d fills"
                          % (len(payload), lanes))
        self.tables, self.k, self.log, self.on_token = tables, k, log, on_token
        bits = Bits(payload, "the fills run past the tile")
        self.buf, self.held = [], []  # per lane: its bits, their count
        self.held = [bits.get(5) for _ in range(lanes)]
        self.buf = [bits.get(h) for h in self.held]
        self.raw_bits = [0] * lanes
        self.checksum = [0] * lanes
        at = (bits.pos + 7) // 8
        if bits.get(8 * at - bits.pos):
            raise Invalid("a padding bit of 1 after the fills")
        if (len(payload) - at) % 4:
            raise Invalid("word area of %d bytes, not a multiple of 4" % (len(payload) - at))
        self.words, self.taken = payload[at:], 0
        fills = list(self.held)
        self.state = [self.read(l, 10) for l in range(lanes)]
        self.start = "fills %s (%d bytes), %d words, initial states %s" % (
            fills, at, len(self.words) // 4, self.state)

    def read(self, l, n):
        """The n oldest bits of lane l (a field, least significant bit first)."""
        if self.held[l] < n:
            if 4 * self.taken >= len(self.words):
                raise Invalid("lane %d needs word %d of a word area of %d"
                              % (l, self.taken, len(self.words) // 4))
            word = int.from_bytes(self.words[4 * self.taken:4 * self.taken + 4], "little")
            self.log("    lane %d takes word %d: %08x" % (l, self.taken, word))
            self.buf[l] |= word << self.held[l]
            self.held[l] += 32
            self.taken += 1
        v = self.buf[l] & ((1 << n) - 1)
        self.buf[l] >>= n
        self.held[l] -= n
        return v

    def settle(self, l):
        pass  # a token reads its bits itself

    def token(self, l, d):
        if d not in self.tables:
            raise Invalid("token of the unused distribution %d" % d)
        table = self.tables[d]
        x = self.state[l]
        t, nb, base = table.entries[x]
        # the token's bits and its raw bits, read as one
        extra = 4 + (t - 16) // 2 - 1 if t >= 16 else 0
        v = self.read(l, nb + extra)
        bits = v & ((1 << nb) - 1)
        self.raw_bits[l] = v >> nb
        self.state[l] = base + bits
        self.checksum[l] = (self.checksum[l] * 33 + t) & 1023
        self.log("    lane %d: state %d -> token %d (f %d), %d bits %d, state %d"
                 % (l, x, t, table.freq[t], nb, bits, self.state[l]))
        if self.on_token:
            self.on_token(d, t, table.freq, l)
        return t

    def raw(self, l, n):
        bits = self.raw_bits[l]  # read with the token
        self.checksum[l] = (self.checksum[l] * 33 + bits) & 1023
        self.log("    lane %d: %d raw bits %d" % (l, n, bits))
        return bits

    def finish(self):
        for l, x in enumerate(self.state):
            end = (self.checksum[l] + 32 * self.k + l) % 1024
            if x != end:
                raise Invalid("lane %d ends in state %d, not %d" % (l, x, end))
            if self.held[l]:
                raise Invalid("lane %d ends holding %d bits" % (l, self.held[l]))
        if 4 * self.taken != len(self.words):
            raise Invalid("%d of the %d words of the word area not taken"
                          % (len(self.words) // 4 - self.taken, len(self.words) // 4))


class Decoder:
    def __init__(self, fmt, w, h, trace=False):
        self.fmt, self.w, self.h, self.trace = fmt, w, h, trace
        # Hooks for models of other codings of the same symbols
        # (bench/tans_body_model.py); None: nothing. on_tile(type, lanes,
        # payload size) before each tile, on_token(distribution, token,
        # frequencies, lane) for every token decoded (frequencies: the
        # table's 4096, with tANS lanes its palette table's 1024).
        self.on_tile = None
        self.on_token = None
        self.layers = layers_of(fmt, w, h)
        self.bx = (self.layers[0][0] + 15) // 16
        self.by = (self.layers[0][1] + 15) // 16
        self.picture = None
        self.tables = {}
        # Distribution numbering.
        self.base, n = {}, 1
        for l, (_, _, nch, _, _, _, _) in enumerate(self.layers):
            for cls in range(3):
                for c in range(nch):
                    self.base[(l, cls, c)] = n
                    n += (13 if c == 0 else 26) * (4 if cls == 1 and c == 0 else 1)
            self.base[(l, 3)] = n
        self.count = n

    def log(self, *args):
        if self.trace:
            print(*args)

    def decode(self, body):
        if len(body) < 4 or body[0] & ~7 or body[2] == 0 or body[3] == 0:
            raise Invalid("header")
        key, k, tbx, tby = body[0] & 1, body[1], body[2], body[3]
        tile_rule = bool(body[0] & 2)  # the reference classes' rule
        if not key and self.picture is None:
            raise Invalid("delta without a picture")
        self.k, self.s = k, 2 * k + 1
        # Model: tables (distribution -> levels, the state for the next
        # body) and lanes_of(payload, lanes), a coded tile's lanes.
        bits = Bits(body[4:])
        if body[0] & 4:
            tables, lanes_of = self.read_palette(bits, self.groups(key))
        else:
            tables, lanes_of = self.read_model(bits, self.groups(key), key)
        if not key and 0 in tables and len(tables[0]) > 4:
            raise Invalid("block-mode table with more than four tokens")
        self.model_bytes = (bits.pos + 7) // 8
        at = 4 + self.model_bytes
        # Tiles.
        tiles = []
        for ty in range(0, self.by, tby):
            for tx in range(0, self.bx, tbx):
                tiles.append((tx, ty, min(self.bx, tx + tbx), min(self.by, ty + tby)))
        entries = []
        for _ in tiles:
            v, shift = 0, 0
            while True:
                if at >= len(body) or shift > 28:
                    raise Invalid("tile table")
                byte = body[at]
                at += 1
                v |= (byte & 0x7F) << shift
                shift += 7
                if not byte & 0x80:
                    break
            kind, lanes = v & 3, ((v >> 2) & 31) + 1
            if kind != 1 and lanes != 1:
                raise Invalid("lanes other than 1 for a skipped, raw or indexed tile")
            entries.append((kind, lanes, v >> 7))
        if sum(e[2] for e in entries) != len(body) - at:
            raise Invalid("tile sizes")
        new = list(self.picture) if self.picture else [0] * self.frame_bytes()
        self.rclass = None if key else self.reference_classes(tile_rule, tbx, tby)
        self.log("model %d bytes, tile table %s, payloads from byte %d"
                 % (self.model_bytes, entries, at))
        for tile, (kind, lanes, size) in zip(tiles, entries):
            payload = body[at:at + size]
            at += size
            self.decode_tile(tile, kind, lanes, payload, key, lanes_of, new)
        self.picture, self.tables = new, tables
        return new

    def groups(self, key):
        """The model's groups: (first, end) distributions."""
        groups = [] if key else [(0, 1)]
        for l in range(len(self.layers)):
            for cls in (range(1) if key else range(3)):
                first = self.base[(l, cls, 0)]
                end = self.base[(l, cls + 1, 0)] if cls < 2 else self.base[(l, 3)]
                groups.append((first, end))
        return groups

    def read_model(self, bits, groups, key):
        """The model section of rANS lanes; the tables are levels, normalised
        to 4096 for the lanes (also those taken over from a tANS body)."""
        tables, last = {}, None
        for first, end in groups:
            if not bits.get(1):
                continue
            for d in range(first, end):
                if not bits.get(1):
                    continue
                if not key and bits.get(1) == 0:
                    if d not in self.tables:
                        raise Invalid("reuse of a missing table")
                    tables[d] = self.tables[d]
                elif bits.get(1):
                    if last is None:
                        raise Invalid("copy before the first table")
                    tables[d] = tables[last]
                else:
                    tables[d] = read_table(bits)
                last = d
        freq = {d: frequencies(levels, 4096) for d, levels in tables.items()}
        for d in sorted(freq):
            self.log("table %d: %s" % (d, freq[d]))
        return tables, lambda payload, lanes: RansLanes(payload, lanes, freq, self.k,
                                                        self.log, self.on_token)

    def read_palette(self, bits, groups):
        """The model section of tANS lanes (flag 0x04): the palette, then
        each used distribution's palette table."""
        p = bits.get(4) + 1
        palette = [read_table(bits) for _ in range(p)]
        b = (p - 1).bit_length()
        chosen = {}
        for first, end in groups:
            if not bits.get(1):
                continue
            for d in range(first, end):
                if bits.get(1):
                    chosen[d] = bits.get(b)
                    if chosen[d] >= p:
                        raise Invalid("distribution %d: palette table %d of %d"
                                      % (d, chosen[d], p))
        tans = [TansTable(levels) for levels in palette]
        for i, table in enumerate(tans):
            self.log("palette table %d: %s" % (i, table.freq))
        self.log("distributions' palette tables: %s" % chosen)
        by_d = {d: tans[i] for d, i in chosen.items()}
        return {d: palette[i] for d, i in chosen.items()}, \
            lambda payload, lanes: TansLanes(payload, lanes, by_d, self.k, self.log, self.on_token)

    def frame_bytes(self):
        return sum(lw * lh * nch for lw, lh, nch, *_ in self.layers)

    def reference_classes(self, tile_rule, tbx, tby):
        """Tile rule (flag 0x02): left, right, above, above-left, a neighbour
        outside the sample's tile being the sample; otherwise left, right,
        above, below, the layer's edges repeating the sample."""
        out = []
        for (lw, lh, nch, yc, sx, sy, place) in self.layers:
            tc = 1 if yc else 0
            p = lambda x, y: self.picture[place(tc, min(max(x, 0), lw - 1), min(max(y, 0), lh - 1))]
            cl = {}
            for y in range(lh):
                for x in range(lw):
                    v = p(x, y)
                    if tile_rule:
                        tile = (((x << sx) >> 4) // tbx, ((y << sy) >> 4) // tby)

                        def nb(dx, dy):
                            xx, yy = x + dx, y + dy
                            inside = 0 <= xx < lw and 0 <= yy < lh and \
                                (((xx << sx) >> 4) // tbx, ((yy << sy) >> 4) // tby) == tile
                            return p(xx, yy) if inside else v
                        around = ((-1, 0), (1, 0), (0, -1), (-1, -1))
                    else:
                        nb = lambda dx, dy: p(x + dx, y + dy)
                        around = ((-1, 0), (1, 0), (0, -1), (0, 1))
                    g = sum(abs(nb(dx, dy) - v) for dx, dy in around)
                    q = g // self.s
                    cl[(x, y)] = 0 if q < 2 else 1 if q < 6 else 2 if q < 16 else 3
            out.append(cl)
        return out

    def decode_tile(self, tile, kind, lanes, payload, key, lanes_of, new):
        bx0, by0, bx1, by1 = tile
        if self.on_tile:
            self.on_tile(kind, lanes, len(payload))
        rects = []
        for (lw, lh, nch, yc, sx, sy, place) in self.layers:
            x0, y0 = (16 * bx0) >> sx, (16 * by0) >> sy
            rects.append((x0, y0, max(0, min(lw, (16 * bx1) >> sx) - x0),
                          max(0, min(lh, (16 * by1) >> sy) - y0)))
        if kind in (0, 2):
            if kind == 0 and (key or payload):
                raise Invalid("skipped tile")
            if kind == 2 and len(payload) != sum(
                    w * h * layer[2] for layer, (x0, y0, w, h) in zip(self.layers, rects)):
                raise Invalid("raw tile size")
            data = iter(payload)
            for (lw, lh, nch, yc, sx, sy, place), (x0, y0, w, h) in zip(self.layers, rects):
                for y in range(y0, y0 + h):
                    for x in range(x0, x0 + w):
                        for c in range(nch):
                            if kind == 2:
                                new[place(c, x, y)] = next(data)
            return
        if kind == 3:
            # Indexed: the S-domain indices of the tile's bytes in a raw
            # tile's order, D to a little-endian 32-bit word in base N.
            n = (255 + self.k) // self.s + 1
            d = 1
            while d < 32 and n ** (d + 1) <= 1 << 32:
                d += 1
            places = [place(c, x, y) for (lw, lh, nch, yc, sx, sy, place), (x0, y0, w, h)
                      in zip(self.layers, rects)
                      for y in range(y0, y0 + h) for x in range(x0, x0 + w) for c in range(nch)]
            if len(payload) != 4 * ((len(places) + d - 1) // d):
                raise Invalid("indexed tile size")
            for i0 in range(0, len(places), d):
                word = int.from_bytes(payload[4 * (i0 // d):4 * (i0 // d) + 4], "little")
                for i in range(i0, min(len(places), i0 + d)):
                    u, word = word % n, word // n
                    new[places[i]] = min(255, u * self.s)
                if word:
                    raise Invalid("indexed word out of range")
            self.log("tile %s: indexed, N %d, D %d" % (tile, n, d))
            return
        if kind != 1:
            raise Invalid("tile type")
        coder = lanes_of(payload, lanes)
        self.log("tile %s: %d lanes, %s" % (tile, lanes, coder.start))
        modes = {}
        nblocks = (bx1 - bx0) * (by1 - by0)
        for b in range(nblocks):
            pos_block = (bx0 + b % (bx1 - bx0), by0 + b // (bx1 - bx0))
            if key:
                modes[pos_block] = 3
                continue
            t = coder.token(b % lanes, 0)
            coder.settle(b % lanes)
            if t > 3:
                raise Invalid("mode")
            modes[pos_block] = t
            self.log("block %s mode %d" % (pos_block, t))
        ref = self.picture
        for l, ((lw, lh, nch, yc, sx, sy, place), (x0, y0, w, h)) in enumerate(zip(self.layers, rects)):
            if w == 0 or h == 0:
                continue
            work = {}  # (i, j) -> (S values, T values)
            conv = ycocg if yc else (lambda v: v)
            inv = ycocg_inverse if yc else (lambda v: v)

            def working(x, y):
                rec = [new[place(c, x, y)] for c in range(nch)]
                s = conv([(v + self.k) // self.s for v in rec])
                t = conv([quant_diff(v - ref[place(c, x, y)], self.k) for c, v in enumerate(rec)]) \
                    if ref else None
                return s, t

            def mode_of(i, j):
                return modes[(((x0 + i) << sx) >> 4, ((y0 + j) << sy) >> 4)]

            for j in range(h):
                for i in range(w):
                    if mode_of(i, j) == 0:
                        for c in range(nch):
                            new[place(c, x0 + i, y0 + j)] = ref[place(c, x0 + i, y0 + j)]
                        work[(i, j)] = working(x0 + i, y0 + j)
            period = max(w, 2 * lanes)
            rounds = (h + lanes - 1) // lanes
            steps = (rounds - 1) * period + w + 2 * ((h - 1) % lanes)
            for st in range(steps):
                active = []
                for ln in range(lanes):
                    tt = st - 2 * ln
                    if tt < 0:
                        continue
                    i, j = tt % period, (tt // period) * lanes + ln
                    if i < w and j < h and mode_of(i, j) != 0:
                        active.append((ln, i, j))
                vals = {ln: [] for ln, _, _ in active}
                r0 = {}
                for c in range(nch):
                    toks = {}
                    for ln, i, j in active:
                        mode = mode_of(i, j)
                        cls = {3: 0, 1: 1, 2: 2}[mode]
                        dom = 0 if cls == 0 else 1

                        def nb(di, dj):
                            return work[(i + di, j + dj)][dom][c]
                        if j == 0:
                            a = nb(-1, 0) if i > 0 else 0
                            b = cc = d = a
                        else:
                            b = nb(0, -1)
                            a, cc = (nb(-1, 0), nb(-1, -1)) if i > 0 else (b, b)
                            d = nb(1, -1) if i + 1 < w else b
                        pred = 0 if cls == 1 else med(a, b, cc)
                        g = abs(a) + abs(b) + abs(cc) + abs(d) if cls == 1 else \
                            abs(a - b) + abs(b - cc) + abs(cc - a) + abs(b - d)
                        ctx = sum(g >= e for e in EDGES)
                        if c > 0:
                            ctx += 13 * (r0[ln] != 0)
                        if cls == 1 and c == 0:
                            ctx = ctx * 4 + self.rclass[l][(x0 + i, y0 + j)]
                        flip = (a + b + cc + d < 0) if cls == 1 else (a + b - 2 * cc < 0)
                        dist = self.base[(l, cls, c)] + ctx
                        toks[ln] = (coder.token(ln, dist), pred, flip, dist, (a, b, cc, d), ctx)
                    for ln, _, _ in active:
                        coder.settle(ln)
                    for ln, i, j in active:
                        t, pred, flip, dist, nbs, ctx = toks[ln]
                        v = t
                        if t >= 16:
                            e = 4 + (t - 16) // 2
                            bits = coder.raw(ln, e - 1)
                            v = ((2 | ((t - 16) & 1)) << (e - 1)) | bits
                        r = v // 2 if v % 2 == 0 else -(v + 1) // 2
                        if flip:
                            r = -r
                        if c == 0:
                            r0[ln] = r
                        vals[ln].append(pred + r)
                        self.log("layer %d sample (%d,%d) comp %d: neighbours %s pred %d ctx %d "
                                 "dist %d token %d value %d residual %d%s"
                                 % (l, i, j, c, nbs, pred, ctx, dist, t, v, r,
                                    " (flipped)" if flip else ""))
                for ln, i, j in active:
                    mode = mode_of(i, j)
                    ch = inv(vals[ln])
                    x, y = x0 + i, y0 + j
                    for c in range(nch):
                        if mode == 3:
                            if not 0 <= ch[c] <= (255 + self.k) // self.s:
                                raise Invalid("index out of range")
                            new[place(c, x, y)] = min(255, ch[c] * self.s)
                        else:
                            if not -255 <= ch[c] <= 255:
                                raise Invalid("difference out of range")
                            new[place(c, x, y)] = min(255, max(0, ref[place(c, x, y)] + ch[c] * self.s))
                    work[(i, j)] = working(x, y)
        coder.finish()


def hex_bytes(text):
    return bytes(int(x, 16) for x in text.split())


def check_doc(path):
    """The document's example: blocks of `fmt W H`, `body <hex>`, `picture <hex>`
    (in a document, the block fenced as ```example; otherwise the whole file)."""
    text = open(path).read()
    if path.endswith(".md"):
        m = re.search(r"```example\n(.*?)```", text, re.S)
        if not m:
            print("no example block in", path)
            return 1
        text = m.group(1)
    dec = None
    frames = 0
    for line in text.splitlines():
        line = line.split("#")[0].strip()
        if not line:
            continue
        word, rest = line.split(None, 1)
        if word == "format":
            fmt, w, h = rest.split()
            dec = Decoder(fmt, int(w), int(h))
        elif word == "body":
            body = hex_bytes(rest)
        elif word == "picture":
            want = list(hex_bytes(rest))
            got = dec.decode(body)
            if got != want:
                print("picture %d differs: got %s" % (frames, " ".join("%02x" % v for v in got)))
                return 1
            frames += 1
    print("decoded the %d example bodies of %s" % (frames, path))
    return 0 if frames else 1


def main():
    if len(sys.argv) >= 3 and sys.argv[1] == "--check-doc":
        return max(check_doc(path) for path in sys.argv[2:])
    if len(sys.argv) >= 6 and sys.argv[1] == "--trace":
        fmt, w, h = sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
        dec = Decoder(fmt, w, h, trace=True)
        for path in sys.argv[5:]:
            pic = dec.decode(hex_bytes(open(path).read()))
            print("picture:", " ".join("%02x" % v for v in pic))
        return 0
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main())
