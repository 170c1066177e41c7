/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * main: command line, publishing the configuration snapshot (g_cfg and g_domains, see config.h),
 * signals, wiring the modules in order, graceful shutdown. No logic another module could own and
 * test.
 *
 * Start order: config -> log -> loop -> override addresses -> resolver -> upool -> conn -> server
 * -> TLS relay (its log, then its listeners) -> READY=1. Stop order is the reverse. SIGTERM/SIGINT:
 * stop accepting, let responses in flight finish (bounded by shutdown_timeout), exit 0. SIGHUP:
 * reload (a bad file is refused, settings that cannot change live are logged and kept). SIGUSR1:
 * reopen the error log.
 */
#include <errno.h>
#include <limits.h>
#include <netdb.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <ev.h>

#include "access.h"
#include "admin.h"
#include "answer.h"
#include "cache.h"
#include "config.h"
#include "conn.h"
#include "domains.h"
#include "fetch.h"
#include "lcenv.h"
#include "lcimport.h"
#include "live.h"
#include "log.h"
#include "peers.h"
#include "resolver.h"
#include "server.h"
#include "stats.h"
#include "tlsrelay.h"
#include "upool.h"
#include "upstream.h"
#include "util.h"

#ifndef CACHEPARTY_VERSION
#define CACHEPARTY_VERSION "0.1.0"
#endif

/* Every snapshot ever published, freed at exit: a reload never frees one that a callback up the
 * stack may still read. Reloads are rare, so this stays small. */
static struct config **snapshots;
static size_t n_snapshots;
/* Likewise every cache-domains list set loaded (identifiers borrowed by requests in flight). */
static struct domains **domain_sets;
static size_t n_domain_sets;

static struct conn_ctx ctx;
static struct fetch_ctx fctx;
static struct admin_ctx actx;
static struct tlsrelay_ctx tctx;
static bool tls_on; /* passthrough_listen configured: the relay runs */
static ev_signal sig_term, sig_int, sig_hup, sig_usr1;
static ev_timer shutdown_timer;
static ev_prepare flush_logs; /* writes buffered access log lines once per loop iteration */
static bool shutting_down;

static void usage(FILE *fp)
{
    fprintf(fp,
            "usage: cacheparty [-c FILE] [-t] [-V] [-h]\n"
            "       cacheparty [-c FILE] dns --ip ADDR [--ip ADDR...] [--service-ip NAME=ADDR...]\n"
            "                  [--skip NAME...] [--format dnsmasq|unbound|hosts|rpz]\n"
            "       cacheparty [-c FILE] import DIR [--dry-run] [--copy] [--jobs N]\n"
            "       cacheparty config --from-lancache FILE\n"
            "  -c FILE  configuration file (default %s)\n"
            "  -t       check the configuration, print a summary and exit\n"
            "  -V       print the version and exit\n"
            "  -h       this help\n"
            "  dns      print DNS overrides pointing the cache-domains lists at the cache\n"
            "  import   move (or copy) a lancache cache tree into the cache dirs\n"
            "  config   print the INI equivalent to a lancache .env or docker-compose file\n",
            CONFIG_DEFAULT_PATH);
}

/* Loads the lists named by <cfg> (NULL when none are configured). Returns -1 with <err> set. */
static int load_domains(const struct config *cfg, struct domains **out, char *err, size_t errlen)
{
    *out = NULL;
    if (cfg->cache_domains == NULL)
        return 0;
    *out = domains_load(cfg->cache_domains, err, errlen);
    return *out == NULL ? -1 : 0;
}

#define DNS_SERVICES_MAX 64

/* The entry of <svc> for service <name> in <o> (added when new), or NULL when full. */
static struct domains_dns_service *dns_service(struct domains_dns_service *svc, size_t *n,
                                               const char *name)
{
    for (size_t i = 0; i < *n; i++)
        if (strcasecmp(svc[i].name, name) == 0)
            return &svc[i];
    if (*n == DNS_SERVICES_MAX)
        return NULL;
    memset(&svc[*n], 0, sizeof(svc[*n]));
    svc[*n].name = name;
    return &svc[(*n)++];
}

