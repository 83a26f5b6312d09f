/*
 * decide/pipeline.h — clef_decide's stages, for the callers that run the
 * backbone their own way (src/engine: the state cache and batching).
 *
 *   dec_prepare   options check, req_parse, enc_encode; a request the
 *                 contract refuses is answered here (result complete)
 *   (backbone)    the caller fills job->hidden: [n_ids][E] final-normed
 *                 hidden states of job->rec.ids, however it computes them
 *   dec_finish    head_score → ans_response → the 200 body
 *
 * clef_decide is exactly prepare → model_forward_batch → finish, so every
 * path answers with the same code.  A job is one request's property; jobs
 * of different requests share nothing.
 */
#ifndef CLEF_DECIDE_PIPELINE_H
#define CLEF_DECIDE_PIPELINE_H

#include <stdbool.h>

#include "clef.h"
#include "decide/encode.h"
#include "decide/request.h"

typedef struct dec_job {
    clef_decide_options opts;   /* the options in force (defaults filled in)          */
    req_request req;            /* valid when needs_backbone                           */
    enc_record rec;             /* valid when needs_backbone                           */
    bool needs_backbone;        /* false: the result is already complete (a refusal)   */
    float *hidden;              /* [rec.n_ids][E], allocated here, filled by the caller */
} dec_job;

/* Stage 1.  options NULL = defaults.  CLEF_OK with job->needs_backbone false:
 * *r holds the refusal (4xx status and body), nothing else to do but
 * dec_job_free.  CLEF_OK with needs_backbone: job->hidden waits for the
 * backbone; r has the parse/tokenize timings and token counts.  Other
 * statuses: clef failed (err says why); *r holds nothing, dec_job_free
 * still applies.  *job and *r are overwritten. */
clef_status dec_prepare(const clef_model *m, const char *json, size_t len,
                        const clef_decide_options *options, dec_job *job,
                        clef_decide_result *r, clef_error *err);

/* Stage 3, once job->hidden is filled: head, answers, body (r->head_ms;
 * r->backbone_ms is the caller's to set).  On failure r's body is freed. */
clef_status dec_finish(const clef_model *m, dec_job *job, clef_decide_result *r,
                       clef_error *err);

/* Release what the job holds (not the result).  A zeroed job is fine. */
void dec_job_free(dec_job *job);

/* Milliseconds on a monotonic clock (stage timings). */
double dec_now_ms(void);

#endif
