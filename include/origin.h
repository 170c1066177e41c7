/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * origin: where and how to ask the origin for an object (the request's host, Host header, path,
 * User-Agent, X-LanCache-Processed-By chain and the other end-to-end fields a fill forwards). Made
 * by the client path from a request, kept by the cache while a disk lookup may still turn into a
 * fill, and used by the fill (fetch) to build its upstream requests. Pure data: no I/O.
 */
#ifndef CACHEPARTY_ORIGIN_H
#define CACHEPARTY_ORIGIN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The strings are borrowed; whoever keeps one past the call copies it (origin_req_dup). */
struct origin_req {
    const char *host; /* name to resolve, or an IP literal */
    bool host_is_ip;
    uint16_t port;
    const char *authority; /* Host header value */
    const char *path;      /* path and query, as forwarded */
    size_t path_len;
    const char *user_agent; /* may be NULL */
    size_t ua_len;
    const char *processed_by; /* the client's X-LanCache-Processed-By chain, may be NULL */
    size_t processed_by_len;
    const char *fields; /* the client's fields a fill forwards (fwd_fill_fields: "Name: value\r\n"
                           lines, at most FWD_FILL_FIELDS_MAX bytes), may be NULL */
    size_t fields_len;
    bool hide_etag; /* a hide_etag rule (config.h): the ETag is not stored, nor compared */
    bool from_peer; /* a cluster peer's request (peers.h): its fills go to the origin, never to
                       another node, whoever owns the chunks */
};

/* A copy of <o> in one allocation (strings NUL-terminated): free() it. */
struct origin_req *origin_req_dup(const struct origin_req *o);

#endif