/*
 * `cacheparty dns --ip ADDR [--ip ADDR...] [--service-ip NAME=ADDR...] [--skip NAME...]
 * [--format F]`: argv starts after "dns". --service-ip gives a service its own addresses,
 * --skip leaves it out (lancache-dns's <SERVICE>CACHE_IP and DISABLE_<SERVICE>).
 */
static int cmd_dns(const struct config *cfg, int argc, char **argv)
{
    const char *ip[16];
    size_t n_ip = 0;
    static struct domains_dns_service svc[DNS_SERVICES_MAX];
    size_t n_svc = 0;
    enum domains_dns_format fmt = DOMAINS_DNS_DNSMASQ;
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--ip") == 0 && i + 1 < argc) {
            if (n_ip == ARRAY_SIZE(ip)) {
                fprintf(stderr, "cacheparty dns: at most %zu --ip\n", ARRAY_SIZE(ip));
                return 1;
            }
            ip[n_ip++] = argv[++i];
        } else if ((strcmp(argv[i], "--service-ip") == 0 || strcmp(argv[i], "--skip") == 0) &&
                   i + 1 < argc) {
            bool skip = argv[i][2] == 's' && argv[i][3] == 'k';
            char *arg = argv[++i];
            char *eq = skip ? NULL : strchr(arg, '=');
            if (!skip && (eq == NULL || eq == arg || eq[1] == '\0')) {
                fprintf(stderr, "cacheparty dns: --service-ip takes NAME=ADDR, not '%s'\n", arg);
                return 1;
            }
            if (eq != NULL)
                *eq = '\0';
            struct domains_dns_service *s = dns_service(svc, &n_svc, arg);
            if (s == NULL || (!skip && s->n_ip == ARRAY_SIZE(s->ip))) {
                fprintf(stderr, "cacheparty dns: too many --service-ip or --skip\n");
                return 1;
            }
            if (skip ? s->n_ip > 0 : s->skip) {
                fprintf(stderr, "cacheparty dns: %s has both --skip and --service-ip\n", arg);
                return 1;
            }
            if (skip)
                s->skip = true;
            else
                s->ip[s->n_ip++] = eq + 1;
        } else if (strcmp(argv[i], "--format") == 0 && i + 1 < argc) {
            if (domains_dns_format_parse(argv[++i], &fmt) < 0) {
                fprintf(stderr, "cacheparty dns: unknown format '%s'\n", argv[i]);
                return 1;
            }
        } else {
            fprintf(stderr, "cacheparty dns: unexpected argument '%s'\n", argv[i]);
            usage(stderr);
            return 1;
        }
    }
    if (n_ip == 0) {
        fprintf(stderr, "cacheparty dns: --ip ADDR is required\n");
        return 1;
    }
    if (cfg->cache_domains == NULL) {
        fprintf(stderr, "cacheparty dns: %s sets no [domains] cache_domains: nothing to export\n",
                cfg->path);
        return 1;
    }
    char err[512];
    struct domains *d = NULL;
    if (load_domains(cfg, &d, err, sizeof(err)) < 0) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    struct domains_dns_opts o = {ip, n_ip, svc, n_svc, fmt};
    int rc = domains_dns_export_opts(d, &o, stdout);
    domains_free(&d);
    if (rc == -EINVAL) {
        fprintf(stderr, "cacheparty dns: not a usable IPv4 or IPv6 address among:");
        for (size_t i = 0; i < n_ip; i++)
            fprintf(stderr, " '%s'", ip[i]);
        for (size_t i = 0; i < n_svc; i++)
            for (size_t k = 0; k < svc[i].n_ip; k++)
                fprintf(stderr, " '%s'", svc[i].ip[k]);
        fprintf(stderr, "\n");
        return 1;
    }
    if (rc == -ESRCH) {
        fprintf(stderr, "cacheparty dns: a --service-ip or --skip names no service of %s:",
                cfg->cache_domains);
        for (size_t i = 0; i < n_svc; i++)
            fprintf(stderr, " %s", svc[i].name);
        fprintf(stderr, "\n");
        return 1;
    }
    if (rc < 0 || fflush(stdout) != 0) {
        fprintf(stderr, "cacheparty dns: write failed\n");
        return 1;
    }
    return 0;
}

