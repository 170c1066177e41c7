/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * admit: host admission and the cache identifier. See admit.h for the rules and the kinds.
 */
#include "admit.h"

#include <string.h>

#include "config.h"
#include "domains.h"
#include "util.h"

static const char *const reason_names[] = {
#define ADMIT_RX(r, name) name,
    ADMIT_REASONS(ADMIT_RX)
#undef ADMIT_RX
};

const char *admit_reason_name(enum admit_reason reason)
{
    ASSERT((size_t)reason < ARRAY_SIZE(reason_names));
    return reason_names[reason];
}

void admit_host(const struct config *cfg, const struct domains *d, const struct h1_authority *auth,
                const char *user_agent, size_t ua_len, enum admit_kind kind,
                struct admit_result *out)
{
    out->allow = false;
    out->ident = NULL;
    out->own[0] = '\0';
    if (kind == ADMIT_TLS) {
        user_agent = NULL; /* a ClientHello has none: the Steam rule never applies */
        ua_len = 0;
    }
    if (auth->is_ip && !cfg->allow_private) {
        out->reason = ADMIT_R_IP_LITERAL;
        return;
    }
    out->ident = domains_cache_identifier(d, auth->host, auth->ident, user_agent, ua_len,
                                          cfg->steam_user_agent, cfg->allow_unlisted, out->own,
                                          sizeof(out->own));
    out->allow = out->ident != NULL;
    out->reason = out->allow ? ADMIT_R_OK : ADMIT_R_UNLISTED;
}
