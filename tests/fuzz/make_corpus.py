#!/usr/bin/env python3
"""Writes the seed corpus of engine_fuzz (tests/fuzz/corpus/): small inputs, one
per scenario, in the byte format documented in fuzz_input.h. Each
seed reaches one feature (fill to capacity, scattered holes, record_stream,
graph pools, every backend fault, limits, bad pointers, absurd sizes) so that
fuzzing starts from inputs that already go deep.

Usage: tests/fuzz/make_corpus.py [OUT_DIR]   (default: tests/fuzz/corpus)
Owns only the corpus; keep the opcodes in step with kOpcodes in fuzz_input.cc.
"""
import os
import random
import struct
import sys

# First opcode byte of each operation (index into kOpcodes in fuzz_input.cc).
ALLOC, BURST, FREE, FREE_EVERY_OTHER, FREE_BAD = 0, 7, 8, 12, 13
RECORD, RECORD_BAD, COMPLETE, EMPTY, SET_LIMIT, SET_FRACTION = 14, 16, 17, 19, 20, 21
BEGIN_POOL, END_POOL, RELEASE_POOL, INJECT, CLEAR, STATS, VERIFY = 22, 23, 24, 25, 27, 28, 29
# BackendOp
RESERVE_VA, RELEASE_VA, CREATE, RELEASE, MAP, UNMAP, SET_ACCESS = range(7)
# size classes of PickSize
TINY, SMALL, AROUND_PAGE, MULTI_PAGE, UP_TO_CAPACITY, HUGE, ZERO, ABSURD = range(8)
# fault kinds
INTERNAL, OOM, UNAVAILABLE = range(3)
# the device's granularity index: 4 KiB << i (the engine's page is that times
# Input's page_multiple, 1, 2 or 4: page_size; the large page, if any, is the
# engine's page times Input's large_pages, 2, 4 or 8: large_page_mb)
P4K, P8K, P16K, P32K, P64K = range(5)


class Input:
    def __init__(self, page=P4K, pages=16, faults=False, reclaim_before_grow=False,
                 divisions=0, va_factor_1=False, buckets=False, page_multiple=1,
                 large_pages=0):
        flags = (1 if faults else 0) | (2 if reclaim_before_grow else 0)
        flags |= {0: 0, 2: 1, 4: 2, 8: 3}[divisions] << 2
        flags |= (16 if va_factor_1 else 0) | (32 if buckets else 0)
        page += 5 * {1: 0, 2: 1, 4: 2}[page_multiple]
        page += 15 * {0: 0, 2: 1, 4: 2, 8: 3}[large_pages]
        self.b = bytearray([page, pages - 4, flags])

    def op(self, code, *args):
        self.b.append(code)
        for a in args:
            if isinstance(a, tuple):  # ('H', value): a little-endian u16
                self.b += struct.pack('<H', a[1] & 0xFFFF)
            else:
                self.b.append(a & 0xFF)
        return self

    def alloc(self, stream, cls, v):
        return self.op(ALLOC, stream, cls, ('H', v))

    def burst(self, stream, n, cls, v):
        return self.op(BURST, stream, n - 2, cls, ('H', v))

    def free(self, i):
        return self.op(FREE, ('H', i))

    def free_every_other(self, start=0):
        return self.op(FREE_EVERY_OTHER, start)

    def free_bad(self, kind, v):
        return self.op(FREE_BAD, kind, ('H', v))

    def record(self, i, stream):
        return self.op(RECORD, ('H', i), stream)

    def record_bad(self, kind, v):
        return self.op(RECORD_BAD, kind, ('H', v))

    def complete(self):
        return self.op(COMPLETE)

    def empty(self):
        return self.op(EMPTY)

    def limit(self, v):
        return self.op(SET_LIMIT, ('H', v))

    def fraction(self, v):
        return self.op(SET_FRACTION, v)

    def begin(self, pool, mask):
        return self.op(BEGIN_POOL, pool, ('H', mask))

    def end(self, pool):
        return self.op(END_POOL, pool)

    def release(self, pool):
        return self.op(RELEASE_POOL, pool)

    def inject(self, backend_op, when, count, kind):
        return self.op(INJECT, backend_op, when, count, kind)

    def clear(self):
        return self.op(CLEAR)

    def stats(self, what):
        return self.op(STATS, what)

    def verify(self):
        return self.op(VERIFY)


