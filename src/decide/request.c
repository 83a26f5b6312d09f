/*
 * decide/request.c — System One request validation (phases in request.h):
 * bytes → pydantic-shaped schema errors → model name → limits → the struct.
 */
#include "decide/request.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "text/pyjson.h"

static const char NOUL_TRUE_DEFAULT[] = "The proposition is true or the answer is yes.";
static const char NOUL_FALSE_DEFAULT[] = "The proposition is false or the answer is no.";
static const char *const SCORE_IDS[REQ_MAX_SCORE_LEVELS] = {"0", "1", "2", "3", "4",
                                                            "5", "6", "7", "8", "9"};

const char *req_type_name(req_type type) {
    switch (type) {
    case REQ_NOUL: return "noul";
    case REQ_CHOICE: return "choice";
    case REQ_SCORE: return "score";
    }
    return "?";
}

req_params req_default_params(void) {
    return (req_params){.max_depth = PYJSON_DEFAULT_MAX_DEPTH,
                        .max_questions = REQ_DEFAULT_MAX_QUESTIONS,
                        .max_choices = REQ_MAX_CHOICES};
}

/* Zeros (and a depth past what jansson parses) become the defaults / cap. */
static req_params params_in_force(const req_params *params) {
    req_params p = params ? *params : req_default_params();
    if (p.max_depth <= 0) p.max_depth = PYJSON_DEFAULT_MAX_DEPTH;
    if (p.max_depth > REQ_MAX_DEPTH_LIMIT) p.max_depth = REQ_MAX_DEPTH_LIMIT;
    if (p.max_questions <= 0) p.max_questions = REQ_DEFAULT_MAX_QUESTIONS;
    if (p.max_choices <= 0) p.max_choices = REQ_MAX_CHOICES;
    return p;
}

/* ---- refusal bodies ------------------------------------------------------- */

/* Takes ownership of body_json (decref'd here). */
static clef_status reject_from(int status, json_t *body_json, req_reject *out, clef_error *err) {
    *out = (req_reject){0};
    if (!body_json) return clef_err_set(err, CLEF_ERR_NOMEM, "out of memory building an error body");
    clef_status st = pyjson_dumps(body_json, 0, &out->body, &out->body_len, err);
    json_decref(body_json);
    if (st == CLEF_OK) out->http_status = status;
    return st;
}

clef_status req_reject_text(int http_status, const char *detail, req_reject *out,
                            clef_error *err) {
    return reject_from(http_status, json_pack("{s:s}", "detail", detail), out, err);
}

clef_status req_reject_typed(int http_status, const char *error_type, const char *message,
                             req_reject *out, clef_error *err) {
    json_t *d = message ? json_pack("{s:s,s:s}", "error_type", error_type, "message", message)
                        : json_pack("{s:s}", "error_type", error_type);
    return reject_from(http_status, d ? json_pack("{s:o}", "detail", d) : NULL, out, err);
}

void req_reject_free(req_reject *reject) {
    if (!reject) return;
    free(reject->body);
    *reject = (req_reject){0};
}

/* ---- phase 2: pydantic-shaped schema errors ------------------------------ */

typedef struct vctx {
    json_t *errors;   /* array of pydantic error objects */
    bool usage;       /* an extra top-level field or an unknown question type */
    bool oom;
} vctx;

/* A copy of loc with one more element (steals elem). */
static json_t *loc_plus(vctx *c, const json_t *loc, json_t *elem) {
    json_t *l = json_copy((json_t *)loc);
    if (!l || !elem || json_array_append_new(l, elem)) {
        json_decref(l);
        if (!l) json_decref(elem);
        c->oom = true;
        return NULL;
    }
    return l;
}

static json_t *loc_key(vctx *c, const json_t *loc, const char *key) {
    return loc_plus(c, loc, json_string(key));
}

