/*
 * wsclient: the benchmark's independent WebSocket client, in C.
 *
 * Why it exists: the Python benchmark client (ahp/bench/rawws.py) shares the
 * machine's two cores with the server under test, and its own per-frame work
 * (a Trio task, wsproto, orjson) shapes what it measures. This client does
 * almost nothing per frame, so the figures it gives belong to the server.
 * It is compiled at benchmark time (cc -O2) by ahp/bench/cclient.py.
 *
 * It speaks RFC 6455 as a client: TCP_NODELAY, the HTTP upgrade (with a
 * checked Sec-WebSocket-Accept), masked frames out; frames in with
 * fragmentation, pings (answered), pongs (ignored) and close (answered).
 * Three dialects: AHP (initialize with initialSubscriptions, dispatchAction
 * terminal/input, output in terminal/data, end at terminal/exited),
 * terminado (["stdin", ...] in, ["stdout", ...] out, end at ["disconnect", ...])
 * and ttyd (subprotocol "tty"; binary messages tagged by their first byte:
 * a JSON hello {"AuthToken", "columns", "rows"} out, then '0' + bytes typed;
 * in, '1' title and '2' preferences before '0' + raw output bytes; ttyd has no
 * end-of-output message, so the end is --expect-chars characters of output).
 *
 * Modes:
 *   stream  handshake, then type "\r" (releases the benchmark's gate) and
 *           read until the end marker; time from the send to the end.
 *   echo    type "x" and wait for output holding "x", --warmup + --count
 *           times, optionally sleeping --pause seconds before each one.
 *
 * Usage: wsclient [--dialect ahp --channel URI | --dialect terminado |
 *                 --dialect ttyd [--expect-chars N]] [--release TEXT [--ready TEXT]]
 *        [--count N --warmup N --pause S] [--timeout S] URL stream|echo
 *
 * Output: one JSON object on stdout. Errors: a line on stderr, exit status 2.
 *
 * Bounds: one receive buffer grown to hold the largest frame (at most
 * MAX_MESSAGE bytes), one message buffer for fragmented messages (same bound),
 * at most MAX_ECHO keystrokes per run (a cooked tty's line holds ~4095).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#define RECV_SIZE (256 * 1024)
#define MAX_MESSAGE ((size_t)256 * 1024 * 1024)
#define MAX_ECHO 4000
#define MAX_DEPTH 64
#define HEAD_MAX 8192

enum { OP_CONT = 0, OP_TEXT = 1, OP_BINARY = 2, OP_CLOSE = 8, OP_PING = 9, OP_PONG = 10 };
enum { DIALECT_AHP, DIALECT_TERMINADO, DIALECT_TTYD };
/* ttyd's message types (its src/server.h) and the size its hello announces. */
#define TTYD_INPUT '0'
#define TTYD_OUTPUT '0'
#define TTYD_PREFERENCES '2'
#define TTYD_HELLO "{\"AuthToken\":\"\",\"columns\":80,\"rows\":24}"

static int sock = -1;
static unsigned char *rbuf;
static size_t rlen, rpos, rcap;
static unsigned char *mbuf;
static size_t mlen, mcap;
static int in_message;
static unsigned char *sbuf;
static size_t scap;
static uint64_t rng;
static int close_code; /* 0 while open */
static const char *program = "wsclient";

static void die(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));

