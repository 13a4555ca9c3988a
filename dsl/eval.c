/* dsl/eval.c — constant expressions of the checker: `4*d`, `d / heads`, `1e-3`.
 * Integers stay integers (64-bit, overflow is an error at the operator); a float
 * anywhere makes the result a float. Names resolve to the innermost block's
 * formals first, then to global constants. */
#include <stdlib.h>
#include <string.h>
#include "check_ctx.h"

const pg_val *chk_lookup(const chk *c, const chk_env *env, const char *name) {
    if (env && env->idx) {
        int i = chk_index_get(env->idx, name);
        if (i >= 0 && i < env->n) return &env->vals[i];
    } else if (env) {
        for (int i = 0; i < env->n; i++)
            if (strcmp(env->names[i], name) == 0) return &env->vals[i];
    }
    int k = chk_find_const(c, name);
    return k >= 0 ? &c->consts[k].v : NULL;
}

void chk_unknown_name(chk *c, const chk_env *env, pg_loc loc, const char *name,
                      const char *const *extra, int nextra) {
    int n = c->nconsts + (env ? env->n : 0) + nextra, k = 0;
    const char **cands = chk_xmalloc(sizeof *cands * (size_t)(n + 1));
    for (int i = 0; i < c->nconsts; i++) cands[k++] = c->consts[i].name;
    for (int i = 0; env && i < env->n; i++) cands[k++] = env->names[i];
    for (int i = 0; i < nextra; i++) cands[k++] = extra[i];
    char dm[128];
    chk_error(c, loc, "unknown name '%s'%s", name, chk_didyoumean(dm, sizeof dm, name, cands, k));
    free(cands);
}

static pg_val vint(int64_t i) { return (pg_val){V_INT, i, (double)i}; }
static pg_val vflt(double f) { return (pg_val){V_FLOAT, 0, f}; }

static int eval_binop(chk *c, const ast_expr *e, pg_val a, pg_val b, pg_val *out, int quiet) {
    if (a.k == V_INT && b.k == V_INT) {
        int64_t r = 0;
        int ovf = 0;
        switch (e->op) {
        case '+': ovf = __builtin_add_overflow(a.i, b.i, &r); break;
        case '-': ovf = __builtin_sub_overflow(a.i, b.i, &r); break;
        case '*': ovf = __builtin_mul_overflow(a.i, b.i, &r); break;
        case '/':
        case '%':
            if (b.i == 0) {
                if (!quiet)
                    chk_error(c, e->op_loc, "division by zero in %lld %c %lld", (long long)a.i, e->op, (long long)b.i);
                return -1;
            }
            if (a.i == INT64_MIN && b.i == -1) ovf = 1;
            else r = e->op == '/' ? a.i / b.i : a.i % b.i;
            break;
        default:
            if (!quiet) chk_error(c, e->op_loc, "unknown operator '%c'", e->op);
            return -1;
        }
        if (ovf) {
            if (!quiet)
                chk_error(c, e->op_loc, "integer overflow in %lld %c %lld: the result does not fit in 64 bits",
                          (long long)a.i, e->op, (long long)b.i);
            return -1;
        }
        *out = vint(r);
        return 0;
    }
    double r;
    switch (e->op) {
    case '+': r = a.f + b.f; break;
    case '-': r = a.f - b.f; break;
    case '*': r = a.f * b.f; break;
    case '/':
        if (b.f == 0) {
            if (!quiet) chk_error(c, e->op_loc, "division by zero in %g / %g", a.f, b.f);
            return -1;
        }
        r = a.f / b.f;
        break;
    default:
        if (!quiet) chk_error(c, e->op_loc, "'%c' needs integers, but gets %g %c %g", e->op, a.f, e->op, b.f);
        return -1;
    }
    *out = vflt(r);
    return 0;
}

