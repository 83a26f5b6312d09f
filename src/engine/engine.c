/*
 * engine/engine.c — clef_engine: clef_decide's pipeline (decide/pipeline.h)
 * with a state cache (engine/cache.h) in front of the backbone, and many
 * requests per backbone pass.
 *
 * A request's key is its ids from the start of the prompt through the
 * state's last token (the prefix and the state after any cut: everything
 * before the schema).  On a hit the backbone continues from the cached
 * state and runs only the schema and suffix; the cached hidden states fill
 * the first rows.  On a miss the whole prompt runs, the state at the key's
 * end is saved on the way (qwen35_carry.save) and cached afterwards.  The
 * backbone computes a continued sequence with the same floats as an
 * uninterrupted one, so cached and uncached answers are the same.
 */
#include <limits.h>
#include <stdint.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "decide/pipeline.h"
#include "engine/cache.h"
#include "model/model.h"

struct clef_engine {
    clef_model *model;          /* borrowed                                     */
    ec_cache *cache;
    _Atomic uint64_t tokens_reused;
};

/* One request of a batch on its way through. */
typedef struct eng_item {
    dec_job job;
    size_t key;                 /* key length P: ids[0..P) = prefix + state     */
    const ec_entry *hit;        /* the cached state it continues, or NULL       */
    qwen35_state *save;         /* a miss that keeps its state at P, or NULL     */
    bool planned;               /* seq and carry are set (plan_item ran)         */
    qwen35_seq seq;             /* what its backbone pass computes              */
    qwen35_carry carry;
    bool answered;              /* handed to the caller's done                   */
} eng_item;

clef_status clef_engine_new(clef_model *model, size_t cache_bytes, clef_engine **out,
                            clef_error *err) {
    if (!out) return clef_err_set(err, CLEF_ERR_INVALID_ARG, "clef_engine_new: out is NULL");
    *out = NULL;
    if (!model) return clef_err_set(err, CLEF_ERR_INVALID_ARG, "clef_engine_new: model is NULL");
    if (!model->head || !clef_model_tokenizer(model))
        return clef_err_set(err, CLEF_ERR_UNSUPPORTED, "model '%s' (arch %s) cannot decide: "
                            "an engine needs a clef file with a tokenizer",
                            clef_model_name(model), clef_model_arch(model));
    clef_engine *e = calloc(1, sizeof *e);
    if (!e) return clef_err_set(err, CLEF_ERR_NOMEM, "out of memory for an engine");
    clef_status st = ec_new(cache_bytes, &e->cache, err);
    if (st != CLEF_OK) {
        free(e);
        return st;
    }
    e->model = model;
    *out = e;
    return CLEF_OK;
}

void clef_engine_free(clef_engine *e) {
    if (!e) return;
    ec_free(e->cache);
    free(e);
}

void clef_engine_get_stats(clef_engine *e, clef_engine_stats *out) {
    memset(out, 0, sizeof *out);
    if (!e) return;
    ec_stats s;
    ec_get_stats(e->cache, &s);
    out->hits = s.hits;
    out->misses = s.misses;
    out->inserts = s.inserts;
    out->evictions = s.evictions;
    out->entries = s.entries;
    out->bytes = s.bytes;
    out->capacity = s.capacity;
    out->tokens_reused = atomic_load(&e->tokens_reused);
}

/* Look the item's key up; set up its sequence: the tail after a hit, or the
 * whole prompt saving its state at the key when the cache could keep it. */
static void plan_item(clef_engine *e, eng_item *it) {
    const enc_record *rec = &it->job.rec;
    const qwen35_model *bb = model_backbone(e->model);
    const int E = model_n_embd(e->model);
    it->planned = true;
    it->seq = (qwen35_seq){.ids = rec->ids, .n = (int64_t)rec->n_ids, .hidden = it->job.hidden};
    it->carry = (qwen35_carry){0};
    it->key = rec->state_span.end;
    if (it->key == 0 || it->key >= rec->n_ids) return; /* nothing after the state: no reuse */
    size_t P = it->key;
    it->hit = ec_lookup(e->cache, rec->ids, P);
    if (it->hit) {
        memcpy(it->job.hidden, it->hit->hidden, P * (size_t)E * sizeof *it->job.hidden);
        it->seq = (qwen35_seq){.ids = rec->ids + P, .n = (int64_t)(rec->n_ids - P),
                               .hidden = it->job.hidden + P * (size_t)E};
        it->carry.past = it->hit->state;
        atomic_fetch_add(&e->tokens_reused, (uint64_t)P);
        return;
    }
    if (!ec_can_hold(e->cache, ec_entry_bytes(P, qwen35_state_bytes(bb, (int64_t)P), E))) return;
    clef_error ignored; /* no memory for a state: answer without caching it */
    if (qwen35_state_new(bb, (int64_t)P, &it->save, &ignored) == CLEF_OK) it->carry.save = it->save;
}

/* After a successful pass: misses hand their states to the cache. */
static void cache_saved(clef_engine *e, eng_item *it) {
    if (!it->save) return;
    ec_entry *entry = NULL;
    clef_error ignored;
    if (ec_entry_new(it->job.rec.ids, it->key, it->job.hidden, model_n_embd(e->model), it->save,
                     &entry, &ignored) == CLEF_OK)
        ec_insert(e->cache, entry);
    it->save = NULL; /* the entry (or its failure) took it */
}

