/*
 * model/synth.c — random-weight `qwen35` / `clef` models written as GGUF.
 *
 * Three parts: the shape table, the vocabulary generator (byte tokens,
 * letter merges, added tokens, padding), and the tensor plan, a list of
 * (name, shape, value distribution) that is turned into metadata +
 * deferred tensors of a gguf_writer and then streamed row chunk by row chunk
 * (model/quantize_model.c's qm_write_rows), so memory stays at one chunk.
 * Tensor names and order follow ../shared/oracle/clef-tiny (llama.cpp's
 * qwen35 + clef layout).
 */
#include "model/synth.h"

#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "core/dtype.h"
#include "core/error.h"
#include "core/threadpool.h"
#include "format/gguf_write.h"

/* ---- shapes ------------------------------------------------------------------- */

static const synth_shape shapes[] = {
    /* like ../shared/oracle/clef-tiny */
    {"tiny", 64, 4, 128, 4, 2, 32, 8, {2, 1, 1, 0}, 4, 2, 4, 16, 4, 832, 262144, 32, 2, 2, 4, 64},
    /* every matrix row a multiple of 256, so Q4_K_M exercises Q4_K and Q6_K */
    {"small", 256, 4, 256, 4, 1, 64, 16, {3, 3, 2, 0}, 4, 2, 4, 64, 4, 832, 262144, 64, 1, 1, 2, 128},
    /* Qwen3.5-0.8B's backbone; the Flash head design */
    {"0.8b", 1024, 24, 3584, 8, 2, 256, 64, {11, 11, 10, 0}, 4, 16, 16, 128, 4, 248320, 262144,
     1024, 2, 4, 16, 4096},
    /* Clef-Flash (clef-model.md §1, §3) */
    {"flash", 4096, 32, 12288, 16, 4, 256, 64, {11, 11, 10, 0}, 4, 16, 32, 128, 4, 248320, 262144,
     1024, 2, 4, 16, 4096},
};

const synth_shape *synth_find_shape(const char *name) {
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        if (!strcmp(shapes[i].name, name)) return &shapes[i];
    return NULL;
}

/* ---- counter-based random numbers -------------------------------------------------- */

