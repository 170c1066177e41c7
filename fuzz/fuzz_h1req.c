/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * libFuzzer target: request heads (http1's strict pre-validation over http-parser), then what
 * the daemon does with an accepted head: the authority, loop detection and the upstream request.
 * Invariants checked beyond "no crash, no sanitizer report": a head length within the input,
 * every span inside the head, no prefix of an accepted head refused, an upstream request that
 * never carries a CR or LF outside its line ends, and fill fields that are whole lines of
 * fields a fill may forward, within their bound.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "forward.h"
#include "http1.h"
#include "util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void span_ok(struct h1_span s, ssize_t n)
{
    ASSERT((size_t)s.off + s.len <= (size_t)n);
}

static void check_upstream_head(const char *out, size_t n)
{
    /* Every line ends in CRLF; no bare CR or LF can be smuggled from the client's bytes. */
    for (size_t i = 0; i < n; i++) {
        if (out[i] == '\r')
            ASSERT(i + 1 < n && out[i + 1] == '\n');
        if (out[i] == '\n')
            ASSERT(i > 0 && out[i - 1] == '\r');
    }
    ASSERT(n >= 4 && memcmp(out + n - 4, "\r\n\r\n", 4) == 0);
    ASSERT(memmem(out, n, "\r\n\r\n", 4) == out + n - 4);
}

/* fwd_fill_fields: "Name: value" CRLF lines only, each name one a fill forwards. */
static void check_fill_fields(const char *out, size_t n)
{
    size_t i = 0;
    while (i < n) {
        const char *eol = memmem(out + i, n - i, "\r\n", 2);
        ASSERT(eol != NULL);
        size_t len = (size_t)(eol - (out + i));
        const char *colon = memchr(out + i, ':', len);
        ASSERT(colon != NULL && colon > out + i);
        ASSERT(fwd_fill_forwards(out + i, (size_t)(colon - (out + i))));
        ASSERT(memchr(out + i, '\r', len) == NULL && memchr(out + i, '\n', len) == NULL);
        i += len + 2;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct h1_req req;
    static char out[64 * 1024];
    const char *why = NULL;
    const char *buf = (const char *)data;
    ssize_t n = h1_req_parse(buf, size, &req, &why);

    if (n == 0) {
        ASSERT(size < H1_MAX_HEAD);
        return 0;
    }
    if (n < 0) {
        ASSERT(n == -400 || n == -414 || n == -431 || n == -505);
        ASSERT(why != NULL);
        return 0;
    }
    ASSERT((size_t)n <= size);
    span_ok(req.method_s, n);
    span_ok(req.target, n);
    span_ok(req.path, n);
    span_ok(req.path_only, n);
    span_ok(req.authority, n);
    ASSERT(req.n_fields <= H1_MAX_FIELDS);
    for (unsigned i = 0; i < req.n_fields; i++) {
        span_ok(req.fields[i].name, n);
        span_ok(req.fields[i].value, n);
    }
    ASSERT(req.version_minor == 0 || req.version_minor == 1);
    /* (the heartbeat is answered whatever its body, as lancache does: h1_is_heartbeat) */
    if ((req.method == H1_M_GET || req.method == H1_M_HEAD) && !h1_is_heartbeat(buf, &req))
        ASSERT(!req.has_body && !req.has_te);

    /* Incremental arrival: a prefix of an accepted head is "incomplete", never an error. */
    for (size_t cut = 1; cut < (size_t)n; cut += 1 + (size_t)n / 16) {
        static struct h1_req pre;
        ASSERT(h1_req_parse(buf, cut, &pre, &why) == 0);
    }

    struct h1_authority auth;
    if (req.method == H1_M_CONNECT || req.authority.len == 0 ||
        h1_authority_parse(buf + req.authority.off, req.authority.len, &auth) != 0)
        return 0;
    ASSERT(auth.port != 0);
    ASSERT(strlen(auth.host) > 0 && strlen(auth.host) < sizeof(auth.host));
    (void)fwd_is_loop(buf, &req, "cp-fuzz");
    struct fwd_req_opts o = {"cp-fuzz", true, true};
    size_t m = fwd_request_head(buf, &req, &auth, &o, out, sizeof(out));
    if (m > 0)
        check_upstream_head(out, m);
    unsigned dropped;
    size_t k = fwd_fill_fields(buf, &req, out, FWD_FILL_FIELDS_MAX, &dropped);
    ASSERT(k <= FWD_FILL_FIELDS_MAX && dropped <= req.n_fields);
    check_fill_fields(out, k);
    return 0;
}