/* Append {"type","loc","msg","input"(,"ctx")}; steals loc and ctx. */
static void add_err(vctx *c, const char *type, json_t *loc, const char *msg, json_t *input,
                    json_t *ctx) {
    if (!loc) { json_decref(ctx); c->oom = true; return; }
    json_t *e = json_object();
    if (!e || json_object_set_new(e, "type", json_string(type)) ||
        json_object_set_new(e, "loc", loc) || json_object_set_new(e, "msg", json_string(msg)) ||
        json_object_set(e, "input", input ? input : json_null()) ||
        (ctx && json_object_set_new(e, "ctx", ctx)) || json_array_append_new(c->errors, e)) {
        c->oom = true;
    }
    if (!e) { json_decref(loc); json_decref(ctx); }
}

static bool is_content(const json_t *v) {
    return json_is_string(v) || json_is_object(v) || json_is_array(v);
}

/* The three member errors of `str | dict | list` at loc (borrowed). */
static void content_errors(vctx *c, const json_t *loc, json_t *v) {
    add_err(c, "string_type", loc_key(c, loc, "str"), "Input should be a valid string", v, NULL);
    add_err(c, "dict_type", loc_key(c, loc, "dict[any,any]"), "Input should be a valid dictionary",
            v, NULL);
    add_err(c, "list_type", loc_key(c, loc, "list[any]"), "Input should be a valid list", v, NULL);
}

/* An optional `str | dict | list | None` field of obj. */
static void check_optional_content(vctx *c, const json_t *loc, json_t *obj, const char *field) {
    json_t *v = json_object_get(obj, field);
    if (v && !json_is_null(v) && !is_content(v)) {
        json_t *l = loc_key(c, loc, field);
        if (l) content_errors(c, l, v);
        json_decref(l);
    }
}

static json_t *too_short_ctx(const char *field_type) {
    return json_pack("{s:s,s:i,s:i}", "field_type", field_type, "min_length", 1,
                     "actual_length", 0);
}

static void check_noul(vctx *c, const json_t *loc, json_t *q) {
    json_t *crit = json_object_get(q, "criteria");
    if (!crit || json_is_null(crit)) return;
    json_t *l = loc_key(c, loc, "criteria");
    if (!l) return;
    if (!json_is_object(crit))
        add_err(c, "dict_type", json_incref(l), "Input should be a valid dictionary", crit, NULL);
    else {
        check_optional_content(c, l, crit, "true");
        check_optional_content(c, l, crit, "false");
    }
    json_decref(l);
}

static void check_choice(vctx *c, const json_t *loc, json_t *q) {
    json_t *crit = json_object_get(q, "criteria");
    json_t *l = loc_key(c, loc, "criteria");
    if (!l) return;
    if (!crit) add_err(c, "missing", json_incref(l), "Field required", q, NULL);
    else if (!json_is_object(crit))
        add_err(c, "dict_type", json_incref(l), "Input should be a valid dictionary", crit, NULL);
    else {
        const char *key;
        json_t *v;
        json_object_foreach(crit, key, v) {
            if (json_is_null(v) || is_content(v)) continue;
            json_t *kl = loc_key(c, l, key);
            if (kl) content_errors(c, kl, v);
            json_decref(kl);
        }
    }
    json_decref(l);
}

static void check_score(vctx *c, const json_t *loc, json_t *q) {
    json_t *crit = json_object_get(q, "criteria");
    json_t *l = loc_key(c, loc, "criteria");
    if (!l) return;
    if (!crit) add_err(c, "missing", json_incref(l), "Field required", q, NULL);
    else if (!json_is_array(crit))
        add_err(c, "list_type", json_incref(l), "Input should be a valid list", crit, NULL);
    else if (json_array_size(crit) == 0)
        add_err(c, "too_short", json_incref(l),
                "List should have at least 1 item after validation, not 0", crit,
                too_short_ctx("List"));
    else {
        for (size_t i = 0; i < json_array_size(crit); i++) {
            json_t *v = json_array_get(crit, i);
            if (is_content(v)) continue;   /* levels are not nullable */
            json_t *il = loc_plus(c, l, json_integer((json_int_t)i));
            if (il) content_errors(c, il, v);
            json_decref(il);
        }
    }
    json_decref(l);
}

