/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * libFuzzer target: an origin's response head (h1_resp_parse), the client head built from it
 * (fwd_response_head), and the chunked decoder over the bytes after the head. The first input
 * byte picks the request method and how the body bytes are split into reads; the decoder must
 * give the same body and the same verdict whatever the split, never hand out more than the
 * input, and the client head must be well formed.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "forward.h"
#include "http1.h"
#include "util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/*
 * Decodes in[0..len) fed in pieces of <step> bytes (0: all at once), taking at most <take> body
 * bytes per call when non-zero. Returns -1 on a framing error, else 1 when done, 0 when more input
 * was needed; the body goes to <body> (bounded by <cap>), its length to *blen.
 */
static int decode(const uint8_t *in, size_t len, size_t step, size_t take, uint8_t *body,
                  size_t cap, size_t *blen)
{
    struct h1_chunked c;
    size_t pos = 0, have = 0;

    h1_chunked_init(&c);
    *blen = 0;
    while (!c.done) {
        size_t fr, av, lim;

        if (step == 0)
            have = len;
        else if (have == pos && have < len)
            have = have + step < len ? have + step : len;
        if (h1_chunked_parse(&c, (const char *)in + pos, have - pos, &fr, &av) < 0)
            return -1;
        ASSERT(fr + av <= have - pos);
        pos += fr;
        if (av > 0) {
            lim = take != 0 && av > take ? take : av;
            ASSERT(*blen + lim <= cap);
            memcpy(body + *blen, in + pos, lim);
            *blen += lim;
            h1_chunked_take(&c, lim);
            pos += lim;
        } else if (!c.done && fr == 0 && have == len) {
            return 0;
        }
    }
    return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct h1_resp resp;
    static char out[80 * 1024];
    static uint8_t b1[1 << 20], b2[1 << 20];
    enum fwd_body fb;

    if (size < 1 || size > sizeof(b1))
        return 0;
    uint8_t ctl = data[0];
    const char *buf = (const char *)data + 1;
    size_t len = size - 1;
    enum h1_method method = (ctl & 1) ? H1_M_HEAD : H1_M_GET;
    ssize_t n = h1_resp_parse(buf, len, method, &resp);

    if (n == 0) {
        ASSERT(len < H1_MAX_RESP_HEAD);
    } else if (n < 0) {
        ASSERT(n == -EPROTO || n == -E2BIG);
    } else {
        ASSERT((size_t)n <= len);
        ASSERT(resp.status >= 100 && resp.status <= 599 && resp.status != 101);
        ASSERT(resp.n_fields <= H1_MAX_FIELDS);
        for (unsigned i = 0; i < resp.n_fields; i++) {
            ASSERT((size_t)resp.fields[i].name.off + resp.fields[i].name.len <= (size_t)n);
            ASSERT((size_t)resp.fields[i].value.off + resp.fields[i].value.len <= (size_t)n);
        }
        if (resp.framing == H1_BODY_CLOSE)
            ASSERT(!resp.keep_alive);
        if (method == H1_M_HEAD)
            ASSERT(resp.framing == H1_BODY_NONE);
        struct fwd_resp_opts o = {.hostname = "cp-fuzz",
                                  .cache_status = "MISS",
                                  .client_minor = (ctl >> 1) & 1,
                                  .head_req = method == H1_M_HEAD,
                                  .keep_alive = (ctl >> 2) & 1,
                                  .date = ctl & 8 ? "Sun, 06 Nov 1994 08:49:37 GMT" : NULL};
        size_t m = fwd_response_head(buf, &resp, &o, &fb, out, sizeof(out));
        if (m > 0) {
            ASSERT(m >= 4 && memcmp(out + m - 4, "\r\n\r\n", 4) == 0);
            ASSERT(memmem(out, m, "\r\n\r\n", 4) == out + m - 4);
            for (size_t i = 0; i < m; i++)
                if (out[i] == '\n')
                    ASSERT(i > 0 && out[i - 1] == '\r');
        }
    }

    /* The chunked decoder over whatever follows the head (or the whole input if none). */
    size_t off = n > 0 ? (size_t)n : 0;
    const uint8_t *body = (const uint8_t *)buf + off;
    size_t blen = len - off, l1, l2;
    int r1 = decode(body, blen, 0, 0, b1, sizeof(b1), &l1);
    int r2 = decode(body, blen, 1 + (ctl >> 3), 1 + (ctl >> 5), b2, sizeof(b2), &l2);
    ASSERT(r1 == r2);
    if (r1 >= 0) {
        ASSERT(l1 == l2);
        ASSERT(memcmp(b1, b2, l1) == 0);
    }
    return 0;
}