static void die(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s: ", program);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(2);
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static double cpu_seconds(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec * 1e-6 +
           (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec * 1e-6;
}

static uint64_t next_random(void) {
    /* xorshift64*: masking keys only need to be unpredictable to proxies, not secret. */
    rng ^= rng >> 12;
    rng ^= rng << 25;
    rng ^= rng >> 27;
    return rng * 2685821657736338717ULL;
}

static void *grow(void *p, size_t *cap, size_t need) {
    if (need <= *cap) return p;
    size_t n = *cap ? *cap : 4096;
    while (n < need) n *= 2;
    p = realloc(p, n);
    if (!p) die("out of memory (%zu bytes)", n);
    *cap = n;
    return p;
}

static void write_all(const unsigned char *p, size_t n) {
    while (n) {
        ssize_t w = send(sock, p, n, MSG_NOSIGNAL);
        if (w < 0) {
            if (errno == EINTR) continue;
            die("send: %s", strerror(errno));
        }
        p += w;
        n -= (size_t)w;
    }
}

/* -- SHA-1 and base64, for the upgrade's key and its accept check (RFC 3174, 4648) -- */

static uint32_t rol(uint32_t x, int n) { return (x << n) | (x >> (32 - n)); }

static void sha1(const unsigned char *data, size_t len, unsigned char out[20]) {
    uint32_t h[5] = {0x67452301, 0xEFCDAB89, 0x98BADCFE, 0x10325476, 0xC3D2E1F0};
    size_t total = ((len + 8) / 64 + 1) * 64;
    unsigned char *msg = calloc(total, 1);
    if (!msg) die("out of memory");
    memcpy(msg, data, len);
    msg[len] = 0x80;
    uint64_t bits = (uint64_t)len * 8;
    for (int i = 0; i < 8; i++) msg[total - 1 - i] = (unsigned char)(bits >> (8 * i));
    for (size_t off = 0; off < total; off += 64) {
        uint32_t w[80];
        for (int i = 0; i < 16; i++)
            w[i] = (uint32_t)msg[off + 4 * i] << 24 | (uint32_t)msg[off + 4 * i + 1] << 16 |
                   (uint32_t)msg[off + 4 * i + 2] << 8 | msg[off + 4 * i + 3];
        for (int i = 16; i < 80; i++) w[i] = rol(w[i - 3] ^ w[i - 8] ^ w[i - 14] ^ w[i - 16], 1);
        uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4];
        for (int i = 0; i < 80; i++) {
            uint32_t f, k;
            if (i < 20) f = (b & c) | (~b & d), k = 0x5A827999;
            else if (i < 40) f = b ^ c ^ d, k = 0x6ED9EBA1;
            else if (i < 60) f = (b & c) | (b & d) | (c & d), k = 0x8F1BBCDC;
            else f = b ^ c ^ d, k = 0xCA62C1D6;
            uint32_t t = rol(a, 5) + f + e + k + w[i];
            e = d, d = c, c = rol(b, 30), b = a, a = t;
        }
        h[0] += a, h[1] += b, h[2] += c, h[3] += d, h[4] += e;
    }
    free(msg);
    for (int i = 0; i < 5; i++)
        for (int j = 0; j < 4; j++) out[4 * i + j] = (unsigned char)(h[i] >> (24 - 8 * j));
}

static void base64(const unsigned char *in, size_t n, char *out) {
    static const char al[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    size_t o = 0;
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)in[i] << 16;
        if (i + 1 < n) v |= (uint32_t)in[i + 1] << 8;
        if (i + 2 < n) v |= in[i + 2];
        out[o++] = al[v >> 18 & 63];
        out[o++] = al[v >> 12 & 63];
        out[o++] = i + 1 < n ? al[v >> 6 & 63] : '=';
        out[o++] = i + 2 < n ? al[v & 63] : '=';
    }
    out[o] = 0;
}

/* -- frames ------------------------------------------------------------------------- */

static void send_frame(int opcode, const void *data, size_t n) {
    size_t head = n < 126 ? 2 : n < 65536 ? 4 : 10;
    sbuf = grow(sbuf, &scap, head + 4 + n);
    unsigned char *p = sbuf;
    *p++ = (unsigned char)(0x80 | opcode);
    if (n < 126) {
        *p++ = (unsigned char)(0x80 | n);
    } else if (n < 65536) {
        *p++ = 0x80 | 126;
        *p++ = (unsigned char)(n >> 8);
        *p++ = (unsigned char)n;
    } else {
        *p++ = 0x80 | 127;
        for (int i = 7; i >= 0; i--) *p++ = (unsigned char)((uint64_t)n >> (8 * i));
    }
    uint32_t key = (uint32_t)next_random();
    unsigned char mask[4] = {(unsigned char)(key >> 24), (unsigned char)(key >> 16),
                             (unsigned char)(key >> 8), (unsigned char)key};
    memcpy(p, mask, 4);
    p += 4;
    const unsigned char *d = data;
    for (size_t i = 0; i < n; i++) p[i] = d[i] ^ mask[i & 3];
    write_all(sbuf, (size_t)(p - sbuf) + n);
}

/* Read more bytes into the receive buffer; 0 when the peer closed the stream. */
static int fill(void) {
    if (rpos) {
        memmove(rbuf, rbuf + rpos, rlen - rpos);
        rlen -= rpos;
        rpos = 0;
    }
    rbuf = grow(rbuf, &rcap, rlen + RECV_SIZE);
    for (;;) {
        ssize_t r = recv(sock, rbuf + rlen, rcap - rlen, 0);
        if (r > 0) {
            rlen += (size_t)r;
            return 1;
        }
        if (r == 0) return 0;
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) die("timed out waiting for the server");
        if (errno == ECONNRESET) return 0;
        die("recv: %s", strerror(errno));
    }
}