/* Publishes <cfg> and <d> (NULL: no lists) as the running snapshot; both live until exit. */
static void publish(struct config *cfg, struct domains *d)
{
    snapshots = xrealloc(snapshots, (n_snapshots + 1) * sizeof(*snapshots));
    snapshots[n_snapshots++] = cfg;
    if (d != NULL) {
        domain_sets = xrealloc(domain_sets, (n_domain_sets + 1) * sizeof(*domain_sets));
        domain_sets[n_domain_sets++] = d;
    }
    g_cfg = cfg;
    g_domains = d;
    g_log_level = (int)cfg->level;
}

/* systemd's notify protocol, spoken directly (no libsystemd). */
static void sd_notify_send(const char *msg)
{
    const char *path = getenv("NOTIFY_SOCKET");
    if (path == NULL || path[0] == '\0')
        return;
    struct sockaddr_un sa;
    memset(&sa, 0, sizeof(sa));
    sa.sun_family = AF_UNIX;
    size_t len = strlen(path);
    if (len >= sizeof(sa.sun_path) || (path[0] != '/' && path[0] != '@'))
        return;
    memcpy(sa.sun_path, path, len);
    if (path[0] == '@')
        sa.sun_path[0] = '\0';
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return;
    socklen_t salen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + len);
    if (sendto(fd, msg, strlen(msg), MSG_NOSIGNAL, (struct sockaddr *)&sa, salen) < 0)
        log_warn("sd_notify: %s", strerror(errno));
    close(fd);
}

static int resolve_override(const struct cfg_hostport *hp, struct sockaddr_storage *out)
{
    struct addrinfo hints, *res = NULL;
    char port[8];
    memset(&hints, 0, sizeof(hints));
    hints.ai_socktype = SOCK_STREAM;
    snprintf(port, sizeof(port), "%u", hp->port);
    int rc = getaddrinfo(hp->host, port, &hints, &res);
    if (rc != 0 || res == NULL) {
        fprintf(stderr, "cacheparty: override %s: %s\n", hp->host, gai_strerror(rc));
        return -1;
    }
    memset(out, 0, sizeof(*out));
    memcpy(out, res->ai_addr, res->ai_addrlen);
    freeaddrinfo(res);
    return 0;
}

/* The gauges read from their owners when the counters are exported (/metrics, /status). */
static void read_gauges(struct stats *st, void *arg)
{
    struct cache_stats cs;

    (void)arg;
    memset(&cs, 0, sizeof(cs));
    if (ctx.cache != NULL)
        cache_get_stats(ctx.cache, &cs);
    st->cache_mem_bytes = cs.mem_bytes;
    st->cache_mem_chunks = cs.mem_chunks;
    st->fresh_answers = cs.answers;
    st->domains_lines_skipped = g_domains != NULL ? domains_skipped_lines(g_domains, NULL) : 0;
    st->fresh_answer_bytes = cs.answer_bytes;
    st->cache_dirs_down = cs.shards_down;
    st->cache_io_pending = cs.io_pending;
    st->cache_disk_bytes = cs.disk_bytes;
    st->cache_disk_chunks = cs.disk_chunks;
    st->cache_disk_evictions = cs.disk_evictions;
    st->cache_mem_limit = cs.mem_limit;
    st->cache_disk_limit = cs.disk_limit;
    st->cache_disk_free = cs.disk_free;
    st->cache_disk_fs = cs.disk_fs_bytes;
    st->fetches_inflight = fetch_live();
    st->conn_http = conn_count();
    st->conn_tls = tlsrelay_count();
    st->conn_admin = admin_conn_count();
}