static uint64_t mix64(uint64_t z) { /* splitmix64's finaliser */
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static uint64_t hash_at(uint64_t key, uint64_t i) { return mix64(key + (i + 1) * 0x9e3779b97f4a7c15ULL); }

static uint64_t hash_str(const char *s) { /* FNV-1a */
    uint64_t h = 0xcbf29ce484222325ULL;
    for (; *s; s++) h = (h ^ (uint8_t)*s) * 0x100000001b3ULL;
    return h;
}

/* Irwin–Hall: the sum of four 16-bit uniforms, centred and scaled to unit
 * variance (variance of one: (65536² − 1)/12). */
static float unit_normal(uint64_t h) {
    uint64_t s = (h & 0xffff) + (h >> 16 & 0xffff) + (h >> 32 & 0xffff) + (h >> 48);
    return (float)(((double)s - 131070.0) / sqrt((65536.0 * 65536.0 - 1.0) / 3.0));
}

static float unit_uniform(uint64_t h) { return (float)(h >> 40) * 0x1p-24f; }

/* ---- vocabulary ------------------------------------------------------------------ */

enum { TT_NORMAL = 1, TT_CONTROL = 3, TT_USER = 4, TT_UNUSED = 5 };

typedef struct vocab_build {
    synth_vocab *v;
    size_t cap;                /* token slots allocated (n_vocab) */
    uint32_t *set;             /* open addressing: token index + 1, 0 = empty */
    size_t set_cap;            /* power of two */
    size_t merge_cap;
    int32_t byte_id[256];      /* token id of each byte */
} vocab_build;

/* Whether s is a token; *slot is its set entry (token index + 1), or the
 * empty entry where it would go. */
static bool vb_has(const vocab_build *b, const char *s, size_t len, uint32_t **slot) {
    uint64_t h = 0xcbf29ce484222325ULL;
    for (size_t i = 0; i < len; i++) h = (h ^ (uint8_t)s[i]) * 0x100000001b3ULL;
    for (size_t i = (size_t)h & (b->set_cap - 1);; i = (i + 1) & (b->set_cap - 1)) {
        uint32_t t = b->set[i];
        if (!t) {
            *slot = &b->set[i];
            return false;
        }
        if (b->v->lens[t - 1] == len && !memcmp(b->v->tokens[t - 1], s, len)) {
            *slot = &b->set[i];
            return true;
        }
    }
}

/* Append token s (copied); false when out of memory or already present. */
static bool vb_add(vocab_build *b, const char *s, size_t len, int32_t type) {
    uint32_t *slot;
    synth_vocab *v = b->v;
    if (v->n == b->cap || vb_has(b, s, len, &slot)) return false;
    char *copy = malloc(len + 1);
    if (!copy) return false;
    memcpy(copy, s, len);
    copy[len] = 0;
    v->tokens[v->n] = copy;
    v->lens[v->n] = len;
    v->types[v->n] = type;
    v->n++;
    *slot = (uint32_t)v->n;
    return true;
}

static size_t utf8_put(uint32_t cp, char *out) {
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    out[0] = (char)(0xc0 | cp >> 6);
    out[1] = (char)(0x80 | (cp & 0x3f));
    return 2;
}

/* GPT-2's bytes_to_unicode: printable bytes stand for themselves and come
 * first; the other 68 map to U+0100.. in byte order and follow. */
static bool add_byte_tokens(vocab_build *b) {
    int order[256], n = 0, extra = 0;
    uint32_t cp[256];
    for (int c = 0; c < 256; c++) {
        bool printable = (c >= 33 && c <= 126) || (c >= 161 && c <= 172) || c >= 174;
        cp[c] = printable ? (uint32_t)c : 0;
        if (printable) order[n++] = c;
    }
    for (int c = 0; c < 256; c++)
        if (!cp[c] && !((c >= 33 && c <= 126) || (c >= 161 && c <= 172) || c >= 174)) {
            cp[c] = 256 + (uint32_t)extra++;
            order[n++] = c;
        }
    for (int i = 0; i < 256; i++) {
        char s[4];
        b->byte_id[order[i]] = i;
        if (!vb_add(b, s, utf8_put(cp[order[i]], s), TT_NORMAL)) return false;
    }
    return true;
}

static const char letters_by_freq[] = "etaoinshrdlcumwfgypbvkjxqz";
static const int letter_weight[26] = {127, 91, 82, 75, 70, 67, 63, 61, 60, 43, 40, 28, 28,
                                      24,  24, 22, 20, 20, 19, 15, 10, 8,  2,  2,  1,  1};

static char weighted_letter(uint64_t h) {
    int r = (int)(h % 1000), acc = 0;
    for (int i = 0; i < 26; i++)
        if (r < (acc += letter_weight[i])) return letters_by_freq[i];
    return 'e';
}

/* Merge left+right (both existing tokens) into a new token. */
static bool add_merge(vocab_build *b, size_t left, size_t right) {
    synth_vocab *v = b->v;
    size_t ll = v->lens[left], lr = v->lens[right];
    char buf[40];
    if (ll + lr > 16 || v->n_merges == b->merge_cap) return false;
    memcpy(buf, v->tokens[left], ll);
    memcpy(buf + ll, v->tokens[right], lr);
    if (!vb_add(b, buf, ll + lr, TT_NORMAL)) return false;
    char *m = malloc(ll + lr + 2);
    if (!m) return false; /* the token stays; a missing merge only shortens the list */
    memcpy(m, v->tokens[left], ll);
    m[ll] = ' ';
    memcpy(m + ll + 1, v->tokens[right], lr);
    m[ll + lr + 1] = 0;
    v->merges[v->n_merges++] = m;
    return true;
}

static size_t token_of_char(char c) { /* printable ASCII byte tokens come first, from '!' */
    return (size_t)(c - 33);
}

/* Word-like merges: first "Ġ"+letter (space-led words), then repeatedly an
 * existing piece + a frequency-weighted letter (or a short piece), so early
 * merges are short and frequent as in a learned BPE. */
static void add_random_merges(vocab_build *b, size_t target) {
    synth_vocab *v = b->v;
    const size_t space = 188 + 32; /* byte 0x20 is the 33rd non-printable: U+0120 'Ġ' */
    size_t first = 256;
    for (int i = 0; i < 26 && v->n_merges < target; i++)
        add_merge(b, space, token_of_char(letters_by_freq[i]));
    uint64_t key = 0x5eedc0deULL;
    for (uint64_t it = 0; v->n_merges < target && it < 64 * (uint64_t)target + 1024; it++) {
        uint64_t h = hash_at(key, 2 * it), h2 = hash_at(key, 2 * it + 1);
        size_t pool = v->n - first + 26;          /* created pieces + single letters */
        size_t pick = (size_t)(h % pool);
        size_t left = pick < 26 ? token_of_char(letters_by_freq[pick]) : first + pick - 26;
        size_t right = token_of_char(weighted_letter(h2 >> 8));
        if ((h2 & 3) == 0 && v->n > first) {      /* a quarter: a short piece on the right */
            size_t r = first + (size_t)((h2 >> 20) % (v->n - first));
            if (v->lens[r] <= 3 && v->tokens[r][0] != (char)0xc4) right = r;
        }
        add_merge(b, left, right);
    }
}

/* English the vocabulary is trained on first, so that System One prompts
 * (the fixed prompt text, JSON option objects, support-ticket states)
 * tokenize about as densely as with a real tokenizer. */
static const char train_prompt[] = /* in every request: weighted TRAIN_PROMPT_WEIGHT */
    "Read the complete state and schema. Decide every field jointly. Each answer must be "
    "exactly one of that field's allowed options.\nSTATE:\n\n\nSCHEMA FIELDS:\nFIELD 1\nID: "
    "is_urgent\nTYPE: noul\nINSTRUCTION: Does this convey urgency?\nALLOWED OPTIONS:\nOPTION 1: "
    "{\"description\":\"The proposition is true or the answer is yes.\",\"option_id\":\"true\"}\n"
    "OPTION 2: {\"description\":\"The proposition is false or the answer is no.\",\"option_id\":"
    "\"false\"}\nEND FIELD\nFIELD 2\nID: department\nTYPE: choice\nINSTRUCTION: Which team "
    "should handle this request?\nALLOWED OPTIONS:\nOPTION 1: {\"description\":\"Payments, "
    "invoices, refunds and charges\",\"option_id\":\"billing\"}\nOPTION 2: {\"option_id\":"
    "\"technical\"}\nOPTION 3: {\"option_id\":\"sales\"}\nEND FIELD\nFIELD 3\nID: frustration\n"
    "TYPE: score\nINSTRUCTION: How frustrated is the customer?\nALLOWED OPTIONS:\nOPTION 1: "
    "{\"description\":\"Calm\",\"option_id\":\"0\"}\nOPTION 2: {\"description\":\"Frustrated\","
    "\"option_id\":\"1\"}\nOPTION 3: {\"description\":\"Very angry\",\"option_id\":\"2\"}\n"
    "END FIELD\n\nJOINT SCHEMA DECISIONS:\n";

static const char train_text[] =
    "Hello, I am writing because my payment failed again this morning and I still have not "
    "received any answer from your support team. The order was placed last week, the package "
    "arrived late and the box was damaged. I would like a refund or a replacement as soon as "
    "possible. Could you please check my account and tell me what happened? This is the third "
    "time that the same problem has happened and I am very disappointed with the service. "
    "The customer says that the invoice shows the wrong amount, that the product does not work "
    "and that nobody called back after the last message. She wants to cancel her subscription "
    "unless the issue is fixed today. We have reviewed the request and we think it should be "
    "handled by the billing department, but the technical team may need to look at the error "
    "in the application logs. Thank you for your patience while we investigate. The user asked "
    "about pricing, plans, discounts and the date of the next release. He also mentioned that "
    "the website was slow and that the login page returned an error when he tried to reset his "
    "password. Please read the message carefully, decide whether it is urgent, which team "
    "should answer it, and how angry the person seems to be. Then write a short summary of the "
    "situation for the support agent who will take over the ticket. "
    "{\"role\":\"user\",\"content\":\"My card was charged twice for the same order.\"} "
    "{\"role\":\"assistant\",\"content\":\"I am sorry to hear that. Let me look into it.\"} "
    "The information in the state is about an account, a payment, a delivery, a contract, a "
    "question about the product, or a complaint about the quality of the work. There are "
    "many other people with the same question, and they would like to know when it will be "
    "available, where they can find the documentation, and who they should contact for help.";

#define TRAIN_MAX_PIECES 1024
#define TRAIN_MAX_LEN 64
#define TRAIN_PROMPT_WEIGHT 8

typedef struct train_piece {
    int32_t id[TRAIN_MAX_LEN];
    int n;
    int weight;                /* occurrences it stands for */
} train_piece;

static bool is_letter(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
static bool is_digit(char c) { return c >= '0' && c <= '9'; }
static bool is_space(char c) { return c == ' ' || c == '\n'; }

/* Roughly the Qwen2 pre-tokenizer on ASCII: an optional non-letter then
 * letters; digits alone; an optional space then punctuation (then newlines). */
static size_t next_piece(const char *s, size_t i, size_t *len) {
    while (s[i]) {
        size_t j = i;
        if (is_letter(s[j]) || (s[j] != '\n' && !is_digit(s[j]) && is_letter(s[j + 1]))) {
            j++;
            while (is_letter(s[j])) j++;
        } else if (is_digit(s[j])) {
            j++;
        } else if (!is_space(s[j]) || (s[j] == ' ' && s[j + 1] && !is_space(s[j + 1]))) {
            j++;
            while (s[j] && !is_space(s[j]) && !is_letter(s[j]) && !is_digit(s[j])) j++;
            while (s[j] == '\n') j++;
        } else {
            i++;
            continue;
        }
        *len = j - i;
        return i;
    }
    *len = 0;
    return i;
}

/* The id of left+right: an existing token, or a new one.  The merge rule is
 * recorded unless it already is (a pair can reappear after later merges). */
static int32_t train_merge(vocab_build *b, size_t first_merge, int32_t left, int32_t right) {
    synth_vocab *v = b->v;
    size_t ll = v->lens[left], lr = v->lens[right];
    if (ll + lr > TRAIN_MAX_LEN * 2 || v->n_merges == b->merge_cap) return -1;
    char buf[TRAIN_MAX_LEN * 2 + 2];
    memcpy(buf, v->tokens[left], ll);
    buf[ll] = ' ';
    memcpy(buf + ll + 1, v->tokens[right], lr);
    buf[ll + lr + 1] = 0;
    for (size_t i = first_merge; i < v->n_merges; i++)
        if (!strcmp(v->merges[i], buf)) return -2;
    memmove(buf + ll, buf + ll + 1, lr + 1); /* the merged string */
    uint32_t *slot;
    int32_t id;
    if (vb_has(b, buf, ll + lr, &slot)) id = (int32_t)(*slot - 1);
    else if (vb_add(b, buf, ll + lr, TT_NORMAL)) id = (int32_t)v->n - 1;
    else return -1;
    char *m = malloc(ll + lr + 2);
    if (!m) return -1;
    memcpy(m, v->tokens[left], ll);
    m[ll] = ' ';
    memcpy(m + ll + 1, v->tokens[right], lr);
    m[ll + lr + 1] = 0;
    v->merges[v->n_merges++] = m;
    return id;
}

#define PAIR_SLOTS 16384 /* > 2 × the corpus's bytes: the table never fills */

typedef struct pair_count {
    uint64_t key;              /* 1 << 63 | left << 32 | right; 0 = empty */
    int count;
} pair_count;

/* The most frequent adjacent pair (ties: the smallest ids); false when
 * every piece is one token. */
static bool best_pair(const train_piece *p, size_t np, pair_count *tab, int32_t *a, int32_t *b) {
    memset(tab, 0, PAIR_SLOTS * sizeof *tab);
    for (size_t i = 0; i < np; i++)
        for (int k = 0; k + 1 < p[i].n; k++) {
            uint64_t key = 1ULL << 63 | (uint64_t)p[i].id[k] << 32 | (uint32_t)p[i].id[k + 1];
            size_t j = (size_t)mix64(key) & (PAIR_SLOTS - 1);
            while (tab[j].key && tab[j].key != key) j = (j + 1) & (PAIR_SLOTS - 1);
            tab[j].key = key;
            tab[j].count += p[i].weight;
        }
    uint64_t best_key = 0;
    int best = 0;
    for (size_t j = 0; j < PAIR_SLOTS; j++)
        if (tab[j].count > best || (tab[j].count == best && best > 0 && tab[j].key < best_key)) {
            best = tab[j].count;
            best_key = tab[j].key;
        }
    *a = (int32_t)(best_key >> 32 & 0x7fffffff);
    *b = (int32_t)(uint32_t)best_key;
    return best > 0;
}

static void apply_merge(train_piece *p, size_t np, int32_t a, int32_t b, int32_t id) {
    for (size_t i = 0; i < np; i++) {
        int w = 0;
        for (int k = 0; k < p[i].n; k++) {
            if (k + 1 < p[i].n && p[i].id[k] == a && p[i].id[k + 1] == b) {
                p[i].id[w++] = id;
                k++;
            } else {
                p[i].id[w++] = p[i].id[k];
            }
        }
        p[i].n = w;
    }
}

static size_t add_pieces(const vocab_build *b, const char *text, int weight, train_piece *p,
                         size_t np) {
    size_t len;
    for (size_t i = 0;; i += len) {
        i = next_piece(text, i, &len);
        if (!len) break;
        if (len > TRAIN_MAX_LEN || np == TRAIN_MAX_PIECES) continue;
        for (size_t k = 0; k < len; k++) p[np].id[k] = b->byte_id[(uint8_t)text[i + k]];
        p[np].n = (int)len;
        p[np++].weight = weight;
    }
    return np;
}

/* Byte-pair training on the prompt and train_text: merge the most frequent
 * pair until every piece is one token or target merges exist (so with a
 * large vocabulary every word of the text is a token). */
static void add_trained_merges(vocab_build *b, size_t target) {
    train_piece *p = calloc(TRAIN_MAX_PIECES, sizeof *p);
    pair_count *tab = malloc(PAIR_SLOTS * sizeof *tab);
    size_t np = 0, first_merge = b->v->n_merges;
    if (p && tab) {
        np = add_pieces(b, train_prompt, TRAIN_PROMPT_WEIGHT, p, np);
        np = add_pieces(b, train_text, 1, p, np);
    }
    int32_t x, y;
    while (p && tab && b->v->n_merges < target && best_pair(p, np, tab, &x, &y)) {
        int32_t id = train_merge(b, first_merge, x, y);
        if (id == -1) break;
        if (id == -2) { /* already a rule: the result is its token */
            char buf[TRAIN_MAX_LEN * 2 + 1];
            size_t ll = b->v->lens[x], lr = b->v->lens[y];
            uint32_t *slot;
            memcpy(buf, b->v->tokens[x], ll);
            memcpy(buf + ll, b->v->tokens[y], lr);
            if (!vb_has(b, buf, ll + lr, &slot)) break;
            id = (int32_t)(*slot - 1);
        }
        apply_merge(p, np, x, y, id);
    }
    free(p);
    free(tab);
}

static void add_merges(vocab_build *b, size_t target) {
    add_trained_merges(b, target);
    add_random_merges(b, target);
}

static bool add_special_and_pad(vocab_build *b, int n_vocab) {
    synth_vocab *v = b->v;
    static const char *added[] = {"<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>"};
    v->id_endoftext = (int32_t)v->n;
    v->id_im_start = (int32_t)v->n + 1;
    v->id_im_end = (int32_t)v->n + 2;
    for (int i = 0; i < 5; i++)
        if (!vb_add(b, added[i], strlen(added[i]), i < 3 ? TT_CONTROL : TT_USER)) return false;
    while (v->n < (size_t)n_vocab) {
        char pad[32];
        int len = snprintf(pad, sizeof pad, "[PAD%zu]", v->n);
        if (!vb_add(b, pad, (size_t)len, TT_UNUSED)) return false;
    }
    return true;
}

clef_status synth_vocab_build(int n_vocab, synth_vocab *out, clef_error *err) {
    memset(out, 0, sizeof *out);
    if (n_vocab < 256 + 5 + 26)
        return clef_err_set(err, CLEF_ERR_INVALID_ARG, "synth: vocabulary of %d is too small", n_vocab);
    vocab_build b = {.v = out, .cap = (size_t)n_vocab};
    b.set_cap = 1;
    while (b.set_cap < 2 * (size_t)n_vocab) b.set_cap *= 2;
    /* ~5% of the rows stay [PAD] (the oracle's tiny vocabulary keeps 42 of 832) */
    b.merge_cap = (size_t)n_vocab - 261 - (size_t)n_vocab / 20;
    out->tokens = calloc((size_t)n_vocab, sizeof *out->tokens);
    out->lens = calloc((size_t)n_vocab, sizeof *out->lens);
    out->types = calloc((size_t)n_vocab, sizeof *out->types);
    out->merges = calloc(b.merge_cap, sizeof *out->merges);
    b.set = calloc(b.set_cap, sizeof *b.set);
    bool ok = out->tokens && out->lens && out->types && out->merges && b.set && add_byte_tokens(&b);
    if (ok) add_merges(&b, b.merge_cap);
    ok = ok && add_special_and_pad(&b, n_vocab);
    free(b.set);
    if (!ok) {
        synth_vocab_free(out);
        return clef_err_set(err, CLEF_ERR_NOMEM, "synth: out of memory building the vocabulary");
    }
    return CLEF_OK;
}

void synth_vocab_free(synth_vocab *v) {
    if (!v) return;
    for (size_t i = 0; v->tokens && i < v->n; i++) free(v->tokens[i]);
    for (size_t i = 0; v->merges && i < v->n_merges; i++) free(v->merges[i]);
    free(v->tokens);
    free(v->lens);
    free(v->types);
    free(v->merges);
    memset(v, 0, sizeof *v);
}

/* ---- the tensor plan -------------------------------------------------------------- */

typedef enum gen_kind { GEN_NORMAL, GEN_UNIFORM, GEN_SCALES } gen_kind;

typedef struct plan_tensor {
    char name[64];
    uint32_t n_dims;
    int64_t ne[4];
    uint32_t type;             /* before the recipe: F32, or the head's matrix type */
    gen_kind kind;
    float a, b;                /* normal: mean, std; uniform: lo, hi */
} plan_tensor;

typedef struct plan {
    plan_tensor *t;
    size_t n, cap;
    bool oom;
    uint32_t head_mat_type;
} plan;

static void add(plan *p, uint32_t type, gen_kind kind, float a, float b, int64_t ne0, int64_t ne1,
                const char *fmt, ...) CLEF_PRINTF(8, 9);

static void add(plan *p, uint32_t type, gen_kind kind, float a, float b, int64_t ne0, int64_t ne1,
                const char *fmt, ...) {
    if (p->oom) return;
    if (p->n == p->cap) {
        size_t cap = p->cap ? 2 * p->cap : 256;
        plan_tensor *t = realloc(p->t, cap * sizeof *t);
        if (!t) {
            p->oom = true;
            return;
        }
        p->t = t;
        p->cap = cap;
    }
    plan_tensor *t = &p->t[p->n++];
    memset(t, 0, sizeof *t);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t->name, sizeof t->name, fmt, ap);
    va_end(ap);
    t->n_dims = ne1 ? 2 : 1;
    t->ne[0] = ne0;
    t->ne[1] = ne1 ? ne1 : 1;
    t->ne[2] = t->ne[3] = 1;
    t->type = type;
    t->kind = kind;
    t->a = a;
    t->b = b;
}

#define F32 CLEF_DTYPE_F32
/* a matrix [in] -> [out]: N(0, 1/in) */
#define MAT(p, type, in, out, ...) add(p, type, GEN_NORMAL, 0.f, 1.f / sqrtf((float)(in)), in, out, __VA_ARGS__)
#define NORM(p, n, ...) add(p, F32, GEN_NORMAL, 1.f, 0.1f, n, 0, __VA_ARGS__)
#define BIAS(p, n, ...) add(p, F32, GEN_NORMAL, 0.f, 0.02f, n, 0, __VA_ARGS__)

static void plan_gdn_layer(plan *p, const synth_shape *s, int il) {
    int64_t E = s->n_embd, Hv = s->ssm_v_head, Dv = s->ssm_head_dim;
    int64_t conv = 2 * (int64_t)s->ssm_k_head * s->ssm_head_dim + Hv * Dv;
    NORM(p, E, "blk.%d.attn_norm.weight", il);
    NORM(p, E, "blk.%d.post_attention_norm.weight", il);
    MAT(p, F32, E, conv, "blk.%d.attn_qkv.weight", il);
    MAT(p, F32, E, Hv * Dv, "blk.%d.attn_gate.weight", il);
    add(p, F32, GEN_NORMAL, 0.f, 1.f / sqrtf((float)s->conv_kernel), s->conv_kernel, conv,
        "blk.%d.ssm_conv1d.weight", il);
    add(p, F32, GEN_UNIFORM, -6.9f, -2.3f, Hv, 0, "blk.%d.ssm_dt.bias", il);
    add(p, F32, GEN_UNIFORM, -16.f, -1.f, Hv, 0, "blk.%d.ssm_a", il);
    MAT(p, F32, E, Hv, "blk.%d.ssm_beta.weight", il);
    MAT(p, F32, E, Hv, "blk.%d.ssm_alpha.weight", il);
    NORM(p, Dv, "blk.%d.ssm_norm.weight", il);
    MAT(p, F32, Hv * Dv, E, "blk.%d.ssm_out.weight", il);
}

static void plan_attn_layer(plan *p, const synth_shape *s, int il) {
    int64_t E = s->n_embd, D = s->head_dim, H = s->n_head, Hkv = s->n_head_kv;
    NORM(p, E, "blk.%d.attn_norm.weight", il);
    NORM(p, E, "blk.%d.post_attention_norm.weight", il);
    MAT(p, F32, E, 2 * H * D, "blk.%d.attn_q.weight", il);
    MAT(p, F32, E, Hkv * D, "blk.%d.attn_k.weight", il);
    MAT(p, F32, E, Hkv * D, "blk.%d.attn_v.weight", il);
    MAT(p, F32, H * D, E, "blk.%d.attn_output.weight", il);
    NORM(p, D, "blk.%d.attn_q_norm.weight", il);
    NORM(p, D, "blk.%d.attn_k_norm.weight", il);
}

static void plan_backbone(plan *p, const synth_shape *s) {
    int64_t E = s->n_embd, V = s->n_vocab, F = s->n_ff;
    add(p, F32, GEN_NORMAL, 0.f, 1.f, E, V, "token_embd.weight");
    NORM(p, E, "output_norm.weight");
    MAT(p, F32, E, V, "output.weight");
    for (int il = 0; il < s->n_layer; il++) {
        if ((il + 1) % s->full_attn_interval) plan_gdn_layer(p, s, il);
        else plan_attn_layer(p, s, il);
        MAT(p, F32, E, F, "blk.%d.ffn_gate.weight", il);
        MAT(p, F32, E, F, "blk.%d.ffn_up.weight", il);
        MAT(p, F32, F, E, "blk.%d.ffn_down.weight", il);
    }
}

/* Head tensors are "dec.blk.<blk>.<what>..." or, for blk < 0, "decision.<what>...". */
static void head_name(char *buf, size_t cap, int blk, const char *what, const char *suffix) {
    if (blk < 0) snprintf(buf, cap, "decision.%s%s", what, suffix);
    else snprintf(buf, cap, "dec.blk.%d.%s%s", blk, what, suffix);
}

/* A LayerNorm: weight ~1, bias ~0. */
static void plan_ln(plan *p, int64_t W, int blk, const char *what) {
    char n[64];
    head_name(n, sizeof n, blk, what, ".weight");
    NORM(p, W, "%s", n);
    head_name(n, sizeof n, blk, what, ".bias");
    BIAS(p, W, "%s", n);
}

/* A linear layer [in] -> [out] with bias. */
static void plan_linear(plan *p, int64_t in, int64_t out, int blk, const char *what) {
    char n[64];
    head_name(n, sizeof n, blk, what, ".weight");
    MAT(p, p->head_mat_type, in, out, "%s", n);
    head_name(n, sizeof n, blk, what, ".bias");
    BIAS(p, out, "%s", n);
}

/* Multi-head attention "<pre>_{q,k,v,o}": q/k/v weights, their biases, then o. */
static void plan_mha(plan *p, int64_t W, int blk, const char *pre) {
    static const char *qkv[] = {"_q", "_k", "_v"};
    char what[32], n[64];
    for (int i = 0; i < 3; i++) {
        snprintf(what, sizeof what, "%s%s", pre, qkv[i]);
        head_name(n, sizeof n, blk, what, ".weight");
        MAT(p, p->head_mat_type, W, W, "%s", n);
    }
    for (int i = 0; i < 3; i++) {
        snprintf(what, sizeof what, "%s%s", pre, qkv[i]);
        head_name(n, sizeof n, blk, what, ".bias");
        BIAS(p, W, "%s", n);
    }
    snprintf(what, sizeof what, "%s_o", pre);
    plan_linear(p, W, W, blk, what);
}

static void plan_head(plan *p, const synth_shape *s) {
    int64_t E = s->n_embd, W = s->head_width, F = s->head_ff;
    static const char *proj[] = {"memory", "question", "option_question", "global",
                                 "option_context", "option_lexical"};
    add(p, F32, GEN_SCALES, 0, 0, 3, 0, "decision.scales");
    plan_ln(p, E, -1, "hidden_norm");
    for (int i = 0; i < 6; i++) MAT(p, p->head_mat_type, E, W, "decision.proj_%s.weight", proj[i]);
    add(p, p->head_mat_type, GEN_NORMAL, 0.f, 0.5f, W, 3, "token_types.weight");
    for (int i = 0; i < s->head_routing; i++) { /* routing: options attend to the prompt */
        plan_ln(p, W, i, "cross_attn_norm");
        plan_ln(p, W, i, "cross_attn_norm_kv");
        plan_mha(p, W, i, "cross_attn");
        plan_ln(p, W, i, "ffn_norm");
        plan_linear(p, W, F, i, "ffn_up");
        plan_linear(p, F, W, i, "ffn_down");
    }
    plan_ln(p, W, -1, "option_summary_norm");
    for (int j = 0; j < s->head_decoder; j++) { /* decoder over the question fields */
        int blk = s->head_routing + j;
        plan_mha(p, W, blk, "attn");
        plan_mha(p, W, blk, "cross_attn");
        plan_linear(p, W, F, blk, "ffn_up");
        plan_linear(p, F, W, blk, "ffn_down");
        plan_ln(p, W, blk, "attn_norm");
        plan_ln(p, W, blk, "cross_attn_norm");
        plan_ln(p, W, blk, "ffn_norm");
    }
    plan_ln(p, W, -1, "field_norm");
    plan_ln(p, W, -1, "option_norm");
    plan_linear(p, 4 * W, W, -1, "scorer");
    add(p, F32, GEN_NORMAL, 0.f, 1.f / sqrtf((float)W), W, 0, "decision.scorer_out.weight");
    BIAS(p, 1, "decision.scorer_out.bias");
}

/* ---- generating rows ---------------------------------------------------------------- */

typedef struct gen_ctx {
    const plan_tensor *t;
    uint64_t key;
} gen_ctx;

static void gen_row(void *p, int64_t r, float *dst) {
    const gen_ctx *g = p;
    const plan_tensor *t = g->t;
    static const float scales[3] = {4.953032494f, 12.182494164f, 0.574442506f};
    uint64_t base = (uint64_t)r * (uint64_t)t->ne[0];
    for (int64_t k = 0; k < t->ne[0]; k++) {
        uint64_t h = hash_at(g->key, base + (uint64_t)k);
        switch (t->kind) {
        case GEN_NORMAL: dst[k] = t->a + t->b * unit_normal(h); break;
        case GEN_UNIFORM: dst[k] = t->a + (t->b - t->a) * unit_uniform(h); break;
        case GEN_SCALES: dst[k] = scales[(base + (uint64_t)k) % 3]; break;
        }
    }
}

/* ---- metadata --------------------------------------------------------------------- */

static const char chatml_template[] =
    "{%- for message in messages %}{{- '<|im_start|>' + message['role'] + '\\n' + "
    "message['content'] + '<|im_end|>\\n' }}{%- endfor %}{%- if add_generation_prompt %}"
    "{{- '<|im_start|>assistant\\n' }}{%- endif %}";

static void put_hparams(gguf_writer *w, const char *arch, const synth_shape *s) {
    char k[96];
#define KEY(suffix) (snprintf(k, sizeof k, "%s.%s", arch, suffix), k)
    gguf_writer_add_u32(w, KEY("context_length"), (uint32_t)s->n_ctx);
    gguf_writer_add_u32(w, KEY("embedding_length"), (uint32_t)s->n_embd);
    gguf_writer_add_u32(w, KEY("block_count"), (uint32_t)s->n_layer);
    gguf_writer_add_u32(w, KEY("feed_forward_length"), (uint32_t)s->n_ff);
    gguf_writer_add_u32(w, KEY("attention.head_count"), (uint32_t)s->n_head);
    gguf_writer_add_u32(w, KEY("attention.head_count_kv"), (uint32_t)s->n_head_kv);
    gguf_writer_add_u32(w, KEY("attention.key_length"), (uint32_t)s->head_dim);
    gguf_writer_add_u32(w, KEY("attention.value_length"), (uint32_t)s->head_dim);
    gguf_writer_add_f32(w, KEY("rope.freq_base"), 1e7f);
    gguf_writer_add_f32(w, KEY("attention.layer_norm_rms_epsilon"), 1e-6f);
    gguf_writer_add_u32(w, KEY("rope.dimension_count"), (uint32_t)s->n_rot);
    gguf_writer_add_arr(w, KEY("rope.dimension_sections"), GGUF_VT_INT32, s->rope_sections, 4);
    gguf_writer_add_u32(w, KEY("ssm.conv_kernel"), (uint32_t)s->conv_kernel);
    gguf_writer_add_u32(w, KEY("ssm.state_size"), (uint32_t)s->ssm_head_dim);
    gguf_writer_add_u32(w, KEY("ssm.group_count"), (uint32_t)s->ssm_k_head);
    gguf_writer_add_u32(w, KEY("ssm.time_step_rank"), (uint32_t)s->ssm_v_head);
    gguf_writer_add_u32(w, KEY("ssm.inner_size"), (uint32_t)(s->ssm_v_head * s->ssm_head_dim));
    gguf_writer_add_u32(w, KEY("full_attention_interval"), (uint32_t)s->full_attn_interval);
    if (!strcmp(arch, "clef")) {
        gguf_writer_add_str(w, "clef.decision.type", "clef");
        gguf_writer_add_u32(w, "clef.decision.routing_block_count", (uint32_t)s->head_routing);
        gguf_writer_add_u32(w, "clef.decision.block_count", (uint32_t)s->head_decoder);
        gguf_writer_add_u32(w, "clef.decision.head_count", (uint32_t)s->head_heads);
        gguf_writer_add_f32(w, "clef.attention.layer_norm_epsilon", 1e-5f);
    }
#undef KEY
}

static void put_tokenizer(gguf_writer *w, const char *arch, const synth_vocab *v) {
    gguf_writer_add_str(w, "tokenizer.ggml.model", "gpt2");
    /* Clef checkpoints split with the Qwen2 regex; plain Qwen3.5 files say qwen35 */
    gguf_writer_add_str(w, "tokenizer.ggml.pre", !strcmp(arch, "clef") ? "qwen2" : "qwen35");
    gguf_writer_add_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)v->tokens, v->lens, v->n);
    gguf_writer_add_arr(w, "tokenizer.ggml.token_type", GGUF_VT_INT32, v->types, v->n);
    gguf_writer_add_arr_str(w, "tokenizer.ggml.merges", (const char *const *)v->merges, NULL,
                            v->n_merges);
    gguf_writer_add_u32(w, "tokenizer.ggml.bos_token_id", (uint32_t)v->id_endoftext);
    gguf_writer_add_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)v->id_im_end);
    gguf_writer_add_u32(w, "tokenizer.ggml.padding_token_id", (uint32_t)v->id_endoftext);
    gguf_writer_add_bool(w, "tokenizer.ggml.add_bos_token", false);
    gguf_writer_add_str(w, "tokenizer.chat_template", chatml_template);
}