/* One frame out of the receive buffer, or 0 if it is not all there yet. */
static int next_frame(int *fin, int *opcode, unsigned char **payload, size_t *n) {
    size_t avail = rlen - rpos;
    if (avail < 2) return 0;
    unsigned char *p = rbuf + rpos;
    if (p[1] & 0x80) die("the server sent a masked frame");
    if (p[0] & 0x70) die("the server set reserved bits (no extension was negotiated)");
    uint64_t len = p[1] & 0x7F;
    size_t head = 2;
    if (len == 126) {
        if (avail < 4) return 0;
        len = (uint64_t)p[2] << 8 | p[3];
        head = 4;
    } else if (len == 127) {
        if (avail < 10) return 0;
        len = 0;
        for (int i = 0; i < 8; i++) len = len << 8 | p[2 + i];
        head = 10;
    }
    if (len > MAX_MESSAGE) die("a frame of %llu bytes", (unsigned long long)len);
    if (avail < head + len) return 0;
    *fin = p[0] >> 7;
    *opcode = p[0] & 0x0F;
    *payload = p + head;
    *n = (size_t)len;
    rpos += head + (size_t)len;
    return 1;
}

/* The next text or binary message: 1 with its payload (valid until the next call),
 * or 0 once the connection is closed (close_code set). */
static int get_message(unsigned char **payload, size_t *n) {
    for (;;) {
        int fin, opcode;
        unsigned char *p;
        size_t len;
        if (!next_frame(&fin, &opcode, &p, &len)) {
            if (!fill()) {
                close_code = 1006;
                return 0;
            }
            continue;
        }
        switch (opcode) {
        case OP_PING:
            if (!fin || len > 125) die("malformed ping");
            send_frame(OP_PONG, p, len);
            continue;
        case OP_PONG:
            continue;
        case OP_CLOSE: {
            int code = len >= 2 ? p[0] << 8 | p[1] : 1005;
            unsigned char reply[2] = {(unsigned char)(code >> 8), (unsigned char)code};
            if (code == 1005 || code == 1006) reply[0] = 1000 >> 8, reply[1] = 1000 & 0xFF;
            send_frame(OP_CLOSE, reply, 2);
            close_code = code;
            return 0;
        }
        case OP_TEXT:
        case OP_BINARY:
            if (in_message) die("a new message inside a fragmented one");
            if (fin) {
                *payload = p;
                *n = len;
                return 1;
            }
            in_message = 1;
            mlen = 0;
            /* fall through */
        case OP_CONT:
            if (!in_message) die("a continuation frame outside a message");
            if (mlen + len > MAX_MESSAGE) die("a message over %zu bytes", MAX_MESSAGE);
            mbuf = grow(mbuf, &mcap, mlen + len);
            memcpy(mbuf + mlen, p, len);
            mlen += len;
            if (fin) {
                in_message = 0;
                *payload = mbuf;
                *n = mlen;
                return 1;
            }
            continue;
        default:
            die("unknown opcode %d", opcode);
        }
    }
}

/* -- the upgrade ---------------------------------------------------------------------- */