static void stop_loop_if_drained(void)
{
    if (shutting_down && server_conn_count() == 0)
        ev_break(ctx.loop, EVBREAK_ALL);
}

static void on_conn_closed(void)
{
    server_conn_closed();
    stop_loop_if_drained();
}

static void on_shutdown_timeout(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)w;
    (void)revents;
    log_warn("shutdown_timeout reached with %u connections open: closing them",
             server_conn_count());
    ev_break(loop, EVBREAK_ALL);
}

static void on_stop_signal(struct ev_loop *loop, ev_signal *w, int revents)
{
    (void)revents;
    if (shutting_down) {
        log_warn("second signal %d: stopping now", w->signum);
        ev_break(loop, EVBREAK_ALL);
        return;
    }
    log_info("signal %d: draining %u connections (at most %llu ms)", w->signum, server_conn_count(),
             (unsigned long long)g_cfg->shutdown_timeout_ms);
    shutting_down = true;
    sd_notify_send("STOPPING=1");
    server_stop();
    admin_stop();
    peers_stop();
    upool_drain(ctx.upool);
    conn_drain_all();
    tlsrelay_drain();
    ev_timer_init(&shutdown_timer, on_shutdown_timeout, (double)g_cfg->shutdown_timeout_ms / 1000.0,
                  0.);
    ev_timer_start(loop, &shutdown_timer);
    stop_loop_if_drained();
}

static void log_kept(const char *section, const char *name, const char *why, void *arg)
{
    (void)arg;
    log_warn("reload: [%s] %s %s", section, name, why);
}

static void on_hup(struct ev_loop *loop, ev_signal *w, int revents)
{
    (void)loop;
    (void)w;
    (void)revents;
    struct config *n = NULL;
    char err[512];
    if (config_load(g_cfg->path, &n, err, sizeof(err)) < 0) {
        log_err("reload refused, keeping the running configuration: %s", err);
        return;
    }
    (void)config_keep_fixed(n, g_cfg, log_kept, NULL);
    if (config_check_kept(n, err, sizeof(err)) < 0) {
        log_err("reload refused, keeping the running configuration: %s: %s", g_cfg->path, err);
        config_free(&n);
        return;
    }
    struct domains *d = NULL;
    if (load_domains(n, &d, err, sizeof(err)) < 0) {
        log_err("reload refused, keeping the running configuration: %s", err);
        config_free(&n);
        return;
    }
    bool log_changed =
        strcmp(n->error_log ? n->error_log : "-", g_cfg->error_log ? g_cfg->error_log : "-") != 0;
    bool access_changed = strcmp(n->access_log ? n->access_log : "",
                                 g_cfg->access_log ? g_cfg->access_log : "") != 0 ||
                          n->access_format != g_cfg->access_format;
    publish(n, d);
    cache_reconfigure(ctx.cache, n);
    if (log_changed)
        log_open(n->error_log);
    else
        log_reopen();
    if (access_changed)
        access_open(n->access_log, n->access_format);
    else
        access_reopen();
    int trc = tls_on ? tlsrelay_reconfigure(n) : 0;
    if (trc < 0)
        log_err("cannot open the TLS access log %s: %s (the previous one is kept)", n->tls_access,
                strerror(-trc));
    log_info("configuration reloaded from %s", n->path);
}

static void on_flush_logs(struct ev_loop *loop, ev_prepare *w, int revents)
{
    (void)loop;
    (void)w;
    (void)revents;
    access_flush();
}

static void on_usr1(struct ev_loop *loop, ev_signal *w, int revents)
{
    (void)loop;
    (void)w;
    (void)revents;
    log_reopen();
    access_reopen();
    if (tls_on)
        tlsrelay_reopen_log();
    log_info("log files reopened");
}

