/*
 * hash.c — the 128-bit streaming content hash behind kernel keys.
 *
 * Four 64-bit lanes absorb a 32-byte block per step: lane i takes word i through an
 * add-rotate-multiply round, then word i+1 is added raw, so every word reaches two lanes
 * and a one-word change can never cancel.  About 10 bytes/ns (bound by the multiplier).
 * The tail is zero-padded and the total length goes into the finalisation, which runs
 * two independent chains of full-avalanche 64-bit mixers over the four lanes, giving
 * the two output words.
 */
#include "sc_jit.h"

#include <string.h>

#define K0 0x9e3779b97f4a7c15u
#define K1 0xc2b2ae3d27d4eb4fu
#define K2 0x165667b19e3779f9u
#define K3 0xd6e8feb86659fd93u

static uint64_t rotl(uint64_t x, unsigned r)
{
    return (x << r) | (x >> (64 - r));
}

/* Bijective 64-bit mixer with full avalanche (xor-shift / odd multiply rounds). */
static uint64_t avalanche(uint64_t x)
{
    x ^= x >> 31;
    x *= 0xbf58476d1ce4e5b9u;
    x ^= x >> 29;
    x *= 0x94d049bb133111ebu;
    x ^= x >> 32;
    return x;
}

static uint64_t load64(const unsigned char *p)
{
    uint64_t w;
    memcpy(&w, p, sizeof w);
    return w;
}

static uint64_t round64(uint64_t v, uint64_t w)
{
    return rotl(v + w * K1, 31) * K0;
}

/* Absorb n / 32 whole blocks of p into v; the lanes live in registers meanwhile. */
static void absorb(uint64_t v[4], const unsigned char *p, size_t n)
{
    uint64_t a = v[0], b = v[1], c = v[2], d = v[3];
    for (; n >= 32; p += 32, n -= 32) {
        uint64_t w0 = load64(p), w1 = load64(p + 8), w2 = load64(p + 16), w3 = load64(p + 24);
        a = round64(a, w0) + w1;
        b = round64(b, w1) + w2;
        c = round64(c, w2) + w3;
        d = round64(d, w3) + w0;
    }
    v[0] = a;
    v[1] = b;
    v[2] = c;
    v[3] = d;
}

void sc_jit_hash_init(sc_jit_hasher *h, uint64_t seed)
{
    h->v[0] = seed + K0 + K1;
    h->v[1] = seed ^ K1;
    h->v[2] = seed + K2;
    h->v[3] = seed - K3;
    h->len = 0;
    h->nbuf = 0;
}

void sc_jit_hash_update(sc_jit_hasher *h, const void *data, size_t n)
{
    const unsigned char *p = data;
    if (n == 0)
        return;
    h->len += n;
    if (h->nbuf) {
        size_t take = sizeof h->buf - h->nbuf;
        if (take > n)
            take = n;
        memcpy(h->buf + h->nbuf, p, take);
        h->nbuf += take;
        p += take;
        n -= take;
        if (h->nbuf < sizeof h->buf)
            return;
        absorb(h->v, h->buf, sizeof h->buf);
        h->nbuf = 0;
    }
    absorb(h->v, p, n);
    p += n & ~(size_t)31;
    n &= 31;
    if (n)
        memcpy(h->buf, p, n);
    h->nbuf = n;
}

void sc_jit_hash_field(sc_jit_hasher *h, const void *data, size_t n)
{
    uint64_t len = n;
    sc_jit_hash_update(h, &len, sizeof len);
    sc_jit_hash_update(h, data, n);
}

sc_jit_key sc_jit_hash_final(const sc_jit_hasher *h)
{
    uint64_t v[4] = {h->v[0], h->v[1], h->v[2], h->v[3]};
    if (h->nbuf) {
        unsigned char last[32] = {0};
        memcpy(last, h->buf, h->nbuf);
        absorb(v, last, sizeof last);
    }
    uint64_t a = avalanche(v[0] + h->len * K2);
    a = avalanche(a ^ v[1]);
    a = avalanche(a + v[2]);
    a = avalanche(a ^ v[3]);
    uint64_t b = avalanche(v[3] ^ (h->len * K3 + K0));
    b = avalanche(b + v[2]);
    b = avalanche(b ^ v[1]);
    b = avalanche(b + v[0]);
    sc_jit_key k = {{a, b}};
    return k;
}

void sc_jit_key_hex(sc_jit_key k, char hex[33])
{
    static const char digits[] = "0123456789abcdef";
    for (int i = 0; i < 32; i++) {
        uint64_t w = k.w[i / 16];
        hex[i] = digits[(w >> (60 - 4 * (i % 16))) & 15];
    }
    hex[32] = '\0';
}
