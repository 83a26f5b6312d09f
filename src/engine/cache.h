/*
 * engine/cache.h — a bounded, thread-safe LRU cache of backbone states,
 * keyed by token ids.
 *
 * An entry remembers a prompt's first n tokens: their ids (the key), the
 * backbone state after them (qwen35_state) and their final-normed hidden
 * states [n][E] (the decision head reads every position).  Entries are
 * immutable once inserted and reference-counted: a lookup hands out a
 * reference that stays valid until ec_release, even if the entry is evicted
 * meanwhile, so concurrent requests share one entry without copying it.
 *
 * Memory: the entries in the cache hold at most `capacity` bytes (ids,
 * state, hidden and bookkeeping); inserting evicts least recently used
 * entries until the new one fits, and an entry larger than the capacity is
 * not kept.  Evicted entries still referenced are freed by their last
 * ec_release (they no longer count towards the capacity).
 *
 * Threads: every function may be called from any thread at once (one mutex,
 * held only for list and table updates).
 */
#ifndef CLEF_ENGINE_CACHE_H
#define CLEF_ENGINE_CACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "clef.h"
#include "model/qwen35.h"

typedef struct ec_entry {
    int32_t *ids;                /* [n] the key                                 */
    size_t n;                    /* tokens (= state->n)                          */
    qwen35_state *state;         /* the backbone after ids[n−1]                  */
    float *hidden;               /* [n][E] final-normed hidden states            */
    size_t bytes;                /* what it counts against the capacity          */
    /* ---- the cache's own (under its mutex) ---- */
    uint64_t hash;
    int refs;                    /* lookups not yet released                     */
    int cached;                  /* still in the table and the LRU list          */
    struct ec_entry *hnext;      /* table chain                                  */
    struct ec_entry *prev, *next; /* LRU list, most recent first                 */
} ec_entry;

typedef struct ec_stats {
    uint64_t hits, misses;       /* lookups that found / did not find their key */
    uint64_t inserts;            /* entries added                                */
    uint64_t evictions;          /* entries dropped to make room                 */
    uint64_t entries;            /* entries cached now                           */
    uint64_t bytes;              /* bytes they count now                         */
    uint64_t capacity;
} ec_stats;

typedef struct ec_cache ec_cache;

/* A cache of at most capacity bytes (0: keeps nothing).  *out: ec_free. */
clef_status ec_new(size_t capacity, ec_cache **out, clef_error *err);

/* Free the cache and its entries.  No reference may be outstanding. */
void ec_free(ec_cache *c);

/* The bytes an entry of n tokens with this state and width E counts. */
size_t ec_entry_bytes(size_t n, size_t state_bytes, int E);

/* Whether an entry of `bytes` could be kept at all (<= capacity). */
bool ec_can_hold(const ec_cache *c, size_t bytes);

/* A new entry of n tokens owning copies of ids[0..n) and hidden[0..n)[E],
 * and taking `state` (state->n == n).  On failure the state is freed. */
clef_status ec_entry_new(const int32_t *ids, size_t n, const float *hidden, int E,
                         qwen35_state *state, ec_entry **out, clef_error *err);

/* The entry whose key is ids[0..n) with one reference taken (mark it most
 * recently used), or NULL.  Counts a hit or a miss. */
const ec_entry *ec_lookup(ec_cache *c, const int32_t *ids, size_t n);

/* Give back a reference from ec_lookup (NULL is fine). */
void ec_release(ec_cache *c, const ec_entry *e);

/* Insert e (the cache takes it, whatever happens): evicts least recently
 * used entries until it fits.  Not kept (freed) when its key is already
 * cached or it exceeds the capacity. */
void ec_insert(ec_cache *c, ec_entry *e);

void ec_get_stats(ec_cache *c, ec_stats *out);

#endif