/*
 * Descriptors: the soft RLIMIT_NOFILE goes up to the hard limit (systemd's LimitNOFILE, or the
 * shell's). A client connection holds up to 2 (its socket, an upstream one), a TLS relay 6 (two
 * sockets, two pipes), plus the cache files being read and the listeners; when the limit is
 * lower than max_connections needs, say so at start (accepting then backs off at EMFILE).
 */
static void raise_fd_limit(const struct config *cfg)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) < 0)
        return;
    if (rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        (void)setrlimit(RLIMIT_NOFILE, &rl);
        (void)getrlimit(RLIMIT_NOFILE, &rl);
    }
    uint64_t per_conn = cfg->n_tls_listen > 0 ? 6 : 2;
    uint64_t need = (uint64_t)cfg->max_connections * per_conn + 256;
    if (rl.rlim_cur != RLIM_INFINITY && (uint64_t)rl.rlim_cur < need)
        log_warn("open file limit %llu is below what max_connections = %u may need (%llu); "
                 "raise LimitNOFILE (ulimit -n) or lower max_connections",
                 (unsigned long long)rl.rlim_cur, cfg->max_connections, (unsigned long long)need);
}

/* `cacheparty import DIR [--dry-run] [--copy] [--jobs N]`: argv starts after "import". */
static int cmd_import(const struct config *cfg, const struct domains *d, int argc, char **argv)
{
    struct lcimport_opts o = {.jobs = 2, .out = stdout, .progress = stderr};
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--dry-run") == 0) {
            o.dry_run = true;
        } else if (strcmp(argv[i], "--copy") == 0) {
            o.copy = true;
        } else if (strcmp(argv[i], "--jobs") == 0 && i + 1 < argc) {
            char *end;
            unsigned long j = strtoul(argv[++i], &end, 10);
            if (*end != '\0' || j < 1 || j > 64) {
                fprintf(stderr, "cacheparty import: --jobs takes 1 to 64, not '%s'\n", argv[i]);
                return 1;
            }
            o.jobs = (unsigned)j;
        } else if (argv[i][0] != '-' && o.dir == NULL) {
            o.dir = argv[i];
        } else {
            fprintf(stderr, "cacheparty import: unexpected argument '%s'\n", argv[i]);
            usage(stderr);
            return 1;
        }
    }
    if (o.dir == NULL) {
        fprintf(stderr, "cacheparty import: the lancache cache directory is required\n");
        return 1;
    }
    return lcimport_run(cfg, d, &o);
}

