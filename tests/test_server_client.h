/*
 * tests/test_server_client.h — a tiny HTTP/1.1 client over raw sockets and
 * helpers to run `clef serve` as a child process, shared by the server
 * tests (static functions; each test program includes it once).
 *
 * Everything is bounded: every socket wait is a poll with HC_TIMEOUT_MS,
 * a server start waits at most HC_START_MS, a stop escalates to SIGKILL.
 */
#ifndef CLEF_TEST_SERVER_CLIENT_H
#define CLEF_TEST_SERVER_CLIENT_H

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define HC_TIMEOUT_MS 30000
#define HC_START_MS 60000

typedef struct hc_resp {
    int status;         /* -1 when no complete response arrived */
    char *head;         /* status line + headers, NUL-terminated */
    char *body;         /* NUL-terminated (body_len excludes the NUL) */
    size_t body_len;
    bool closed;        /* the server closed the connection afterwards */
} hc_resp;

static inline void hc_free(hc_resp *r) {
    free(r->head);
    free(r->body);
    memset(r, 0, sizeof *r);
}

static inline double hc_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static inline void hc_sleep_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* A connected socket to 127.0.0.1:port, or -1. */
static inline int hc_connect(int port) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        close(fd);
        return -1;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return fd;
}

static inline bool hc_send(int fd, const void *buf, size_t len) {
    const char *p = buf;
    while (len) {
        ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return false;
        p += n;
        len -= (size_t)n;
    }
    return true;
}

/* Read one response.  head_only: the request was HEAD (no body follows). */
static inline bool hc_read(int fd, hc_resp *r, bool head_only) {
    memset(r, 0, sizeof *r);
    r->status = -1;
    size_t cap = 8192, len = 0, need = (size_t)-1, head_len = 0;
    char *buf = malloc(cap + 1);
    double deadline = hc_now_ms() + HC_TIMEOUT_MS;
    while (buf) {
        if (head_len && len >= head_len + need) break;
        struct pollfd p = {fd, POLLIN, 0};
        int left = (int)(deadline - hc_now_ms());
        if (left <= 0 || poll(&p, 1, left) <= 0) break;
        if (len == cap) {
            char *nb = realloc(buf, 2 * cap + 1);
            if (!nb) break;
            buf = nb;
            cap *= 2;
        }
        ssize_t n = recv(fd, buf + len, cap - len, 0);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
            r->closed = true;
            if (head_len && need == (size_t)-1) need = len - head_len;   /* body to EOF */
            break;
        }
        len += (size_t)n;
        buf[len] = '\0';
        if (!head_len) {
            char *end = strstr(buf, "\r\n\r\n");
            if (!end) continue;
            head_len = (size_t)(end - buf) + 4;
            r->head = strndup(buf, head_len);
            sscanf(buf, "HTTP/1.%*d %d", &r->status);
            const char *cl = NULL;
            for (const char *line = strstr(r->head, "\r\n"); line && line[2]; line = strstr(line + 2, "\r\n"))
                if (!strncasecmp(line + 2, "Content-Length:", 15)) cl = line + 17;
            need = head_only ? 0 : cl ? strtoull(cl, NULL, 10) : (size_t)-1;
        }
    }
    bool ok = buf && head_len && need != (size_t)-1 && len >= head_len + need;
    if (ok) {
        r->body_len = need;
        r->body = malloc(need + 1);
        if (r->body) {
            memcpy(r->body, buf + head_len, need);
            r->body[need] = '\0';
        }
    } else {
        r->status = -1;
    }
    free(buf);
    return ok && r->body;
}

/* True when the peer closes fd (EOF or reset) within HC_TIMEOUT_MS with
 * no further bytes. */
static inline bool hc_wait_closed(int fd) {
    struct pollfd p = {fd, POLLIN, 0};
    if (poll(&p, 1, HC_TIMEOUT_MS) <= 0) return false;
    char c;
    return recv(fd, &c, 1, 0) <= 0;
}