static clef_status put_metadata(gguf_writer *w, const char *arch, const synth_shape *s,
                                qm_ftype ftype, uint64_t seed, clef_error *err) {
    synth_vocab v;
    clef_status st = synth_vocab_build(s->n_vocab, &v, err);
    if (st) return st;
    char name[96];
    snprintf(name, sizeof name, "%s-synth-%s-seed%llu", arch, s->name, (unsigned long long)seed);
    gguf_writer_add_str(w, "general.architecture", arch);
    gguf_writer_add_str(w, "general.name", name);
    gguf_writer_add_u32(w, "general.file_type", (uint32_t)ftype);
    gguf_writer_add_u32(w, "general.quantization_version", 2);
    put_hparams(w, arch, s);
    put_tokenizer(w, arch, &v);
    synth_vocab_free(&v);
    return gguf_writer_status(w, err);
}

/* ---- writing ------------------------------------------------------------------------- */

/* Plan the tensors and choose their stored types (types[i] for p->t[i]). */
static clef_status plan_model(const char *arch, const synth_shape *s, qm_ftype ftype, plan *p,
                              uint32_t **types, clef_error *err) {
    *types = NULL;
    if (strcmp(arch, "clef") && strcmp(arch, "qwen35"))
        return clef_err_set(err, CLEF_ERR_INVALID_ARG, "synth: unknown arch '%s' (clef or qwen35)", arch);
    p->head_mat_type = ftype == QM_FTYPE_F32 ? CLEF_DTYPE_F32 : CLEF_DTYPE_BF16;
    plan_backbone(p, s);
    if (!strcmp(arch, "clef")) plan_head(p, s);
    qm_tensor_desc *d = p->oom ? NULL : malloc(p->n * sizeof *d);
    *types = d ? malloc(p->n * sizeof **types) : NULL;
    if (!*types) {
        free(d);
        return clef_err_set(err, CLEF_ERR_NOMEM, "synth: out of memory planning tensors");
    }
    for (size_t i = 0; i < p->n; i++)
        d[i] = (qm_tensor_desc){p->t[i].name, p->t[i].type, p->t[i].n_dims,
                                {p->t[i].ne[0], p->t[i].ne[1], p->t[i].ne[2], p->t[i].ne[3]}};
    clef_status st = qm_choose_types(ftype, d, p->n, s->n_layer, *types, err);
    free(d);
    return st;
}