/* Parse "type"; -1 when it is not one of the three. */
static int type_of(const json_t *t) {
    if (!json_is_string(t)) return -1;
    const char *s = json_string_value(t);
    if (json_string_length(t) != strlen(s)) return -1;
    if (!strcmp(s, "noul")) return REQ_NOUL;
    if (!strcmp(s, "choice")) return REQ_CHOICE;
    if (!strcmp(s, "score")) return REQ_SCORE;
    return -1;
}

static void check_question(vctx *c, const json_t *qloc, json_t *q) {
    if (!json_is_object(q)) {
        add_err(c, "model_attributes_type", json_incref((json_t *)qloc),
                "Input should be a valid dictionary or object to extract fields from", q, NULL);
        return;
    }
    json_t *t = json_object_get(q, "type");
    if (!t) {
        add_err(c, "union_tag_not_found", json_incref((json_t *)qloc),
                "Unable to extract tag using discriminator 'type'", q,
                json_pack("{s:s}", "discriminator", "'type'"));
        return;
    }
    int type = type_of(t);
    if (type < 0) { c->usage = true; return; }
    json_t *loc = loc_key(c, qloc, req_type_name((req_type)type));
    if (!loc) return;
    check_optional_content(c, loc, q, "instructions");
    if (type == REQ_NOUL) check_noul(c, loc, q);
    else if (type == REQ_CHOICE) check_choice(c, loc, q);
    else check_score(c, loc, q);
    json_decref(loc);
}

static void check_questions(vctx *c, json_t *body, const json_t *root_loc) {
    json_t *qs = json_object_get(body, "questions");
    json_t *loc = loc_key(c, root_loc, "questions");
    if (!loc) return;
    if (!qs) add_err(c, "missing", json_incref(loc), "Field required", body, NULL);
    else if (!json_is_object(qs))
        add_err(c, "dict_type", json_incref(loc), "Input should be a valid dictionary", qs, NULL);
    else if (json_object_size(qs) == 0)
        add_err(c, "too_short", json_incref(loc),
                "Dictionary should have at least 1 item after validation, not 0", qs,
                too_short_ctx("Dictionary"));
    else {
        const char *id;
        json_t *q;
        json_object_foreach(qs, id, q) {
            json_t *qloc = loc_key(c, loc, id);
            if (qloc) check_question(c, qloc, q);
            json_decref(qloc);
        }
    }
    json_decref(loc);
}

static void check_body(vctx *c, json_t *body) {
    json_t *root = json_pack("[s]", "body");
    if (!root) { c->oom = true; return; }
    if (!json_is_object(body)) {
        add_err(c, "model_attributes_type", json_incref(root),
                "Input should be a valid dictionary or object to extract fields from", body, NULL);
        json_decref(root);
        return;
    }
    /* state: a null state is refused as missing, as the hosted service does */
    json_t *state = json_object_get(body, "state");
    if (!state || json_is_null(state))
        add_err(c, "missing", loc_key(c, root, "state"), "Field required", body, NULL);
    else if (!is_content(state)) {
        json_t *l = loc_key(c, root, "state");
        if (l) content_errors(c, l, state);
        json_decref(l);
    }
    json_t *model = json_object_get(body, "model");
    if (!model) add_err(c, "missing", loc_key(c, root, "model"), "Field required", body, NULL);
    else if (!json_is_string(model))
        add_err(c, "string_type", loc_key(c, root, "model"), "Input should be a valid string",
                model, NULL);
    check_questions(c, body, root);
    const char *key;
    json_t *v;
    json_object_foreach(body, key, v) {
        if (strcmp(key, "state") && strcmp(key, "model") && strcmp(key, "questions"))
            c->usage = true;
    }
    json_decref(root);
}

/* ---- phase 4: limits ------------------------------------------------------ */

