/* dsl/ir.c — small helpers over the checked model of ir.h: shapes, dtype names,
 * parameter counts, and freeing a model. */
#include <string.h>
#include "ir.h"

int64_t pg_shape_numel(const pg_shape *s) {
    int64_t n = 1;
    for (int i = 0; i < s->rank; i++) n *= s->dim[i];
    return n;
}

int pg_shape_eq(const pg_shape *a, const pg_shape *b) {
    if (a->rank != b->rank) return 0;
    for (int i = 0; i < a->rank; i++)
        if (a->dim[i] != b->dim[i]) return 0;
    return 1;
}

const char *pg_dtype_name(pg_dtype dt) {
    switch (dt) {
    case DT_F32: return "f32";
    case DT_BF16: return "bf16";
    case DT_I32: return "i32";
    }
    return "?";
}

const char *pg_shape_str(pg_dtype dt, const pg_shape *s, char *buf, size_t n) {
    size_t o = (size_t)snprintf(buf, n, "%s[", pg_dtype_name(dt));
    for (int i = 0; i < s->rank && i < PG_MAX_DIMS && o < n; i++)
        o += (size_t)snprintf(buf + o, n - o, "%s%lld", i ? ", " : "", (long long)s->dim[i]);
    if (o < n) snprintf(buf + o, n - o, "]");
    return buf;
}

void pg_model_free(ir_model *m) {
    pg_arena_free(&m->arena);
    memset(m, 0, sizeof *m);
}

int64_t pg_model_param_count(const ir_model *m) {
    int64_t n = 0;
    for (int i = 0; i < m->nparams; i++)
        if (!m->params[i].is_buffer) n += pg_shape_numel(&m->params[i].shape);
    return n;
}

/* A replicated tie counts in every stage that uses it; a transmitted one only
 * in its owner, which holds the master copy. */
int64_t pg_stage_param_count(const ir_model *m, int stage) {
    int64_t n = 0;
    for (int i = 0; i < m->nparams; i++) {
        const ir_param *p = &m->params[i];
        if (p->is_buffer || stage < 0 || stage >= 64 || !(p->stage_mask >> stage & 1)) continue;
        if (p->tie == TIE_TRANSMIT && p->owner_stage != stage) continue;
        n += pg_shape_numel(&p->shape);
    }
    return n;
}