static clef_status stream_tensors(const plan *p, const uint32_t *types, uint64_t seed,
                                  gguf_stream *s, tp_pool *pool, FILE *log, clef_error *err) {
    for (size_t i = 0; i < p->n; i++) {
        const plan_tensor *t = &p->t[i];
        if (log)
            fprintf(log, "[%4zu/%4zu] %-40s %-5s [%lld, %lld]\n", i + 1, p->n, t->name,
                    clef_dtype_get(types[i])->name, (long long)t->ne[0], (long long)t->ne[1]);
        gen_ctx g = {t, mix64(seed ^ hash_str(t->name))};
        clef_status st = qm_write_rows(s, pool, types[i], t->ne[0], t->ne[1], gen_row, &g, err);
        if (st) return clef_err_wrap(err, "tensor '%s'", t->name);
    }
    return CLEF_OK;
}

clef_status synth_write(const char *arch, const synth_shape *s, qm_ftype ftype, uint64_t seed,
                        const char *path, int n_threads, FILE *log, clef_error *err) {
    plan p = {0};
    uint32_t *types = NULL;
    gguf_writer *w = gguf_writer_new();
    tp_pool *pool = NULL;
    gguf_stream *stream = NULL;
    clef_status st = w ? CLEF_OK : clef_err_set(err, CLEF_ERR_NOMEM, "synth: out of memory");
    if (st == CLEF_OK) st = plan_model(arch, s, ftype, &p, &types, err);
    if (st == CLEF_OK) st = put_metadata(w, arch, s, ftype, seed, err);
    for (size_t i = 0; st == CLEF_OK && i < p.n; i++)
        st = gguf_writer_add_tensor_info(w, p.t[i].name, types[i], p.t[i].n_dims, p.t[i].ne);
    if (st == CLEF_OK) st = gguf_writer_status(w, err);
    if (st == CLEF_OK) st = tp_create(n_threads, &pool, err);
    if (st == CLEF_OK) st = gguf_stream_open(w, path, &stream, err);
    if (st == CLEF_OK) st = stream_tensors(&p, types, seed, stream, pool, log, err);
    if (stream && st == CLEF_OK) st = gguf_stream_close(stream, err);
    else gguf_stream_abort(stream);
    tp_free(pool);
    gguf_writer_free(w);
    free(types);
    free(p.t);
    return st;
}