/* Python truthiness of a JSON value (NULL = absent = falsy). */
static bool py_truthy(const json_t *v) {
    switch (v ? json_typeof(v) : JSON_NULL) {
    case JSON_STRING: return json_string_length(v) > 0;
    case JSON_OBJECT: return json_object_size(v) > 0;
    case JSON_ARRAY: return json_array_size(v) > 0;
    case JSON_INTEGER: return json_integer_value(v) != 0;
    case JSON_REAL: return json_real_value(v) != 0;
    case JSON_TRUE: return true;
    default: return false;
    }
}

/* NULL when the question is within limits, else the plain-string detail:
 * *with_id says whether the id must follow the returned text.  buf holds a
 * detail that names a configured number. */
static const char *limit_error(json_t *q, size_t max_choices, char *buf, size_t cap,
                               bool *with_id) {
    json_t *crit = json_object_get(q, "criteria");
    *with_id = true;
    switch (type_of(json_object_get(q, "type"))) {
    case REQ_NOUL:
        if (!py_truthy(json_object_get(q, "instructions")) &&
            !(json_is_object(crit) && (py_truthy(json_object_get(crit, "true")) ||
                                       py_truthy(json_object_get(crit, "false")))))
            return "Noul question must have criteria or instructions: ";
        return NULL;
    case REQ_CHOICE:
        if (json_object_size(crit) == 0) return "Choice question must have at least one choice: ";
        *with_id = false;
        if (json_object_size(crit) <= max_choices) return NULL;
        snprintf(buf, cap, "Too many choices. Must have at most %zu choices.", max_choices);
        return buf;
    case REQ_SCORE:
        *with_id = false;
        if (json_array_size(crit) > REQ_MAX_SCORE_LEVELS)
            return "Too many score levels. Must have at most 10 levels.";
        return NULL;
    }
    return NULL;
}

/* ---- building the struct -------------------------------------------------- */

typedef struct key_pos {
    const char *key;
    size_t index;
} key_pos;

static int key_pos_cmp(const void *a, const void *b) {
    /* strcmp compares as unsigned char: code point order for UTF-8 */
    return strcmp(((const key_pos *)a)->key, ((const key_pos *)b)->key);
}

static bool set_option(req_option *o, const char *id, json_t *desc, size_t request_index) {
    o->id = id;
    o->description = json_is_null(desc) ? NULL : json_incref(desc);
    o->request_index = request_index;
    return true;
}

static bool build_noul(req_question *rq, json_t *q) {
    json_t *crit = json_object_get(q, "criteria");
    static const char *const ids[2] = {"true", "false"};
    static const char *const defaults[2] = {NOUL_TRUE_DEFAULT, NOUL_FALSE_DEFAULT};
    for (size_t k = 0; k < 2; k++) {
        json_t *given = json_is_object(crit) ? json_object_get(crit, ids[k]) : NULL;
        if (given) set_option(&rq->options[k], ids[k], given, k);
        else {
            json_t *d = json_string(defaults[k]);
            if (!d) return false;
            set_option(&rq->options[k], ids[k], d, k);
            json_decref(d);
        }
        rq->by_request[k] = k;
    }
    return true;
}

static bool build_choice(req_question *rq, json_t *crit) {
    size_t n = rq->n_options;
    key_pos *kp = malloc(n * sizeof *kp);
    if (!kp) return false;
    size_t i = 0;
    const char *key;
    json_t *v;
    json_object_foreach(crit, key, v) {
        kp[i].key = key;
        kp[i].index = i;
        i++;
    }
    qsort(kp, n, sizeof *kp, key_pos_cmp);
    for (size_t r = 0; r < n; r++) {
        set_option(&rq->options[r], kp[r].key, json_object_get(crit, kp[r].key), kp[r].index);
        rq->by_request[kp[r].index] = r;
    }
    free(kp);
    return true;
}

static void build_score(req_question *rq, json_t *crit) {
    for (size_t i = 0; i < rq->n_options; i++) {
        set_option(&rq->options[i], SCORE_IDS[i], json_array_get(crit, i), i);
        rq->by_request[i] = i;
    }
}