/* Value of a response header (case-insensitive name), copied into out; NULL if absent. */
static inline const char *hc_header(const hc_resp *r, const char *name, char *out, size_t cap) {
    if (!r->head) return NULL;
    size_t nl = strlen(name);
    for (const char *line = strstr(r->head, "\r\n"); line && line[2] != '\r'; line = strstr(line + 2, "\r\n")) {
        const char *h = line + 2;
        if (strncasecmp(h, name, nl) || h[nl] != ':') continue;
        const char *v = h + nl + 1;
        while (*v == ' ') v++;
        const char *e = strstr(v, "\r\n");
        size_t vl = e ? (size_t)(e - v) : strlen(v);
        if (vl >= cap) vl = cap - 1;
        memcpy(out, v, vl);
        out[vl] = '\0';
        return out;
    }
    return NULL;
}

/* Write one request on fd.  extra: more header lines, each ending "\r\n". */
static inline bool hc_write_request(int fd, const char *method, const char *path, const char *extra,
                             const char *body, size_t body_len, bool keep_alive) {
    char head[4096];
    int n = snprintf(head, sizeof head,
                     "%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\n%s%s", method, path, extra ? extra : "",
                     keep_alive ? "" : "Connection: close\r\n");
    if (n < 0 || (size_t)n >= sizeof head) return false;
    if (body) {
        int m = snprintf(head + n, sizeof head - (size_t)n,
                         "Content-Type: application/json\r\nContent-Length: %zu\r\n", body_len);
        if (m < 0 || (size_t)(n + m) >= sizeof head) return false;
        n += m;
    }
    if ((size_t)n + 2 >= sizeof head) return false;
    memcpy(head + n, "\r\n", 2);
    n += 2;
    return hc_send(fd, head, (size_t)n) && (!body || hc_send(fd, body, body_len));
}

/* One request on a fresh connection (Connection: close). */
static inline bool hc_request(int port, const char *method, const char *path, const char *extra,
                       const char *body, hc_resp *r) {
    memset(r, 0, sizeof *r);
    r->status = -1;
    int fd = hc_connect(port);
    if (fd < 0) return false;
    bool ok = hc_write_request(fd, method, path, extra, body, body ? strlen(body) : 0, false) &&
              hc_read(fd, r, !strcmp(method, "HEAD"));
    close(fd);
    return ok;
}

/* POST a JSON body to /v1/systemone. */
static inline bool hc_post(int port, const char *extra, const char *body, hc_resp *r) {
    return hc_request(port, "POST", "/v1/systemone", extra, body, r);
}

/* Poll GET /metrics (bounded) until its text contains `line` (e.g.
 * "\nclef_queue_depth 0\n"): gauges settle a moment after the answers. */
static inline bool hc_wait_metric(int port, const char *line) {
    double deadline = hc_now_ms() + HC_TIMEOUT_MS;
    while (hc_now_ms() < deadline) {
        hc_resp r;
        bool found = hc_request(port, "GET", "/metrics", NULL, NULL, &r) && strstr(r.body, line);
        hc_free(&r);
        if (found) return true;
        hc_sleep_ms(5);
    }
    return false;
}

/* True when s is "req_" followed by exactly 32 lowercase hex digits. */
static inline bool hc_is_request_id(const char *s) {
    if (!s || strncmp(s, "req_", 4) || strlen(s) != 36) return false;
    for (int i = 4; i < 36; i++)
        if (!isdigit((unsigned char)s[i]) && !(s[i] >= 'a' && s[i] <= 'f')) return false;
    return true;
}

/* ---- `clef serve` as a child process -------------------------------------- */

typedef struct hc_server {
    pid_t pid;
    int port;
    char log_path[256];     /* the child's stderr */
} hc_server;

/* Path of the clef binary (env CLEF_BIN). */
static inline const char *hc_clef_bin(void) {
    const char *b = getenv("CLEF_BIN");
    return b && *b ? b : "build/clef";
}