/* `cacheparty config --from-lancache FILE`: argv starts after "config". */
static int cmd_config(int argc, char **argv)
{
    if (argc != 2 || strcmp(argv[0], "--from-lancache") != 0) {
        fprintf(stderr, "cacheparty config: usage: cacheparty config --from-lancache FILE\n");
        return 1;
    }
    FILE *f = fopen(argv[1], "re");
    if (f == NULL) {
        fprintf(stderr, "cacheparty config: %s: %s\n", argv[1], strerror(errno));
        return 1;
    }
    static char text[1 << 20];
    size_t n = fread(text, 1, sizeof(text), f);
    bool big = n == sizeof(text);
    fclose(f);
    if (big) {
        fprintf(stderr, "cacheparty config: %s: larger than 1 MiB: not a lancache .env\n", argv[1]);
        return 1;
    }
    if (lcenv_convert(text, n, argv[1], stdout) == 0) {
        fprintf(stderr, "cacheparty config: %s: no VARIABLE=value line found\n", argv[1]);
        return 1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    const char *path = CONFIG_DEFAULT_PATH;
    bool test_only = false;
    int opt;
    while ((opt = getopt(argc, argv, "+c:tVh")) != -1) {
        switch (opt) {
        case 'c':
            path = optarg;
            break;
        case 't':
            test_only = true;
            break;
        case 'V':
            printf("cacheparty %s\n", CACHEPARTY_VERSION);
            return 0;
        case 'h':
            usage(stdout);
            return 0;
        default:
            usage(stderr);
            return 1;
        }
    }
    bool dns_cmd = optind < argc && strcmp(argv[optind], "dns") == 0;
    bool import_cmd = optind < argc && strcmp(argv[optind], "import") == 0;
    if (optind < argc && strcmp(argv[optind], "config") == 0)
        return cmd_config(argc - optind - 1, argv + optind + 1);
    if (optind < argc && !dns_cmd && !import_cmd) {
        fprintf(stderr, "cacheparty: unexpected argument '%s'\n", argv[optind]);
        usage(stderr);
        return 1;
    }

    struct config *cfg = NULL;
    char err[512];
    if (config_load(path, &cfg, err, sizeof(err)) < 0) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    if (dns_cmd) {
        int drc = cmd_dns(cfg, argc - optind - 1, argv + optind + 1);
        config_free(&cfg);
        return drc;
    }
    struct domains *doms = NULL;
    if (load_domains(cfg, &doms, err, sizeof(err)) < 0) {
        fprintf(stderr, "%s\n", err);
        config_free(&cfg);
        return 1;
    }
    if (import_cmd) {
        int irc = cmd_import(cfg, doms, argc - optind - 1, argv + optind + 1);
        domains_free(&doms);
        config_free(&cfg);
        return irc;
    }
    if (test_only && cache_check_dirs(cfg, err, sizeof(err)) < 0) {
        fprintf(stderr, "%s\n", err);
        domains_free(&doms);
        config_free(&cfg);
        return 1;
    }
    if (test_only) {
        char sum[512];
        size_t n_services = 0, n_names = 0;
        config_summary(cfg, sum, sizeof(sum));
        domains_counts(doms, &n_services, &n_names);
        size_t skipped = doms != NULL ? domains_skipped_lines(doms, NULL) : 0;
        printf("%s; cache-domains: %zu services, %zu names", sum, n_services, n_names);
        if (skipped > 0)
            printf(", %zu malformed lines skipped", skipped);
        printf("\n");
        config_rules_print(cfg, stdout);
        domains_free(&doms);
        config_free(&cfg);
        return 0;
    }
    publish(cfg, doms);
    if (log_open(cfg->error_log) < 0)
        fprintf(stderr, "cacheparty: cannot open error log %s, using stderr\n", cfg->error_log);
    signal(SIGPIPE, SIG_IGN);
    raise_fd_limit(cfg);
    int rc = 2;
    if (access_open(cfg->access_log, cfg->access_format) < 0) {
        fprintf(stderr, "cacheparty: cannot open access log %s: %s\n", cfg->access_log,
                strerror(errno));
        goto out_cfg;
    }

    struct ev_loop *loop = ev_default_loop(EVBACKEND_EPOLL);
    if (loop == NULL)
        loop = ev_default_loop(0);
    if (loop == NULL) {
        fprintf(stderr, "cacheparty: cannot create the event loop\n");
        goto out_cfg;
    }
    ctx.loop = loop;
    ctx.on_closed = on_conn_closed;
    if (cfg->has_override) {
        if (resolve_override(&cfg->override, &ctx.override_addr) < 0)
            goto out_loop;
        ctx.has_override = true;
    }
    ctx.resolver = resolver_new(loop, cfg, err, sizeof(err));
    if (ctx.resolver == NULL) {
        fprintf(stderr, "cacheparty: %s\n", err);
        goto out_loop;
    }
    ctx.upool = upool_new(loop);
    ctx.cache = cache_new(loop, cfg, err, sizeof(err));
    if (ctx.cache == NULL) {
        fprintf(stderr, "cacheparty: %s\n", err);
        goto out_pool;
    }
    fctx.loop = loop;
    fctx.resolver = ctx.resolver;
    fctx.upool = ctx.upool;
    fctx.has_override = ctx.has_override;
    fctx.override_addr = ctx.override_addr;
    fctx.cache = ctx.cache;
    fetch_module_init(&fctx);
    peers_start(loop, cfg->has_cluster ? &cfg->cluster : NULL, cache_chunk_size(ctx.cache));
    conn_module_init(&ctx);
    /* The signals first: one sent as soon as the port answers (a supervisor's reload, a test)
     * is handled once the loop runs, not by its default action (SIGHUP would end the process). */
    ev_signal_init(&sig_term, on_stop_signal, SIGTERM);
    ev_signal_init(&sig_int, on_stop_signal, SIGINT);
    ev_signal_init(&sig_hup, on_hup, SIGHUP);
    ev_signal_init(&sig_usr1, on_usr1, SIGUSR1);
    ev_signal_start(loop, &sig_term);
    ev_signal_start(loop, &sig_int);
    ev_signal_start(loop, &sig_hup);
    ev_signal_start(loop, &sig_usr1);
    if (server_start(&ctx, cfg->listen, cfg->n_listen, err, sizeof(err)) < 0) {
        fprintf(stderr, "cacheparty: %s\n", err);
        goto out_modules;
    }
    stats_provider_add(read_gauges, NULL);
    actx.loop = loop;
    actx.cache = ctx.cache;
    if (cfg->n_tls_listen > 0) {
        tctx.loop = loop;
        tctx.resolver = ctx.resolver;
        tctx.on_closed = on_conn_closed;
        if (cfg->has_tls_override) {
            if (resolve_override(&cfg->tls_override, &tctx.override_addr) < 0) {
                server_stop();
                goto out_modules;
            }
            tctx.has_override = true;
        }
        int trc = tlsrelay_init(&tctx, cfg);
        if (trc < 0) {
            fprintf(stderr, "cacheparty: cannot open the TLS access log %s: %s\n", cfg->tls_access,
                    strerror(-trc));
            server_stop();
            goto out_modules;
        }
        tls_on = true;
        if (server_start_tls(cfg->tls_listen, cfg->n_tls_listen, err, sizeof(err)) < 0) {
            fprintf(stderr, "cacheparty: %s\n", err);
            goto out_modules;
        }
    }
    if (cfg->has_admin && admin_start(&actx, &cfg->admin_listen, err, sizeof(err)) < 0) {
        fprintf(stderr, "cacheparty: %s\n", err);
        server_stop();
        goto out_modules;
    }
    /* The dashboard's samples and tables; totals per service beside the first cache dir's
     * shards (the disk index looks only at its ab/ directories). */
    char state_path[PATH_MAX];
    snprintf(state_path, sizeof(state_path), "%s/cacheparty-live.state", cfg->dirs[0]);
    live_start(loop, state_path);

    ev_prepare_init(&flush_logs, on_flush_logs);
    ev_prepare_start(loop, &flush_logs);
    ev_unref(loop);

    log_info("cacheparty %s started (hostname %s)", CACHEPARTY_VERSION, cfg->hostname);
    sd_notify_send("READY=1");
    ev_run(loop, 0);
    rc = 0;
    log_info("cacheparty stopped");

    ev_timer_stop(loop, &shutdown_timer);
    ev_ref(loop);
    ev_prepare_stop(loop, &flush_logs);
    server_stop();
    admin_stop();
    live_stop();
out_modules:
    ev_signal_stop(loop, &sig_term);
    ev_signal_stop(loop, &sig_int);
    ev_signal_stop(loop, &sig_hup);
    ev_signal_stop(loop, &sig_usr1);
    conn_module_fini();
    tlsrelay_fini();
    peers_stop();
    fetch_cancel_all();
    cache_free(&ctx.cache);
    ASSERT(upstream_live() == 0 && cache_live_chunks() == 0 && answer_live() == 0);
out_pool:
    upool_free(&ctx.upool);
    resolver_free(&ctx.resolver);
out_loop:
    ev_loop_destroy(loop);
out_cfg:
    access_close();
    log_close();
    for (size_t i = 0; i < n_domain_sets; i++)
        domains_free(&domain_sets[i]);
    free(domain_sets);
    for (size_t i = 0; i < n_snapshots; i++)
        config_free(&snapshots[i]);
    free(snapshots);
    if (n_snapshots == 0)
        config_free(&cfg);
    return rc;
}