def fill_scatter(page, pages, **kw):
    x = Input(page, pages, **kw)
    x.burst(0, 16, SMALL, 4095).burst(0, 16, AROUND_PAGE, 300)
    x.free_every_other(0).alloc(5, UP_TO_CAPACITY, 30000).verify()
    x.burst(3, 16, TINY, 100).free_every_other(1).alloc(7, MULTI_PAGE, 9000)
    return x.empty().verify()


def churn(page, pages, streams=4, **kw):
    x = Input(page, pages, **kw)
    for i in range(24):
        x.alloc(i % streams, [TINY, SMALL, AROUND_PAGE, MULTI_PAGE][i % 4], 977 * i)
        if i % 3 == 2:
            x.free(i * 7)
    return x.empty().verify()


def long_mix(seed, n, **kw):
    """A long sequence of every operation, weighted like a real program."""
    rng = random.Random(seed)
    x = Input(**kw)
    for _ in range(n):
        r = rng.random()
        if r < 0.40:
            x.alloc(rng.randrange(16), rng.choice([TINY, SMALL, SMALL, AROUND_PAGE,
                                                   MULTI_PAGE, UP_TO_CAPACITY]),
                    rng.randrange(65536))
        elif r < 0.70:
            x.free(rng.randrange(65536))
        elif r < 0.76:
            x.record(rng.randrange(65536), rng.randrange(16))
        elif r < 0.80:
            x.complete()
        elif r < 0.83:
            x.empty()
        elif r < 0.86:
            x.begin(rng.randrange(2), rng.randrange(65536))
        elif r < 0.88:
            x.end(rng.randrange(2))
        elif r < 0.90:
            x.release(rng.randrange(2))
        elif r < 0.92:
            x.limit(rng.randrange(65536))
        elif r < 0.95 and kw.get('faults'):
            x.inject(rng.randrange(10), rng.randrange(8), rng.randrange(5),
                     rng.randrange(3))
        elif r < 0.97:
            x.clear()
        else:
            x.free_every_other(rng.randrange(2))
    return x


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), 'corpus')
    os.makedirs(out, exist_ok=True)
    seeds = {}

    # Capacity, scattered holes, moving pages between streams.
    seeds['fill_scatter_4k_16'] = fill_scatter(P4K, 16)
    seeds['fill_scatter_64k_16'] = fill_scatter(P64K, 16)
    seeds['fill_scatter_16k_64_reclaim_first'] = fill_scatter(P16K, 64, reclaim_before_grow=True)
    seeds['fill_scatter_8k_4'] = fill_scatter(P8K, 4)
    # The engine's pages larger than the device's (page_size_mb).
    seeds['fill_scatter_4k_x4_16'] = fill_scatter(P4K, 16, page_multiple=4)
    seeds['fill_scatter_16k_x2_24_reclaim_first'] = fill_scatter(P16K, 24, page_multiple=2,
                                                                 reclaim_before_grow=True)
    seeds['long_mix_faults_8k_x4_32'] = long_mix(5, 300, page=P8K, pages=32, faults=True,
                                                 page_multiple=4)
    seeds['churn_4_streams'] = churn(P4K, 16)
    seeds['churn_16_streams_va1'] = churn(P8K, 32, streams=16, va_factor_1=True)
    seeds['churn_divisions_4'] = churn(P16K, 24, divisions=4)
    seeds['churn_buckets'] = churn(P4K, 48, buckets=True)
    seeds['churn_divisions_8_buckets'] = churn(P32K, 40, divisions=8, buckets=True)
    # Large requests (> 1 MiB: the large arenas) on a 4 MiB device.
    x = Input(P64K, 64)
    x.alloc(1, ABSURD, 7).alloc(1, MULTI_PAGE, 40000).alloc(2, UP_TO_CAPACITY, 20000)
    x.free(0).alloc(3, ABSURD, 4).free_every_other().empty()
    seeds['large_arenas_64k_64'] = x
    # Large pages of 8 engine pages (512 KiB, large_page_mb) on the same
    # device: UP_TO_CAPACITY's v = 8192 k - 1 asks for k large pages less 63
    # bytes (whole large pages once rounded; k = 2 is no large request, 1 MiB).
    # Other large sizes take base pages; large pages move between streams, and
    # memory goes from one size to the other both ways.
    x = Input(P64K, 64, large_pages=8)
    x.alloc(1, UP_TO_CAPACITY, 4 * 8192 - 1).alloc(2, UP_TO_CAPACITY, 20000).verify()
    x.free(0).alloc(3, UP_TO_CAPACITY, 3 * 8192 - 1).record(1, 4)
    x.burst(0, 8, AROUND_PAGE, 100).free_every_other().free(0).complete()
    x.alloc(1, UP_TO_CAPACITY, 5 * 8192 - 1).verify()
    # Live block 4 is the large pages' block: freed, its pages go to base pages.
    x.burst(2, 6, AROUND_PAGE, 300).free(4).alloc(4, UP_TO_CAPACITY, 2 * 8192 - 1)
    seeds['large_pages_64k_x8_64'] = x.empty().verify()
    # Sizes at the edges.
    x = Input(P4K, 8)
    for v in range(8):
        x.alloc(v, ABSURD, v)
    x.alloc(0, ZERO, 0).alloc(0, HUGE, 5).alloc(1, UP_TO_CAPACITY, 65535)
    seeds['absurd_zero_huge_sizes'] = x.free(0).empty()

    # record_stream: pending frees, events held in flight, then completed.
    x = Input(P4K, 8)
    x.burst(1, 6, AROUND_PAGE, 200).record(0, 2).record(1, 3).record(2, 2)
    x.free(0).free(0).alloc(1, AROUND_PAGE, 200).alloc(2, UP_TO_CAPACITY, 40000)
    x.free_bad(2, 0).complete().alloc(1, AROUND_PAGE, 200).empty().verify()
    seeds['record_stream_pending'] = x
    x = Input(P16K, 16)
    x.burst(0, 12, SMALL, 9000)
    for i in range(12):
        x.record(i, 1 + i % 15)
    x.free_every_other(0).alloc(9, UP_TO_CAPACITY, 50000).complete()
    x.alloc(9, UP_TO_CAPACITY, 50000).free_every_other(0).empty()
    seeds['record_stream_many_streams'] = x

    # Graph pools: capture, held pages, release; pool misuse.
    x = Input(P4K, 16)
    x.begin(0, 0b10).alloc(1, MULTI_PAGE, 20000).alloc(1, SMALL, 10).alloc(2, SMALL, 10)
    x.free(0).end(0).alloc(3, UP_TO_CAPACITY, 60000).release(0).alloc(3, UP_TO_CAPACITY, 60000)
    x.end(0).release(3).begin(1, 0xFFFF).begin(1, 1).empty().release(1).empty()
    seeds['graph_pool_capture_release'] = x
    x = Input(P8K, 24)
    x.begin(0, 0b11).begin(1, 0b110).burst(1, 5, SMALL, 7000).burst(2, 5, SMALL, 7000)
    x.record(0, 2).free(1).end(1).free(0).empty().end(0).release(1).release(0)
    x.begin(0, 0b1).alloc(0, SMALL, 1).release(0).empty()
    seeds['graph_pools_overlapping'] = x

    # Limits and fractions (valid, invalid, NaN).
    x = Input(P4K, 32)
    x.burst(0, 10, AROUND_PAGE, 0).limit(1 | (8 << 2)).alloc(1, UP_TO_CAPACITY, 30000)
    x.free_every_other().alloc(1, MULTI_PAGE, 5000).limit(2 | (77 << 2)).limit(0)
    x.fraction(64).alloc(2, UP_TO_CAPACITY, 40000).fraction(0).fraction(200)
    x.fraction(255).fraction(128).limit(3).alloc(2, ABSURD, 4).alloc(2, ABSURD, 5)
    seeds['limits_and_fractions'] = x.empty()
    x = Input(P16K, 16)
    x.burst(0, 8, AROUND_PAGE, 100).limit(1).alloc(0, TINY, 1).limit(1 | (2 << 2))
    x.empty().alloc(0, AROUND_PAGE, 100).limit(0).empty()
    seeds['limit_below_usage'] = x

    # Bad pointers of every kind, and record_stream of bad pointers.
    x = Input(P4K, 16)
    x.burst(0, 4, SMALL, 1000).free(0)
    for kind in range(6):
        x.free_bad(kind, 1234 + kind).record_bad(kind, 99 + kind)
    seeds['bad_pointers'] = x.free(0).free_bad(2, 0).empty()

    # Every backend op failing once, repeatedly, and for good; each kind.
    names = ['reserve_va', 'release_va', 'create', 'release', 'map', 'unmap', 'set_access']
    for op in range(7):
        for count, kind, tag in ((1, INTERNAL, 'once'), (3, OOM, 'oom3'), (0, UNAVAILABLE, 'forever')):
            x = Input(P4K, 16, faults=True)
            x.alloc(0, SMALL, 100).inject(op, 0, count, kind)
            x.burst(1, 6, AROUND_PAGE, 0).free_every_other().empty()
            x.alloc(2, MULTI_PAGE, 9000).free(0).empty().alloc(3, SMALL, 5)
            x.clear().burst(1, 4, AROUND_PAGE, 0).empty()
            seeds['fault_%s_%s' % (names[op], tag)] = x
    # Event calls failing (Record / Query / Synchronize: BackendOp count + 0..2).
    for call, name in ((7, 'record'), (8, 'query'), (9, 'synchronize')):
        x = Input(P4K, 8, faults=True)
        x.burst(0, 4, AROUND_PAGE, 0).record(0, 1).record(1, 2).free(2).free(3)
        x.inject(call, 0, 2, INTERNAL).burst(1, 4, AROUND_PAGE, 0).free(0).free(1)
        x.alloc(2, UP_TO_CAPACITY, 50000).empty().complete().clear().empty()
        seeds['fault_event_%s' % name] = x
    # Faults during pages moving between streams (reclaim) and empty_cache.
    x = Input(P8K, 8, faults=True)
    x.burst(0, 8, AROUND_PAGE, 0).free_every_other().inject(UNMAP, 1, 2, INTERNAL)
    x.alloc(1, UP_TO_CAPACITY, 32000).alloc(1, UP_TO_CAPACITY, 32000).clear()
    x.alloc(1, UP_TO_CAPACITY, 32000).inject(RELEASE, 0, 1, INTERNAL).empty().empty()
    seeds['fault_during_reclaim'] = x

    # Stats and snapshots.
    x = Input(P4K, 16)
    x.burst(0, 5, SMALL, 300).stats(0).free(0).stats(1).alloc(1, ABSURD, 0).stats(1)
    x.stats(2).stats(3).free(0).stats(0)
    seeds['stats_and_snapshots'] = x

    # Long sequences, so that fuzzing also starts from inputs of ~1 KiB.
    seeds['long_mix_8k_32'] = long_mix(1, 250, page=P8K, pages=32)
    seeds['long_mix_4k_16_auto_reclaim_trace'] = long_mix(2, 250, page=P4K, pages=16)
    seeds['long_mix_4k_16_auto_reclaim_trace'].b[2] |= 64 | 128
    seeds['long_mix_faults_16k_24'] = long_mix(3, 300, page=P16K, pages=24, faults=True)
    seeds['long_mix_faults_64k_64_divisions'] = long_mix(4, 300, page=P64K, pages=64,
                                                         faults=True, divisions=2)

    for name, x in sorted(seeds.items()):
        with open(os.path.join(out, name), 'wb') as f:
            f.write(bytes(x.b))
    print('wrote %d seeds to %s' % (len(seeds), out))


if __name__ == '__main__':
    main()
