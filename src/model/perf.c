/*
 * model/perf.c — the measuring side of the public API (clef.h "measuring
 * speed"): what a model computes with, a profiled forward, and the
 * machine's peak for the model's kernels.  `clef bench` is built on these.
 */
#include <string.h>

#include "core/error.h"
#include "kernels/peak.h"
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

clef_status clef_forward_profiled(clef_model *m, const int32_t *ids, size_t n, float *hidden,
                                  clef_forward_stats *stats, clef_error *err) {
    if (!m || !ids || !hidden || !stats)
        return clef_err_set(err, CLEF_ERR_INVALID_ARG,
                            "clef_forward_profiled: model, ids, hidden and stats are required");
    qwen35_seq seq = {ids, (int64_t)n, hidden};
    qwen35_stats st = {0};
    clef_status s = qwen35_forward_stats(&m->backbone, m->pool, &seq, NULL, 1, 0, &st, err);
    *stats = (clef_forward_stats){st.total_s, st.matmul_s, st.attention_s, st.delta_s, st.head_s,
                                  st.matmul_flop, st.attention_flop, st.delta_flop};
    return s;
}

double clef_model_peak_gflops(clef_model *m, double seconds) {
    if (!m) return 0.0;
    clef_model_info info;
    clef_model_get_info(m, &info);
    return mm_peak_gflops(&m->backbone.cpu, info.precision, m->pool, seconds);
}