/* A whole file, NUL-terminated (NULL when unreadable). */
static inline char *hc_slurp(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 16, n = 0, got;
    char *buf = malloc(cap + 1);
    while (buf && (got = fread(buf + n, 1, cap - n, f)) > 0) {
        n += got;
        if (n == cap) {
            char *nb = realloc(buf, 2 * cap + 1);
            if (!nb) { free(buf); buf = NULL; break; }
            buf = nb;
            cap *= 2;
        }
    }
    fclose(f);
    if (buf) buf[n] = '\0';
    return buf;
}

static inline char *hc_read_log(const hc_server *s) { return hc_slurp(s->log_path); }

/* The verbatim request text of one case of a clef-tiny cases.jsonl (each
 * line is {"id":..., "max_length":..., "request":<text>}), malloc'd. */
static inline char *hc_case_request(const char *cases_path, const char *id) {
    char *text = hc_slurp(cases_path), *out = NULL;
    char key[128];
    snprintf(key, sizeof key, "{\"id\":\"%s\",", id);
    char *line = text ? strstr(text, key) : NULL;
    char *req = line ? strstr(line, "\"request\":") : NULL;
    char *end = req ? strchr(req, '\n') : NULL;
    if (req && !end) end = req + strlen(req);
    if (req) {
        req += strlen("\"request\":");
        while (end > req && end[-1] != '}') end--;   /* the line's own closing brace */
        if (end > req) out = strndup(req, (size_t)(end - 1 - req));
    }
    free(text);
    return out;
}

/* Start `$CLEF_BIN serve --port 0 ARGS...` (args NULL-terminated) with
 * stderr in a log file, and wait for "listening on http://127.0.0.1:PORT".
 * Returns false (after killing the child) if it does not come up. */
static inline bool hc_server_start(hc_server *s, const char *const *args) {
    memset(s, 0, sizeof *s);
    static int seq;
    snprintf(s->log_path, sizeof s->log_path, "/tmp/clef-test-serve-%d-%d.log", (int)getpid(), ++seq);
    const char *argv[64];
    int n = 0;
    argv[n++] = hc_clef_bin();
    argv[n++] = "serve";
    argv[n++] = "--port";
    argv[n++] = "0";
    for (int i = 0; args && args[i] && n < 62; i++) argv[n++] = args[i];
    argv[n] = NULL;
    pid_t pid = fork();
    if (pid < 0) return false;
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);   /* never outlive a test that crashed */
        int fd = open(s->log_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        int nul = open("/dev/null", O_RDWR);
        if (fd >= 0) dup2(fd, 2);
        if (nul >= 0) dup2(nul, 0), dup2(nul, 1);
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    s->pid = pid;
    double deadline = hc_now_ms() + HC_START_MS;
    while (hc_now_ms() < deadline) {
        int st;
        if (waitpid(pid, &st, WNOHANG) == pid) {
            s->pid = 0;
            char *log = hc_read_log(s);
            fprintf(stderr, "clef serve exited before listening:\n%s\n", log ? log : "");
            free(log);
            return false;
        }
        char *log = hc_read_log(s);
        const char *p = log ? strstr(log, "listening on http://127.0.0.1:") : NULL;
        if (p) s->port = atoi(p + strlen("listening on http://127.0.0.1:"));
        free(log);
        if (s->port > 0) return true;
        hc_sleep_ms(20);
    }
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    s->pid = 0;
    return false;
}

/* Send sig (0: none, just wait), wait (bounded) and return the exit
 * status; -1 if it had to be killed or died by a signal.  Safe to call twice. */
static inline int hc_server_stop(hc_server *s, int sig) {
    if (s->pid <= 0) return -1;
    kill(s->pid, sig);
    double deadline = hc_now_ms() + HC_START_MS;
    int st = 0;
    pid_t got = 0;
    while ((got = waitpid(s->pid, &st, WNOHANG)) == 0 && hc_now_ms() < deadline) hc_sleep_ms(20);
    if (got != s->pid) {
        kill(s->pid, SIGKILL);
        waitpid(s->pid, &st, 0);
        s->pid = 0;
        return -1;
    }
    s->pid = 0;
    unlink(s->log_path);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

#endif
