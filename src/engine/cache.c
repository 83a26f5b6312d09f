/*
 * engine/cache.c — the state cache: a chained hash table over the keys and a
 * doubly linked LRU list, both under one mutex; reference counts let an
 * evicted entry live until its last reader is done.
 */
#include "engine/cache.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"

struct ec_cache {
    pthread_mutex_t mu;
    size_t capacity;
    ec_entry **table;            /* [n_buckets] chains                     */
    size_t n_buckets;            /* a power of two                         */
    ec_entry *head, *tail;       /* LRU list: head most recently used      */
    ec_stats st;
};

enum { EC_MIN_BUCKETS = 64 };

/* FNV-1a over the ids' bytes. */
static uint64_t key_hash(const int32_t *ids, size_t n) {
    uint64_t h = 1469598103934665603ull;
    const unsigned char *p = (const unsigned char *)ids;
    for (size_t i = 0; i < n * sizeof *ids; i++) h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

clef_status ec_new(size_t capacity, ec_cache **out, clef_error *err) {
    ec_cache *c = calloc(1, sizeof *c);
    if (c) c->table = calloc(EC_MIN_BUCKETS, sizeof *c->table);
    if (!c || !c->table) {
        free(c);
        *out = NULL;
        return clef_err_set(err, CLEF_ERR_NOMEM, "out of memory for the state cache");
    }
    pthread_mutex_init(&c->mu, NULL);
    c->capacity = capacity;
    c->n_buckets = EC_MIN_BUCKETS;
    c->st.capacity = capacity;
    *out = c;
    return CLEF_OK;
}

static void entry_free(ec_entry *e) {
    if (!e) return;
    qwen35_state_free(e->state);
    free(e->ids);
    free(e->hidden);
    free(e);
}

void ec_free(ec_cache *c) {
    if (!c) return;
    for (ec_entry *e = c->head, *next; e; e = next) {
        next = e->next;
        entry_free(e);
    }
    free(c->table);
    pthread_mutex_destroy(&c->mu);
    free(c);
}

size_t ec_entry_bytes(size_t n, size_t state_bytes, int E) {
    return sizeof(ec_entry) + n * sizeof(int32_t) + n * (size_t)E * sizeof(float) + state_bytes;
}

bool ec_can_hold(const ec_cache *c, size_t bytes) { return bytes <= c->capacity; }

clef_status ec_entry_new(const int32_t *ids, size_t n, const float *hidden, int E,
                         qwen35_state *state, ec_entry **out, clef_error *err) {
    *out = NULL;
    ec_entry *e = calloc(1, sizeof *e);
    if (e) e->ids = malloc(n * sizeof *e->ids);
    if (e && e->ids) e->hidden = malloc(n * (size_t)E * sizeof *e->hidden);
    if (!e || !e->ids || !e->hidden) {
        if (e) free(e->ids);
        free(e);
        qwen35_state_free(state);
        return clef_err_set(err, CLEF_ERR_NOMEM, "out of memory for a cache entry of %zu tokens", n);
    }
    memcpy(e->ids, ids, n * sizeof *ids);
    memcpy(e->hidden, hidden, n * (size_t)E * sizeof *hidden);
    e->n = n;
    e->state = state;
    e->bytes = ec_entry_bytes(n, state->bytes, E);
    e->hash = key_hash(ids, n);
    *out = e;
    return CLEF_OK;
}

/* ---- under the mutex ---- */

static ec_entry **bucket(ec_cache *c, uint64_t hash) {
    return &c->table[hash & (c->n_buckets - 1)];
}

static ec_entry *find(ec_cache *c, const int32_t *ids, size_t n, uint64_t hash) {
    for (ec_entry *e = *bucket(c, hash); e; e = e->hnext)
        if (e->hash == hash && e->n == n && !memcmp(e->ids, ids, n * sizeof *ids)) return e;
    return NULL;
}

static void lru_unlink(ec_cache *c, ec_entry *e) {
    if (e->prev) e->prev->next = e->next;
    else c->head = e->next;
    if (e->next) e->next->prev = e->prev;
    else c->tail = e->prev;
    e->prev = e->next = NULL;
}

static void lru_push_front(ec_cache *c, ec_entry *e) {
    e->prev = NULL;
    e->next = c->head;
    if (c->head) c->head->prev = e;
    c->head = e;
    if (!c->tail) c->tail = e;
}

/* Doubling keeps chains short; a failed allocation only leaves them longer. */
static void maybe_grow(ec_cache *c) {
    if (c->st.entries < c->n_buckets) return;
    size_t nb = c->n_buckets * 2;
    ec_entry **t = calloc(nb, sizeof *t);
    if (!t) return;
    for (ec_entry *e = c->head; e; e = e->next) {
        ec_entry **b = &t[e->hash & (nb - 1)];
        e->hnext = *b;
        *b = e;
    }
    free(c->table);
    c->table = t;
    c->n_buckets = nb;
}

/* Take e out of the table and the list; the caller frees it when unused. */
static void remove_entry(ec_cache *c, ec_entry *e) {
    for (ec_entry **p = bucket(c, e->hash); *p; p = &(*p)->hnext)
        if (*p == e) {
            *p = e->hnext;
            break;
        }
    lru_unlink(c, e);
    e->cached = 0;
    c->st.entries--;
    c->st.bytes -= e->bytes;
}

const ec_entry *ec_lookup(ec_cache *c, const int32_t *ids, size_t n) {
    uint64_t h = key_hash(ids, n);
    pthread_mutex_lock(&c->mu);
    ec_entry *e = find(c, ids, n, h);
    if (e) {
        e->refs++;
        lru_unlink(c, e);
        lru_push_front(c, e);
        c->st.hits++;
    } else {
        c->st.misses++;
    }
    pthread_mutex_unlock(&c->mu);
    return e;
}

void ec_release(ec_cache *c, const ec_entry *ce) {
    if (!ce) return;
    ec_entry *e = (ec_entry *)ce; /* the cache's own fields change, never the content */
    pthread_mutex_lock(&c->mu);
    bool dead = --e->refs == 0 && !e->cached;
    pthread_mutex_unlock(&c->mu);
    if (dead) entry_free(e);
}

void ec_insert(ec_cache *c, ec_entry *e) {
    if (!e) return;
    ec_entry *victims = NULL; /* freed outside the lock */
    bool keep = false;
    pthread_mutex_lock(&c->mu);
    if (e->bytes <= c->capacity && !find(c, e->ids, e->n, e->hash)) {
        while (c->st.bytes + e->bytes > c->capacity && c->tail) {
            ec_entry *v = c->tail;
            remove_entry(c, v);
            c->st.evictions++;
            if (v->refs == 0) {
                v->next = victims;
                victims = v;
            }
        }
        ec_entry **b = bucket(c, e->hash);
        e->hnext = *b;
        *b = e;
        lru_push_front(c, e);
        e->cached = 1;
        c->st.entries++;
        c->st.bytes += e->bytes;
        c->st.inserts++;
        maybe_grow(c);
        keep = true;
    }
    pthread_mutex_unlock(&c->mu);
    if (!keep) entry_free(e);
    while (victims) {
        ec_entry *next = victims->next;
        entry_free(victims);
        victims = next;
    }
}

void ec_get_stats(ec_cache *c, ec_stats *out) {
    pthread_mutex_lock(&c->mu);
    *out = c->st;
    pthread_mutex_unlock(&c->mu);
}
