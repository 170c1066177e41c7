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

/*
 * The host names Steam fetches content from (steam_user_agent = yes), with where each was seen.
 * The cache key has no host, so every entry is a trust decision: a client that sends the Steam
 * User-Agent to one of these names stores bytes under Steam's paths for every Steam client. Only
 * exact names that carry Steam content alone, and wildcards under domains Valve owns
 * (steamcontent.com, steampowered.com, steamstatic.com), are here; never a wildcard under a CDN
 * domain shared with other customers (hwcdn.net, akamaized.net, akamaihd.net, edgesuite.net,
 * cqloud.com, qtlglb.com...). Sources: [L] uklans/cache-domains steam.txt (the list lancache
 * redirects for Steam), [S] a Steam content server list quoted in uklans/cache-domains pull
 * request #48, [M] monolithic logs of Steam's LANCache mode (lancachenet/monolithic #143 and pull
 * request #87). The [L] wildcards under shared CDN domains (*.hsar.steampowered.com.edgesuite.net,
 * *.steam-content-dnld-1.*.cqloud.com) are left out on purpose: a user may add them (steam_hosts).
 */
static const char *const steam_builtin[] = {
    "*.steamcontent.com",         /* [L][M] cacheNN-xxxN., lancache., *.cdn.steampipe. */
    "*.content.steampowered.com", /* [L] */
    "content1.steampowered.com",  /* [L] content1..8 */
    "content2.steampowered.com",
    "content3.steampowered.com",
    "content4.steampowered.com",
    "content5.steampowered.com",
    "content6.steampowered.com",
    "content7.steampowered.com",
    "content8.steampowered.com",
    "cs.steampowered.com",                       /* [L] */
    "*.cs.steampowered.com",                     /* [L] */
    "client-download.steampowered.com",          /* [L] */
    "content-origin.steampowered.com",           /* [L] */
    "*.akamai.steamstatic.com",                  /* [L] */
    "edgecast.steamstatic.com",                  /* [L] */
    "*.edgecast.steamstatic.com",                /* [L] */
    "clientconfig.akamai.steamtransparent.com",  /* [L] */
    "cdn1-sea1.valve.net",                       /* [L] */
    "cdn2-sea1.valve.net",                       /* [L] */
    "162-254-198-14.valve.net",                  /* [L] */
    "162-254-198-17.valve.net",                  /* [L] */
    "162-254-198-18.valve.net",                  /* [L] */
    "162-254-198-78.valve.net",                  /* [L] */
    "162-254-198-131.valve.net",                 /* [L] */
    "steampipe.akamaized.net",                   /* [L][S] Akamai, Valve's name */
    "steampipe-kr.akamaized.net",                /* [L] */
    "steamcdn-a.akamaihd.net",                   /* [L] */
    "f3b7q2p3.ssl.hwcdn.net",                    /* [M] Highwinds, Valve's name */
    "steam.cdn.on.net",                          /* [L][S] Internode's Steam mirror */
    "steam.ix.asn.au",                           /* [L][S] */
    "steam.apac.qtlglb.com",                     /* [L] Qwilt */
    "steam.naeu.qtlglb.com",                     /* [L] */
    "steam.eca.qtlglb.com",                      /* [L] */
    "steam.apac.qtlglb.com.mwcloudcdn.com",      /* [L] */
    "edge.steam-dns.top.comcast.net",            /* [L] Comcast's Steam caches */
    "edge.steam-dns-2.top.comcast.net",          /* [L] */
    "st.dl.bscstorage.net",                      /* [L] */
    "cdn.mileweb.cs.steampowered.com.8686c.com", /* [L] */
    "update1.dota2.wmsj.cn",                     /* [L] Perfect World (Steam China) */
    "update2.dota2.wmsj.cn",
    "update3.dota2.wmsj.cn",
    "update4.dota2.wmsj.cn",
    "update5.dota2.wmsj.cn",
    "update6.dota2.wmsj.cn",
    "update1.csgo.wmsj.cn",
    "update2.csgo.wmsj.cn",
    "update3.csgo.wmsj.cn",
    "update4.csgo.wmsj.cn",
    "update5.csgo.wmsj.cn",
    "update6.csgo.wmsj.cn",
};

size_t admit_steam_builtin(const char *const **names)
{
    *names = steam_builtin;
    return ARRAY_SIZE(steam_builtin);
}

bool admit_is_steam_host(const struct config *cfg, const char *host)
{
    if (host == NULL || host[0] == '\0')
        return false;
    for (size_t i = 0; i < ARRAY_SIZE(steam_builtin); i++)
        if (util_host_pattern_match(steam_builtin[i], host))
            return true;
    for (size_t i = 0; i < cfg->n_steam_hosts; i++)
        if (util_host_pattern_match(cfg->steam_hosts[i], host))
            return true;
    return false;
}

/* Whether <user_agent>[0..ua_len) contains the Steam client's agent (anywhere, case-sensitive,
 * as lancache's map matches it). */
static bool is_steam_agent(const char *user_agent, size_t ua_len)
{
    return user_agent != NULL &&
           memmem(user_agent, ua_len, DOMAINS_STEAM_UA, sizeof(DOMAINS_STEAM_UA) - 1) != NULL;
}

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
    bool steam = cfg->steam_user_agent != CFG_STEAM_UA_NO && is_steam_agent(user_agent, ua_len);
    if (steam && cfg->steam_user_agent == CFG_STEAM_UA_ANY) {
        out->ident = DOMAINS_STEAM_ID; /* lancache's map: the agent first, whatever the host */
    } else {
        out->ident = domains_match(d, auth->host);
        if (out->ident == NULL && steam && admit_is_steam_host(cfg, auth->host))
            out->ident = DOMAINS_STEAM_ID;
        if (out->ident == NULL)
            out->ident = domains_cache_identifier(d, auth->ident, cfg->allow_unlisted, out->own,
                                                  sizeof(out->own));
    }
    out->allow = out->ident != NULL;
    out->reason = out->allow ? ADMIT_R_OK : ADMIT_R_UNLISTED;
}