static bool build_question(req_question *rq, const char *id, json_t *q) {
    json_t *crit = json_object_get(q, "criteria");
    rq->id = id;
    rq->type = (req_type)type_of(json_object_get(q, "type"));
    rq->question = q;
    json_t *ins = json_object_get(q, "instructions");
    rq->instructions = json_is_null(ins) ? NULL : ins;
    rq->n_options = rq->type == REQ_NOUL     ? 2
                    : rq->type == REQ_CHOICE ? json_object_size(crit)
                                             : json_array_size(crit);
    rq->options = calloc(rq->n_options, sizeof *rq->options);
    rq->by_request = calloc(rq->n_options, sizeof *rq->by_request);
    if (!rq->options || !rq->by_request) return false;
    if (rq->type == REQ_NOUL) return build_noul(rq, q);
    if (rq->type == REQ_CHOICE) return build_choice(rq, crit);
    build_score(rq, crit);
    return true;
}

void req_request_free(req_request *req) {
    if (!req) return;
    for (size_t i = 0; i < req->n_questions && req->questions; i++) {
        req_question *q = &req->questions[i];
        for (size_t k = 0; k < q->n_options && q->options; k++) json_decref(q->options[k].description);
        free(q->options);
        free(q->by_request);
    }
    free(req->questions);
    json_decref(req->body);
    *req = (req_request){0};
}

static clef_status build_request(json_t *body, req_request *out, clef_error *err) {
    json_t *qs = json_object_get(body, "questions");
    out->body = json_incref(body);
    out->model = json_string_value(json_object_get(body, "model"));
    out->state = json_object_get(body, "state");
    size_t n = json_object_size(qs);
    out->questions = calloc(n, sizeof *out->questions);
    if (!out->questions) goto oom;
    const char *id;
    json_t *q;
    json_object_foreach(qs, id, q) {
        out->n_questions++;   /* counted first so that free() sees partial work */
        if (!build_question(&out->questions[out->n_questions - 1], id, q)) goto oom;
    }
    return CLEF_OK;
oom:
    req_request_free(out);
    return clef_err_set(err, CLEF_ERR_NOMEM, "out of memory building the request");
}

/* ---- entry points --------------------------------------------------------- */

static clef_status reject_invalid_request(req_reject *reject, clef_error *err) {
    clef_status st = req_reject_typed(400, "api_usage_error", "Invalid request.", reject, err);
    return st == CLEF_OK ? CLEF_ERR_REQUEST : st;
}

static clef_status validate(json_t *body, const req_params *p, req_reject *reject,
                            clef_error *err) {
    vctx c = {.errors = json_array()};
    if (!c.errors) return clef_err_set(err, CLEF_ERR_NOMEM, "out of memory validating the request");
    check_body(&c, body);
    if (c.oom) {
        json_decref(c.errors);
        return clef_err_set(err, CLEF_ERR_NOMEM, "out of memory validating the request");
    }
    if (c.usage) {
        json_decref(c.errors);
        return reject_invalid_request(reject, err);
    }
    if (json_array_size(c.errors)) {
        clef_status st = reject_from(422, json_pack("{s:o}", "detail", c.errors), reject, err);
        return st == CLEF_OK ? CLEF_ERR_REQUEST : st;
    }
    json_decref(c.errors);

    json_t *model_v = json_object_get(body, "model");
    const char *model = json_string_value(model_v);
    size_t model_len = json_string_length(model_v);
    /* A name with a NUL in it is no configured name (a C comparison would
     * stop at the NUL); the message shows it whole. */
    if (p->model_known &&
        (model_len != strlen(model) || !p->model_known(model, p->model_known_user))) {
        static const char pre[] = "Unknown model: ";
        char *msg = malloc(sizeof pre + model_len);
        if (!msg) return clef_err_set(err, CLEF_ERR_NOMEM, "out of memory");
        memcpy(msg, pre, sizeof pre - 1);
        memcpy(msg + sizeof pre - 1, model, model_len);
        clef_status st = reject_from(400,
                                     json_pack("{s:{s:s,s:s%}}", "detail", "error_type",
                                               "api_usage_error", "message", msg,
                                               sizeof pre - 1 + model_len),
                                     reject, err);
        free(msg);
        return st == CLEF_OK ? CLEF_ERR_REQUEST : st;
    }
    json_t *qs = json_object_get(body, "questions");
    if (json_object_size(qs) > (size_t)p->max_questions) {
        char text[96];
        snprintf(text, sizeof text, "Too many questions. Must have at most %d questions.",
                 p->max_questions);
        clef_status st = req_reject_text(400, text, reject, err);
        return st == CLEF_OK ? CLEF_ERR_REQUEST : st;
    }
    const char *id;
    json_t *q;
    json_object_foreach(qs, id, q) {
        if (id[0] == '\0') {
            clef_status st = req_reject_text(400, "Question key cannot be empty.", reject, err);
            return st == CLEF_OK ? CLEF_ERR_REQUEST : st;
        }
    }
    json_object_foreach(qs, id, q) {
        bool with_id;
        char buf[96];
        const char *msg = limit_error(q, (size_t)p->max_choices, buf, sizeof buf, &with_id);
        if (!msg) continue;
        size_t n = strlen(msg), m = with_id ? strlen(id) : 0;
        char *text = malloc(n + m + 1);
        if (!text) return clef_err_set(err, CLEF_ERR_NOMEM, "out of memory");
        memcpy(text, msg, n);
        memcpy(text + n, id, m);
        text[n + m] = '\0';
        clef_status st = req_reject_text(400, text, reject, err);
        free(text);
        return st == CLEF_OK ? CLEF_ERR_REQUEST : st;
    }
    return CLEF_OK;
}