static void connect_ws(const char *url, double timeout, const char *subprotocol) {
    char host[256], port[16] = "80", target[4096];
    const char *p = url;
    if (strncmp(p, "ws://", 5) != 0) die("only ws:// URLs: %s", url);
    p += 5;
    size_t h = strcspn(p, ":/?");
    if (h == 0 || h >= sizeof host) die("bad host in %s", url);
    memcpy(host, p, h);
    host[h] = 0;
    p += h;
    if (*p == ':') {
        size_t n = strcspn(++p, "/?");
        if (n == 0 || n >= sizeof port) die("bad port in %s", url);
        memcpy(port, p, n);
        port[n] = 0;
        p += n;
    }
    snprintf(target, sizeof target, "%s%s", *p == '/' ? "" : "/", p);

    struct addrinfo hints = {0}, *res;
    hints.ai_socktype = SOCK_STREAM;
    int rc = getaddrinfo(host, port, &hints, &res);
    if (rc) die("%s:%s: %s", host, port, gai_strerror(rc));
    sock = socket(res->ai_family, res->ai_socktype, res->ai_protocol);
    if (sock < 0) die("socket: %s", strerror(errno));
    struct timeval tv = {(time_t)timeout, (suseconds_t)((timeout - (double)(time_t)timeout) * 1e6)};
    setsockopt(sock, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(sock, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    if (connect(sock, res->ai_addr, res->ai_addrlen) < 0)
        die("connect %s:%s: %s", host, port, strerror(errno));
    freeaddrinfo(res);
    int one = 1;
    if (setsockopt(sock, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) < 0)
        die("TCP_NODELAY: %s", strerror(errno));

    unsigned char nonce[16];
    for (int i = 0; i < 16; i += 8) {
        uint64_t r = next_random();
        memcpy(nonce + i, &r, 8);
    }
    char key[32], request[HEAD_MAX + 4096], protocol[128] = "";
    base64(nonce, 16, key);
    if (subprotocol)
        snprintf(protocol, sizeof protocol, "Sec-WebSocket-Protocol: %s\r\n", subprotocol);
    int n = snprintf(request, sizeof request,
                     "GET %s HTTP/1.1\r\nHost: %s:%s\r\nUpgrade: websocket\r\n"
                     "Connection: Upgrade\r\nSec-WebSocket-Key: %s\r\n"
                     "Sec-WebSocket-Version: 13\r\n%s\r\n",
                     target, host, port, key, protocol);
    if (n < 0 || (size_t)n >= sizeof request) die("URL too long");
    write_all((const unsigned char *)request, (size_t)n);

    /* The response head; frames that follow it in the same read stay in rbuf. */
    char *end;
    for (;;) {
        if (!fill()) die("the server closed the connection during the upgrade");
        rbuf = grow(rbuf, &rcap, rlen + 1);
        rbuf[rlen] = 0;
        end = strstr((char *)rbuf, "\r\n\r\n");
        if (end) break;
        if (rlen > HEAD_MAX) die("upgrade response head too long");
    }
    size_t head = (size_t)(end - (char *)rbuf) + 4;
    if (strncmp((char *)rbuf, "HTTP/1.1 101", 12) != 0) {
        char *eol = strstr((char *)rbuf, "\r\n");
        die("upgrade refused: %.*s", (int)(eol - (char *)rbuf), (char *)rbuf);
    }
    char expect_src[128];
    unsigned char digest[20];
    char expect[32];
    snprintf(expect_src, sizeof expect_src, "%s258EAFA5-E914-47DA-95CA-C5AB0DC85B11", key);
    sha1((unsigned char *)expect_src, strlen(expect_src), digest);
    base64(digest, 20, expect);
    int accepted = 0;
    for (char *line = strstr((char *)rbuf, "\r\n") + 2; line < (char *)rbuf + head - 2;) {
        char *eol = strstr(line, "\r\n");
        if (strncasecmp(line, "sec-websocket-accept:", 21) == 0) {
            char *v = line + 21;
            while (*v == ' ' || *v == '\t') v++;
            size_t len = (size_t)(eol - v);
            while (len && (v[len - 1] == ' ' || v[len - 1] == '\t')) len--;
            accepted = len == strlen(expect) && memcmp(v, expect, len) == 0;
        }
        line = eol + 2;
    }
    if (!accepted) die("missing or wrong Sec-WebSocket-Accept");
    rpos = head;
}

/* -- just enough JSON: walk a message, pick out a few strings by key ----------------- */

typedef struct {
    const unsigned char *p, *end;
} Cursor;

typedef struct {
    const unsigned char *s;
    size_t n; /* raw (escaped) bytes between the quotes; s == NULL: absent */
} Span;

static void ws_skip(Cursor *c) {
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\t' || *c->p == '\n' || *c->p == '\r'))
        c->p++;
}

static int read_string(Cursor *c, Span *out) {
    ws_skip(c);
    if (c->p >= c->end || *c->p != '"') return -1;
    const unsigned char *s = ++c->p;
    while (c->p < c->end && *c->p != '"') c->p += *c->p == '\\' ? 2 : 1;
    if (c->p >= c->end) return -1;
    out->s = s;
    out->n = (size_t)(c->p - s);
    c->p++;
    return 0;
}

static int skip_value(Cursor *c, int depth) {
    ws_skip(c);
    if (c->p >= c->end || depth > MAX_DEPTH) return -1;
    Span s;
    switch (*c->p) {
    case '"':
        return read_string(c, &s);
    case '{':
    case '[': {
        unsigned char close = *c->p == '{' ? '}' : ']';
        int object = close == '}';
        c->p++;
        ws_skip(c);
        if (c->p < c->end && *c->p == close) {
            c->p++;
            return 0;
        }
        for (;;) {
            if (object) {
                if (read_string(c, &s)) return -1;
                ws_skip(c);
                if (c->p >= c->end || *c->p++ != ':') return -1;
            }
            if (skip_value(c, depth + 1)) return -1;
            ws_skip(c);
            if (c->p >= c->end) return -1;
            if (*c->p == ',') {
                c->p++;
                continue;
            }
            if (*c->p++ != close) return -1;
            return 0;
        }
    }
    default:
        while (c->p < c->end && !strchr(",}] \t\r\n", *c->p)) c->p++;
        return 0;
    }
}

static int span_is(Span s, const char *lit) {
    size_t n = strlen(lit);
    return s.s && s.n == n && memcmp(s.s, lit, n) == 0;
}

/* Calls visit(key, cursor at the value, ctx) for each member of the object at c;
 * visit must consume the value (returning 0) or return 1 to have it skipped. */
typedef int (*Visit)(Span key, Cursor *c, void *ctx, int depth);

static int walk_object(Cursor *c, Visit visit, void *ctx, int depth) {
    ws_skip(c);
    if (c->p >= c->end || *c->p != '{' || depth > MAX_DEPTH) return -1;
    c->p++;
    ws_skip(c);
    if (c->p < c->end && *c->p == '}') {
        c->p++;
        return 0;
    }
    for (;;) {
        Span key;
        if (read_string(c, &key)) return -1;
        ws_skip(c);
        if (c->p >= c->end || *c->p++ != ':') return -1;
        int r = visit(key, c, ctx, depth);
        if (r < 0) return -1;
        if (r == 1 && skip_value(c, depth + 1)) return -1;
        ws_skip(c);
        if (c->p >= c->end) return -1;
        if (*c->p == ',') {
            c->p++;
            continue;
        }
        return *c->p++ == '}' ? 0 : -1;
    }
}

typedef struct {
    Span method, channel, type, data;
    int has_id1, has_error, has_result;
} Ahp;

static int visit_action(Span key, Cursor *c, void *ctx, int depth) {
    Ahp *m = ctx;
    (void)depth;
    if (span_is(key, "type")) return read_string(c, &m->type);
    if (span_is(key, "data")) {
        ws_skip(c);
        if (c->p < c->end && *c->p == '"') return read_string(c, &m->data);
    }
    return 1;
}

static int visit_params(Span key, Cursor *c, void *ctx, int depth) {
    Ahp *m = ctx;
    if (span_is(key, "channel")) {
        ws_skip(c);
        if (c->p < c->end && *c->p == '"') return read_string(c, &m->channel);
        return 1;
    }
    if (span_is(key, "action")) {
        ws_skip(c);
        if (c->p < c->end && *c->p == '{') return walk_object(c, visit_action, m, depth + 1);
    }
    return 1;
}

static int visit_top(Span key, Cursor *c, void *ctx, int depth) {
    Ahp *m = ctx;
    if (span_is(key, "method")) {
        ws_skip(c);
        if (c->p < c->end && *c->p == '"') return read_string(c, &m->method);
        return 1;
    }
    if (span_is(key, "id")) {
        ws_skip(c);
        m->has_id1 = c->end - c->p >= 1 && c->p[0] == '1' &&
                     (c->end - c->p == 1 || strchr(",} \t\r\n", c->p[1]));
        return 1;
    }
    if (span_is(key, "error")) m->has_error = 1;
    if (span_is(key, "result")) m->has_result = 1;
    if (span_is(key, "params")) {
        ws_skip(c);
        if (c->p < c->end && *c->p == '{') return walk_object(c, visit_params, m, depth + 1);
    }
    return 1;
}

typedef struct {
    long long chars, bytes;
    int has_x;
} Text;

static int hex4(const unsigned char *p, const unsigned char *end, unsigned *out) {
    if (end - p < 4) return -1;
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        unsigned char h = p[i];
        v <<= 4;
        if (h >= '0' && h <= '9') v |= h - '0';
        else if (h >= 'a' && h <= 'f') v |= h - 'a' + 10;
        else if (h >= 'A' && h <= 'F') v |= h - 'A' + 10;
        else return -1;
    }
    *out = v;
    return 0;
}

/* Characters (code points) and UTF-8 bytes of a JSON string once unescaped. */
static void measure_text(Span s, Text *t) {
    const unsigned char *p = s.s, *end = s.s + s.n;
    while (p < end) {
        unsigned char b = *p;
        if (b != '\\') {
            if ((b & 0xC0) != 0x80) t->chars++;
            t->bytes++;
            t->has_x |= b == 'x';
            p++;
            continue;
        }
        if (end - p >= 2 && p[1] == 'u') {
            unsigned cp, lo;
            if (hex4(p + 2, end, &cp)) die("bad \\u escape in a string");
            p += 6;
            if (cp >= 0xD800 && cp < 0xDC00 && end - p >= 6 && p[0] == '\\' && p[1] == 'u' &&
                !hex4(p + 2, end, &lo) && lo >= 0xDC00 && lo < 0xE000) {
                p += 6;
                t->chars++;
                t->bytes += 4;
                continue;
            }
            t->chars++;
            t->bytes += cp < 0x80 ? 1 : cp < 0x800 ? 2 : 3;
            t->has_x |= cp == 'x';
            continue;
        }
        p += 2; /* \n \r \t \" \\ \/ \b \f */
        t->chars++;
        t->bytes++;
    }
}

/* -- dialects ------------------------------------------------------------------------- */

static int dialect;
static const char *channel; /* AHP's terminal URI */
static long long client_seq;

static void json_escape(const char *in, char *out, size_t cap) {
    size_t o = 0;
    for (const unsigned char *p = (const unsigned char *)in; *p; p++) {
        if (o + 7 >= cap) die("string too long");
        if (*p == '"' || *p == '\\') out[o++] = '\\', out[o++] = (char)*p;
        else if (*p < 0x20) o += (size_t)snprintf(out + o, cap - o, "\\u%04x", *p);
        else out[o++] = (char)*p;
    }
    out[o] = 0;
}

/* Characters (code points, counted by their first byte, so a sequence split
 * across messages counts once) and bytes of raw UTF-8 output (ttyd's). */
static void measure_raw(const unsigned char *p, size_t n, Text *t) {
    for (size_t i = 0; i < n; i++) {
        if ((p[i] & 0xC0) != 0x80) t->chars++;
        t->has_x |= p[i] == 'x';
    }
    t->bytes += (long long)n;
}

static void type_text(const char *raw) {
    char frame[8192], json_string_body[4096];
    int n;
    if (dialect == DIALECT_TTYD) {
        size_t len = strlen(raw);
        if (len + 1 > sizeof frame) die("input too long");
        frame[0] = TTYD_INPUT;
        memcpy(frame + 1, raw, len);
        send_frame(OP_BINARY, frame, len + 1);
        return;
    }
    json_escape(raw, json_string_body, sizeof json_string_body);
    if (dialect == DIALECT_AHP) {
        char ch[4096];
        json_escape(channel, ch, sizeof ch);
        n = snprintf(frame, sizeof frame,
                     "{\"jsonrpc\":\"2.0\",\"method\":\"dispatchAction\",\"params\":{\"channel\":"
                     "\"%s\",\"clientSeq\":%lld,\"action\":{\"type\":\"terminal/input\","
                     "\"data\":\"%s\"}}}",
                     ch, ++client_seq, json_string_body);
    } else {
        n = snprintf(frame, sizeof frame, "[\"stdin\",\"%s\"]", json_string_body);
    }
    if (n < 0 || (size_t)n >= sizeof frame) die("input frame too long");
    send_frame(OP_TEXT, frame, (size_t)n);
}

/* The raw (escaped) output text of the last message classify() called output. */
static Span last_data;

/* What one message means: 1 output (text filled), 2 end of output, 0 anything else. */
static int classify(const unsigned char *p, size_t n, Text *text) {
    Cursor c = {p, p + n};
    if (dialect == DIALECT_TTYD) {
        if (n < 1 || p[0] != TTYD_OUTPUT) return 0; /* title, preferences */
        last_data.s = p + 1;
        last_data.n = n - 1;
        measure_raw(p + 1, n - 1, text);
        return 1;
    }
    if (dialect == DIALECT_AHP) {
        Ahp m = {0};
        if (walk_object(&c, visit_top, &m, 0)) die("malformed JSON from the server");
        if (!span_is(m.method, "action") || !m.channel.s) return 0;
        if (m.channel.n != strlen(channel) || memcmp(m.channel.s, channel, m.channel.n)) return 0;
        if (span_is(m.type, "terminal/data") && m.data.s) {
            last_data = m.data;
            measure_text(m.data, text);
            return 1;
        }
        return span_is(m.type, "terminal/exited") ? 2 : 0;
    }
    ws_skip(&c);
    if (c.p >= c.end || *c.p++ != '[') die("terminado sent something else than an array");
    Span kind;
    if (read_string(&c, &kind)) return 0;
    if (span_is(kind, "disconnect")) return 2;
    if (!span_is(kind, "stdout")) return 0;
    ws_skip(&c);
    if (c.p >= c.end || *c.p++ != ',') die("malformed stdout message");
    Span data;
    if (read_string(&c, &data)) die("malformed stdout message");
    last_data = data;
    measure_text(data, text);
    return 1;
}

static void handshake(void) {
    unsigned char *p;
    size_t n;
    if (dialect == DIALECT_AHP) {
        char ch[4096], frame[8192];
        json_escape(channel, ch, sizeof ch);
        int len = snprintf(frame, sizeof frame,
                           "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{"
                           "\"channel\":\"ahp-root://\",\"protocolVersions\":[\"0.5.0\"],"
                           "\"clientId\":\"wsclient-%d\",\"initialSubscriptions\":[\"%s\"]}}",
                           (int)getpid(), ch);
        send_frame(OP_TEXT, frame, (size_t)len);
        for (;;) {
            if (!get_message(&p, &n)) die("closed during initialize (%d)", close_code);
            Cursor c = {p, p + n};
            Ahp m = {0};
            if (walk_object(&c, visit_top, &m, 0)) die("malformed JSON from the server");
            if (!m.has_id1 || m.method.s) continue;
            if (m.has_error) die("initialize failed: %.*s", (int)(n > 300 ? 300 : n), p);
            if (m.has_result) return;
        }
    }
    if (dialect == DIALECT_TTYD) { /* the hello starts the program; preferences follow */
        send_frame(OP_BINARY, TTYD_HELLO, strlen(TTYD_HELLO));
        for (;;) {
            if (!get_message(&p, &n)) die("closed before the preferences (%d)", close_code);
            if (n >= 1 && p[0] == TTYD_PREFERENCES) return;
        }
    }
    for (;;) { /* terminado: ["setup", {}] first */
        if (!get_message(&p, &n)) die("closed before setup (%d)", close_code);
        Cursor c = {p, p + n};
        Span kind;
        ws_skip(&c);
        if (c.p < c.end && *c.p++ == '[' && !read_string(&c, &kind) && span_is(kind, "setup"))
            return;
    }
}

static void close_ws(void) {
    if (close_code) return;
    unsigned char code[2] = {1000 >> 8, 1000 & 0xFF};
    send_frame(OP_CLOSE, code, 2);
    unsigned char *p;
    size_t n;
    while (get_message(&p, &n)) {
    }
}

/* -- modes ---------------------------------------------------------------------------- */

/* Read output until it holds ``ready`` (e.g. a shell's prompt; ASCII, as the JSON
 * string carries it), keeping the last bytes seen so a split across messages counts. */
static void wait_ready(const char *ready) {
    size_t want = strlen(ready);
    char tail[2 * 256 + 1];
    size_t tlen = 0;
    if (want == 0 || want > 256) die("--ready must be 1..256 bytes");
    for (;;) {
        unsigned char *p;
        size_t n;
        Text text = {0};
        if (!get_message(&p, &n)) die("closed while waiting for --ready (%d)", close_code);
        int kind = classify(p, n, &text);
        if (kind == 2) die("the terminal ended before --ready appeared");
        if (kind != 1) continue;
        for (size_t i = 0; i < last_data.n; i++) {
            if (tlen == sizeof tail - 1) {
                memmove(tail, tail + tlen - (want - 1), want - 1);
                tlen = want - 1;
            }
            tail[tlen++] = (char)last_data.s[i];
            if (tlen >= want && memcmp(tail + tlen - want, ready, want) == 0) return;
        }
    }
}

static void run_stream(const char *release, const char *ready, long long expect_chars) {
    long long frames = 0;
    Text text = {0};
    int ended = 0;
    if (ready) wait_ready(ready);
    double cpu = cpu_seconds(), start = now();
    type_text(release);
    unsigned char *p;
    size_t n;
    while (get_message(&p, &n)) {
        frames++;
        int kind = classify(p, n, &text);
        if (kind == 2 || (expect_chars > 0 && text.chars >= expect_chars)) {
            ended = 1;
            break;
        }
    }
    double seconds = now() - start;
    cpu = cpu_seconds() - cpu;
    printf("{\"mode\":\"stream\",\"seconds\":%.6f,\"chars\":%lld,\"bytes\":%lld,"
           "\"frames\":%lld,\"ended\":%s,\"close_code\":%d,\"cpu_seconds\":%.6f}\n",
           seconds, text.chars, text.bytes, frames, ended ? "true" : "false",
           ended ? 0 : close_code, cpu);
    close_ws();
}

static void run_echo(int count, int warmup, double pause) {
    double *samples = calloc((size_t)count, sizeof *samples);
    if (!samples) die("out of memory");
    double cpu = cpu_seconds();
    for (int i = 0; i < warmup + count; i++) {
        if (pause > 0) {
            struct timespec ts = {(time_t)pause, (long)((pause - (double)(time_t)pause) * 1e9)};
            while (nanosleep(&ts, &ts) && errno == EINTR) {
            }
        }
        double start = now();
        type_text("x");
        for (;;) {
            unsigned char *p;
            size_t n;
            Text text = {0};
            if (!get_message(&p, &n)) die("connection closed during echo (%d)", close_code);
            int kind = classify(p, n, &text);
            if (kind == 2) die("the terminal ended during the echo benchmark");
            if (kind == 1 && text.has_x) break;
        }
        if (i >= warmup) samples[i - warmup] = now() - start;
    }
    cpu = cpu_seconds() - cpu;
    printf("{\"mode\":\"echo\",\"pause\":%.6f,\"warmup\":%d,\"cpu_seconds\":%.6f,\"samples\":[",
           pause, warmup, cpu);
    for (int i = 0; i < count; i++) printf("%s%.9f", i ? "," : "", samples[i]);
    printf("]}\n");
    free(samples);
    close_ws();
}

static void usage(void) {
    fprintf(stderr,
            "usage: %s [options] URL stream|echo\n"
            "  --dialect ahp|terminado|ttyd (default ahp; ahp needs --channel URI)\n"
            "  --channel URI             the AHP terminal to follow\n"
            "  --expect-chars N          stream, ttyd: the output ends after N characters\n"
            "  --release TEXT            stream: what is typed to start the output (default CR)\n"
            "  --ready TEXT              stream: first wait for output holding TEXT (a prompt)\n"
            "  --count N --warmup N      echo: measured and unmeasured keystrokes (300, 20)\n"
            "  --pause S                 echo: idle seconds before each keystroke (0)\n"
            "  --timeout S               seconds without a byte from the server (60)\n",
            program);
    exit(2);
}

int main(int argc, char **argv) {
    program = argv[0];
    static const struct option options[] = {
        {"dialect", required_argument, 0, 'd'}, {"channel", required_argument, 0, 'c'},
        {"release", required_argument, 0, 'r'}, {"count", required_argument, 0, 'n'},
        {"warmup", required_argument, 0, 'w'},  {"pause", required_argument, 0, 'p'},
        {"timeout", required_argument, 0, 't'}, {"ready", required_argument, 0, 'y'},
        {"expect-chars", required_argument, 0, 'e'}, {0, 0, 0, 0},
    };
    int count = 300, warmup = 20, opt;
    long long expect_chars = 0;
    double pause = 0, timeout = 60;
    const char *release = "\r", *ready = NULL;
    dialect = DIALECT_AHP;
    while ((opt = getopt_long(argc, argv, "", options, NULL)) != -1) {
        switch (opt) {
        case 'd':
            if (strcmp(optarg, "ahp") == 0) dialect = DIALECT_AHP;
            else if (strcmp(optarg, "terminado") == 0) dialect = DIALECT_TERMINADO;
            else if (strcmp(optarg, "ttyd") == 0) dialect = DIALECT_TTYD;
            else usage();
            break;
        case 'c': channel = optarg; break;
        case 'r': release = optarg; break;
        case 'y': ready = optarg; break;
        case 'n': count = atoi(optarg); break;
        case 'w': warmup = atoi(optarg); break;
        case 'p': pause = atof(optarg); break;
        case 't': timeout = atof(optarg); break;
        case 'e': expect_chars = atoll(optarg); break;
        default: usage();
        }
    }
    if (argc - optind != 2) usage();
    const char *url = argv[optind], *mode = argv[optind + 1];
    int echo = strcmp(mode, "echo") == 0;
    if (!echo && strcmp(mode, "stream") != 0) usage();
    if (dialect == DIALECT_AHP && !channel) die("the ahp dialect needs --channel");
    if (count < 1 || warmup < 0 || count + warmup > MAX_ECHO || pause < 0 || pause > 60)
        die("--count 1.., --warmup 0.., count + warmup <= %d, --pause 0..60", MAX_ECHO);
    if (timeout <= 0) die("--timeout must be positive");
    if (expect_chars < 0 || (expect_chars > 0 && dialect != DIALECT_TTYD))
        die("--expect-chars N: N >= 0, with --dialect ttyd only");
    struct timespec seed;
    clock_gettime(CLOCK_REALTIME, &seed);
    rng = (uint64_t)seed.tv_nsec * 6364136223846793005ULL ^ (uint64_t)getpid() ^
          0x9E3779B97F4A7C15ULL;
    if (!rng) rng = 1;

    connect_ws(url, timeout, dialect == DIALECT_TTYD ? "tty" : NULL);
    handshake();
    if (echo) {
        run_echo(count, warmup, pause);
    } else {
        run_stream(release, ready, expect_chars);
    }
    fflush(stdout);
    close(sock);
    return 0;
}