/* The pass starting at item *next: the items that need the backbone, in
 * order, while their backbone tokens stay within max_tokens (a pass holds
 * at least one).  Items are planned as they come up, so a pass sees what
 * earlier passes cached.  Sets *next past the pass; returns its size. */
static int gather_pass(clef_engine *e, eng_item *items, size_t n, size_t *next, size_t max_tokens,
                       qwen35_seq *seqs, qwen35_carry *carry, size_t *which) {
    int m = 0;
    size_t tokens = 0, i = *next;
    for (; i < n; i++) {
        eng_item *it = &items[i];
        if (!it->job.needs_backbone) continue;
        if (!it->planned) plan_item(e, it);
        if (m > 0 && tokens + (size_t)it->seq.n > max_tokens) break;
        tokens += (size_t)it->seq.n;
        seqs[m] = it->seq;
        carry[m] = it->carry;
        which[m++] = i;
    }
    *next = i;
    return m;
}

/* One backbone pass over the gathered items, then their heads and answers;
 * each finished request is handed to done. */
static clef_status run_pass(clef_engine *e, eng_item *items, int m, const qwen35_seq *seqs,
                            const qwen35_carry *carry, const size_t *which,
                            clef_decide_result *results, clef_engine_done_fn done, void *ctx,
                            clef_error *err) {
    double t = dec_now_ms();
    clef_status st = qwen35_forward_carry(model_backbone(e->model), model_pool(e->model), seqs,
                                          carry, m, 0, err);
    double ms = dec_now_ms() - t;
    for (int k = 0; k < m; k++) {
        eng_item *it = &items[which[k]];
        ec_release(e->cache, it->hit);
        it->hit = NULL;
        if (st != CLEF_OK) continue;
        cache_saved(e, it);
        results[which[k]].backbone_ms = ms;
        st = dec_finish(e->model, &it->job, &results[which[k]], err);
        if (st == CLEF_OK && done) {
            it->answered = true;
            done(which[k], ctx);
        }
    }
    return st;
}

static clef_status run_backbone(clef_engine *e, eng_item *items, size_t n, size_t max_tokens,
                                clef_decide_result *results, clef_engine_done_fn done, void *ctx,
                                clef_error *err) {
    qwen35_seq *seqs = calloc(n, sizeof *seqs);
    qwen35_carry *carry = calloc(n, sizeof *carry);
    size_t *which = calloc(n, sizeof *which);
    clef_status st = CLEF_OK;
    if (!seqs || !carry || !which)
        st = clef_err_set(err, CLEF_ERR_NOMEM, "out of memory for a batch of %zu", n);
    for (size_t next = 0; st == CLEF_OK && next < n;) {
        int m = gather_pass(e, items, n, &next, max_tokens, seqs, carry, which);
        if (m > 0) st = run_pass(e, items, m, seqs, carry, which, results, done, ctx, err);
    }
    free(which);
    free(carry);
    free(seqs);
    return st;
}

static void free_items(clef_engine *e, eng_item *items, size_t n) {
    for (size_t i = 0; i < n; i++) {
        ec_release(e->cache, items[i].hit);
        qwen35_state_free(items[i].save);
        dec_job_free(&items[i].job);
    }
    free(items);
}

clef_status clef_engine_decide_passes(clef_engine *e, size_t n, const char *const *jsons,
                                      const size_t *lens, const clef_decide_options *options,
                                      size_t max_tokens, clef_engine_done_fn done, void *ctx,
                                      clef_decide_result *results, clef_error *err) {
    if (!e || !results || (n && (!jsons || !lens)))
        return clef_err_set(err, CLEF_ERR_INVALID_ARG, "clef_engine_decide_passes: engine, "
                            "bodies, lengths and results are required");
    if (n > INT_MAX) return clef_err_set(err, CLEF_ERR_INVALID_ARG, "batch of %zu is too large", n);
    memset(results, 0, n * sizeof *results);
    if (n == 0) return CLEF_OK;
    eng_item *items = calloc(n, sizeof *items);
    if (!items) return clef_err_set(err, CLEF_ERR_NOMEM, "out of memory for a batch of %zu", n);
    clef_status st = CLEF_OK;
    for (size_t i = 0; st == CLEF_OK && i < n; i++) {
        st = dec_prepare(e->model, jsons[i], lens[i], options, &items[i].job, &results[i], err);
        if (st == CLEF_OK && !items[i].job.needs_backbone && done) {
            items[i].answered = true;
            done(i, ctx);
        }
    }
    if (st == CLEF_OK) st = run_backbone(e, items, n, max_tokens ? max_tokens : SIZE_MAX, results,
                                         done, ctx, err);
    for (size_t i = 0; st != CLEF_OK && i < n; i++)
        if (!items[i].answered) {   /* the contract: what done did not get is empty */
            clef_decide_result_free(&results[i]);
            memset(&results[i], 0, sizeof results[i]);
        }
    free_items(e, items, n);
    return st;
}

clef_status clef_engine_decide_batch(clef_engine *e, size_t n, const char *const *jsons,
                                     const size_t *lens, const clef_decide_options *options,
                                     clef_decide_result *results, clef_error *err) {
    return clef_engine_decide_passes(e, n, jsons, lens, options, SIZE_MAX, NULL, NULL, results, err);
}

clef_status clef_engine_decide(clef_engine *e, const char *json, size_t len,
                               const clef_decide_options *options, clef_decide_result *result,
                               clef_error *err) {
    return clef_engine_decide_batch(e, 1, &json, &len, options, result, err);
}
