/*
 * model/perf.c — the measuring side of the public API (clef.h "measuring
 * speed"): what a model computes with, a profiled forward, and the
 * machine's peak for the model's kernels.  `clef bench` is built on these.
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/error.h"
#include "kernels/peak.h"
#include "model/head.h"
#include "model/model.h"

/* The largest layer matrix: its precision names the model's. */
static const mm_weight *largest_matrix(const qwen35_model *b) {
    const mm_weight *best = NULL;
    for (int il = 0; il < b->cfg.n_layer; il++) {
        const qwen35_layer *l = &b->layers[il];
        const mm_weight *c[] = {&l->ffn_gate, &l->ffn_up, &l->ffn_down,
                                l->recurrent ? &l->attn_qkv : &l->attn_q};
        for (size_t i = 0; i < sizeof c / sizeof c[0]; i++)
            if (!best || (uint64_t)c[i]->row_bytes * (uint64_t)c[i]->out >
                             (uint64_t)best->row_bytes * (uint64_t)best->out)
                best = c[i];
    }
    return best;
}

void clef_model_get_info(const clef_model *m, clef_model_info *info) {
    memset(info, 0, sizeof *info);
    if (!m) return;
    const qwen35_model *b = &m->backbone;
    const mm_weight *w = largest_matrix(b);
    info->kernels = cpu_target_name(&b->cpu);
    info->weight_type = b->weight_type;
    info->precision = w ? mm_precision(&b->cpu, w) : "f32";
    info->n_threads = tp_size(m->pool);
    info->n_layer = b->cfg.n_layer;
    info->n_vocab = b->cfg.n_vocab;
    info->matrix_bytes = b->matrix_bytes;
    info->matrix_params = b->matrix_params;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* One scoring by the decision head of four synthetic questions (noul,
 * choice of 4, score of 5, choice of 3: 14 options) whose spans sit in the
 * last 64 tokens: what a System One request adds to a prefill. */
static clef_status time_head(clef_model *m, const int32_t *ids, int64_t n, const float *hidden,
                             double *seconds, clef_error *err) {
    head_rows rows;
    clef_status st = head_rows_from_file(m->gguf, model_n_embd(m), &rows, err);
    if (st != CLEF_OK) return st;
    const int types[4] = {HEAD_TYPE_NOUL, HEAD_TYPE_CHOICE, HEAD_TYPE_SCORE, HEAD_TYPE_CHOICE};
    const int n_opts[4] = {2, 4, 5, 3};
    head_span spans[4][5];
    head_question qs[4];
    const int32_t base = (int32_t)n - 64;
    for (int q = 0; q < 4; q++) {
        int32_t s0 = base + 16 * q;
        for (int o = 0; o < n_opts[q]; o++) spans[q][o] = (head_span){s0 + 4 + 2 * o, s0 + 6 + 2 * o};
        qs[q] = (head_question){types[q], {s0, s0 + 4}, n_opts[q], spans[q]};
    }
    float logits[14];
    double t0 = now_s();
    st = head_score_on(m->head, m->pool, &m->backbone.cpu, &rows, hidden, ids, (int)n, qs, 4, logits, err);
    *seconds = now_s() - t0;
    return st;
}

clef_status clef_forward_batch_profiled(clef_model *m, size_t n_seq, const int32_t *ids,
                                        size_t n, float *hidden, clef_forward_stats *stats,
                                        clef_error *err) {
    if (!m || !ids || !hidden || !stats || n_seq == 0 || n_seq > 4096)
        return clef_err_set(err, CLEF_ERR_INVALID_ARG, "clef_forward_batch_profiled: model, ids, "
                            "hidden and stats are required, and 1..4096 prompts");
    qwen35_seq *seqs = calloc(n_seq, sizeof *seqs);
    if (!seqs) return clef_err_set(err, CLEF_ERR_NOMEM, "out of memory for %zu prompts", n_seq);
    const size_t E = (size_t)model_n_embd(m);
    for (size_t i = 0; i < n_seq; i++) seqs[i] = (qwen35_seq){ids + i * n, (int64_t)n, hidden + i * n * E};
    qwen35_stats st = {0};
    clef_status s = qwen35_forward_stats(&m->backbone, m->pool, seqs, NULL, (int)n_seq, 0, &st, err);
    *stats = (clef_forward_stats){st.total_s, st.matmul_s, st.attention_s, st.delta_s, st.head_s,
                                  st.matmul_flop, st.attention_flop, st.delta_flop};
    for (size_t i = 0; s == CLEF_OK && m->head && n >= 64 && i < n_seq; i++) {
        double hs = 0.0;
        s = time_head(m, seqs[i].ids, (int64_t)n, seqs[i].hidden, &hs, err);
        stats->head_s += hs;
        stats->total_s += hs;
    }
    free(seqs);
    return s;
}

clef_status clef_forward_profiled(clef_model *m, const int32_t *ids, size_t n, float *hidden,
                                  clef_forward_stats *stats, clef_error *err) {
    return clef_forward_batch_profiled(m, 1, ids, n, hidden, stats, err);
}

double clef_model_peak_gflops(clef_model *m, double seconds) {
    if (!m) return 0.0;
    clef_model_info info;
    clef_model_get_info(m, &info);
    return mm_peak_gflops(&m->backbone.cpu, info.precision, m->pool, seconds);
}