clef_status req_from_json(json_t *body, const req_params *params, req_request *out,
                          req_reject *reject, clef_error *err) {
    req_params p = params_in_force(params);
    *out = (req_request){0};
    *reject = (req_reject){0};
    if (!body) return clef_err_set(err, CLEF_ERR_INVALID_ARG, "req_from_json: NULL body");
    clef_status st = validate(body, &p, reject, err);
    if (st != CLEF_OK) return st;
    return build_request(body, out, err);
}

clef_status req_parse(const char *json, size_t len, const req_params *params,
                      req_request *out, req_reject *reject, clef_error *err) {
    req_params p = params_in_force(params);
    *out = (req_request){0};
    *reject = (req_reject){0};
    char why[256];
    json_t *body = NULL;
    pyjson_load_status ls = pyjson_loadb(json, len, p.max_depth, &body, why, sizeof why);
    if (ls == PYJSON_LOAD_NOMEM)
        return clef_err_set(err, CLEF_ERR_NOMEM, "out of memory parsing the request body");
    if (ls == PYJSON_LOAD_EMPTY) {
        /* FastAPI's answer to an empty body */
        json_t *d = json_pack("{s:[{s:s,s:[s],s:s,s:n}]}", "detail", "type", "missing", "loc",
                              "body", "msg", "Field required", "input");
        clef_status st = reject_from(422, d, reject, err);
        return st == CLEF_OK ? CLEF_ERR_REQUEST : st;
    }
    if (ls != PYJSON_LOAD_OK) {
        char msg[512];
        switch (ls) {
        case PYJSON_LOAD_UTF8: snprintf(msg, sizeof msg, "Request body is not valid UTF-8: %s", why); break;
        case PYJSON_LOAD_DEPTH: snprintf(msg, sizeof msg, "Request body is nested too deeply: %s", why); break;
        case PYJSON_LOAD_RANGE:
            snprintf(msg, sizeof msg,
                     "Request body has a number out of range (integers must fit in 64 bits): %s", why);
            break;
        case PYJSON_LOAD_NUL_KEY:
            snprintf(msg, sizeof msg, "Request body has an object key containing NUL: %s", why);
            break;
        default: snprintf(msg, sizeof msg, "Request body is not valid JSON: %s", why); break;
        }
        clef_status st = req_reject_text(400, msg, reject, err);
        return st == CLEF_OK ? CLEF_ERR_REQUEST : st;
    }
    clef_status st = req_from_json(body, &p, out, reject, err);
    json_decref(body);
    return st;
}