static const char *expr_what(const ast_expr *e) {
    switch (e->kind) {
    case EX_STRING: return "a string";
    case EX_ARROW: return "an arrow (a -> b)";
    case EX_TUPLE: return "a tuple";
    case EX_CALL: return "a call";
    case EX_FOR: return "a setting by parameter name (`for`)";
    default: return "this";
    }
}

int chk_eval(chk *c, const chk_env *env, const ast_expr *e, pg_val *out, int quiet) {
    pg_val a, b;
    switch (e->kind) {
    case EX_INT: *out = vint(e->ival); return 0;
    case EX_FLOAT: *out = vflt(e->fval); return 0;
    case EX_NAME: {
        const pg_val *v = chk_lookup(c, env, e->str);
        if (!v) {
            if (!quiet) chk_unknown_name(c, env, e->loc, e->str, NULL, 0);
            return -1;
        }
        *out = *v;
        return 0;
    }
    case EX_NEG:
        if (chk_eval(c, env, e->lhs, &a, quiet) != 0) return -1;
        if (a.k == V_INT) {
            if (a.i == INT64_MIN) {
                if (!quiet)
                    chk_error(c, e->op_loc, "integer overflow in -(%lld): the result does not fit in 64 bits",
                              (long long)a.i);
                return -1;
            }
            *out = vint(-a.i);
        } else {
            *out = vflt(-a.f);
        }
        return 0;
    case EX_BINOP: {
        int ra = chk_eval(c, env, e->lhs, &a, quiet);
        int rb = chk_eval(c, env, e->rhs, &b, quiet);
        if (ra || rb) return -1;
        return eval_binop(c, e, a, b, out, quiet);
    }
    default:
        if (!quiet) chk_error(c, e->loc, "expected a number here, not %s", expr_what(e));
        return -1;
    }
}

int chk_eval_int(chk *c, const chk_env *env, const ast_expr *e, const char *what, int64_t *out, int quiet) {
    pg_val v;
    if (chk_eval(c, env, e, &v, quiet) != 0) return -1;
    if (v.k != V_INT) {
        if (!quiet) chk_error(c, e->loc, "%s must be an integer, got %g", what, v.f);
        return -1;
    }
    *out = v.i;
    return 0;
}

int chk_eval_dims(chk *c, const ast_dims *dims, pg_loc at, pg_shape *out) {
    memset(out, 0, sizeof *out);
    if (dims->n > PG_MAX_DIMS) {
        chk_error(c, at, "a shape has at most %d dimensions, this one has %d", PG_MAX_DIMS, dims->n);
        return -1;
    }
    if (dims->n < 1) {
        chk_error(c, at, "a shape needs at least one dimension (only a target can be a scalar: `target y : i32`)");
        return -1;
    }
    int bad = 0;
    int64_t numel = 1;
    for (int i = 0; i < dims->n; i++) {
        int64_t v;
        if (chk_eval_int(c, NULL, dims->dim[i], "a dimension", &v, 0) != 0) { bad = 1; continue; }
        if (v <= 0) {
            chk_error(c, dims->dim[i]->loc, "dimension %d is %lld: dimensions must be >= 1", i, (long long)v);
            bad = 1;
            continue;
        }
        if (!bad && (__builtin_mul_overflow(numel, v, &numel) || numel > ((int64_t)1 << 40))) {
            chk_error(c, dims->dim[i]->loc, "the shape is too large: a tensor holds at most 2^40 elements");
            bad = 1;
        }
        out->dim[i] = v;
    }
    out->rank = dims->n;
    return bad ? -1 : 0;
}

int chk_dtype(chk *c, const char *name, pg_loc loc, pg_dtype *out) {
    static const char *const names[] = {"f32", "bf16", "i32"};
    for (int i = 0; i < 3; i++)
        if (strcmp(name, names[i]) == 0) {
            *out = (pg_dtype)i;
            return 0;
        }
    char dm[128];
    chk_error(c, loc, "unknown dtype '%s'%s (expected f32, bf16 or i32)", name,
              chk_didyoumean(dm, sizeof dm, name, names, 3));
    return -1;
}