clef_status synth_summarize(const char *arch, const synth_shape *s, qm_ftype ftype,
                            synth_summary *out, clef_error *err) {
    memset(out, 0, sizeof *out);
    plan p = {0};
    uint32_t *types = NULL;
    clef_status st = plan_model(arch, s, ftype, &p, &types, err);
    for (size_t i = 0; st == CLEF_OK && i < p.n; i++) {
        uint64_t row = 0, n = (uint64_t)p.t[i].ne[0] * (uint64_t)p.t[i].ne[1];
        clef_dtype_row_bytes(types[i], (uint64_t)p.t[i].ne[0], &row);
        uint64_t bytes = row * (uint64_t)p.t[i].ne[1];
        out->n_elements += n;
        out->data_bytes += bytes;
        if (!strncmp(p.t[i].name, "dec.", 4) || !strncmp(p.t[i].name, "decision.", 9) ||
            !strncmp(p.t[i].name, "token_types.", 12))
            out->head_bytes += bytes;
    }
    out->n_tensors = st == CLEF_OK ? p.n : 0;
    free(types);
    free(p.t);
    return st;
}

/* ---- public API (clef.h) ------------------------------------------------------------- */

clef_status clef_synth_model(const clef_synth_spec *spec, const char *out_path,
                             const clef_write_params *params, clef_error *err) {
    clef_write_params dflt = clef_write_default_params();
    if (!params) params = &dflt;
    if (!spec || !spec->arch || !spec->shape || !spec->type || !out_path)
        return clef_err_set(err, CLEF_ERR_INVALID_ARG, "clef_synth_model: NULL argument");
    const synth_shape *s = synth_find_shape(spec->shape);
    if (!s)
        return clef_err_set(err, CLEF_ERR_INVALID_ARG,
                            "synth: unknown shape '%s' (tiny, small, 0.8b or flash)", spec->shape);
    qm_ftype ftype;
    if (!qm_ftype_parse(spec->type, &ftype))
        return clef_err_set(err, CLEF_ERR_INVALID_ARG,
                            "synth: unknown type '%s' (F32, F16, BF16, Q8_0, Q4_K_M, Q5_K_M or Q6_K)",
                            spec->type);
    return synth_write(spec->arch, s, ftype, spec->seed, out_path, params->n_threads, params->log, err);
}
