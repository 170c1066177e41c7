/* SPDX-License-Identifier: BSD-2-Clause */
/* origin: see origin.h. */
#include "origin.h"

#include <stdlib.h>
#include <string.h>

#include "util.h"

struct origin_req *origin_req_dup(const struct origin_req *o)
{
    size_t host_len = strlen(o->host) + 1, auth_len = strlen(o->authority) + 1;
    size_t ua_len = o->user_agent != NULL ? o->ua_len + 1 : 0;
    size_t pb_len = o->processed_by != NULL ? o->processed_by_len + 1 : 0;
    size_t fl_len = o->fields != NULL ? o->fields_len + 1 : 0;
    struct origin_req *d =
        xmalloc(sizeof(*d) + host_len + auth_len + o->path_len + 1 + ua_len + pb_len + fl_len);
    char *p = (char *)(d + 1);
    *d = *o;
    d->host = memcpy(p, o->host, host_len);
    p += host_len;
    d->authority = memcpy(p, o->authority, auth_len);
    p += auth_len;
    memcpy(p, o->path, o->path_len);
    p[o->path_len] = '\0';
    d->path = p;
    p += o->path_len + 1;
    if (o->user_agent != NULL) {
        memcpy(p, o->user_agent, o->ua_len);
        p[o->ua_len] = '\0';
        d->user_agent = p;
        p += ua_len;
    }
    if (o->processed_by != NULL) {
        memcpy(p, o->processed_by, o->processed_by_len);
        p[o->processed_by_len] = '\0';
        d->processed_by = p;
        p += pb_len;
    }
    if (o->fields != NULL) {
        memcpy(p, o->fields, o->fields_len);
        p[o->fields_len] = '\0';
        d->fields = p;
    }
    return d;
}
