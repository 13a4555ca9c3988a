/* dsl/summary.c — pg_model_summary: what `pipegen check` prints for a good model.
 * The model line, then per stage its layers (name, kind and key attributes,
 * output shape, parameters) and totals, then the skips that cross stages and the
 * ties. Counts carry thousands separators; the output is byte-stable. */
#include <stdlib.h>
#include <string.h>
#include "check_ctx.h" /* layer_kind_attrs, pg_train_setting_name: what a default is called */
#include "ir.h"

static const char *count(int64_t v, char *buf, size_t n) {
    char tmp[32];
    int len = snprintf(tmp, sizeof tmp, "%lld", (long long)(v < 0 ? -v : v));
    size_t o = 0;
    if (v < 0 && o + 1 < n) buf[o++] = '-';
    for (int i = 0; i < len && o + 1 < n; i++) {
        if (i > 0 && (len - i) % 3 == 0 && o + 1 < n) buf[o++] = ',';
        if (o + 1 < n) buf[o++] = tmp[i];
    }
    buf[o] = '\0';
    return buf;
}

/* "add", "concat", "concat(dim = 0)" (not the last dim), "take" */
static const char *pop_mode(const ir_skip *k, char *buf, size_t n) {
    if (k->mode == POP_ADD) return "add";
    if (k->mode == POP_TAKE) return "take";
    if (k->shape.rank < 1 || k->concat_dim == k->shape.rank - 1) return "concat";
    snprintf(buf, n, "concat(dim = %d)", k->concat_dim);
    return buf;
}

/* "(3, 5)" or "3": a conv's or pool's (h, w) attribute */
static const char *hw(const int64_t v[2], char *buf, size_t n) {
    if (v[0] == v[1]) snprintf(buf, n, "%lld", (long long)v[0]);
    else snprintf(buf, n, "(%lld, %lld)", (long long)v[0], (long long)v[1]);
    return buf;
}

/* The kinds of convolutional networks: their key attributes, defaults left out. */
static void describe_conv(const ir_layer *L, char *buf, size_t n) {
    char k[48], s[48], p[48], d[48], o[48], extra[200] = "";
    size_t e = 0;
    int one_d = L->kind == LK_CONV1D;
    const int64_t *kk = L->kernel, *ss = L->stride, *pp = L->padding, *dd = L->dilation;
    int64_t k1[2] = {kk[1], kk[1]}, s1[2] = {ss[1], ss[1]}, p1[2] = {pp[1], pp[1]}, d1[2] = {dd[1], dd[1]};
    if (one_d) kk = k1, ss = s1, pp = p1, dd = d1;
    int pool = L->kind == LK_MAXPOOL2D || L->kind == LK_AVGPOOL2D;
    if (pool ? (ss[0] != kk[0] || ss[1] != kk[1]) : (ss[0] != 1 || ss[1] != 1))
        e += (size_t)snprintf(extra + e, sizeof extra - e, ", stride = %s", hw(ss, s, sizeof s));
    if (pp[0] || pp[1]) e += (size_t)snprintf(extra + e, sizeof extra - e, ", padding = %s", hw(pp, p, sizeof p));
    switch (L->kind) {
    case LK_CONV2D: case LK_CONV1D: case LK_CONV_T2D:
        if (e < sizeof extra && (dd[0] != 1 || dd[1] != 1))
            e += (size_t)snprintf(extra + e, sizeof extra - e, ", dilation = %s", hw(dd, d, sizeof d));
        if (e < sizeof extra && (L->output_padding[0] || L->output_padding[1]))
            e += (size_t)snprintf(extra + e, sizeof extra - e, ", output_padding = %s", hw(L->output_padding, o, sizeof o));
        if (e < sizeof extra && L->groups != 1)
            e += (size_t)snprintf(extra + e, sizeof extra - e, ", groups = %lld", (long long)L->groups);
        if (e < sizeof extra && !L->bias) snprintf(extra + e, sizeof extra - e, ", bias = false");
        snprintf(buf, n, "%s(%lld -> %lld, kernel = %s%s)", layer_kind_name(L->kind), (long long)L->in_features,
                 (long long)L->out_features, hw(kk, k, sizeof k), extra);
        break;
    case LK_MAXPOOL2D: case LK_AVGPOOL2D:
        snprintf(buf, n, "%s(kernel = %s%s)", layer_kind_name(L->kind), hw(kk, k, sizeof k), extra);
        break;
    case LK_UPSAMPLE:
        snprintf(buf, n, "upsample(scale = %lld, mode = %s)", (long long)L->scale, L->bilinear ? "bilinear" : "nearest");
        break;
    case LK_RESHAPE: {
        size_t q = (size_t)snprintf(buf, n, "reshape(");
        for (int i = 0; i < L->out.rank && q < n; i++)
            q += (size_t)snprintf(buf + q, n - q, "%s%lld", i ? ", " : "", (long long)L->out.dim[i]);
        if (q < n) snprintf(buf + q, n - q, ")");
        break;
    }
    case LK_TRANSPOSE: snprintf(buf, n, "transpose(%d, %d)", L->axis[0], L->axis[1]); break;
    case LK_MEAN: snprintf(buf, n, "mean(%d)", L->axis[0]); break;
    case LK_BATCHNORM2D: snprintf(buf, n, "batchnorm2d%s", L->deferred ? "(deferred)" : ""); break;
    default: snprintf(buf, n, "%s", layer_kind_name(L->kind)); break; /* global_avgpool, flatten, sigmoid, ... */
    }
}

static const char *describe(const ir_model *m, const ir_layer *L, char *buf, size_t n) {
    const char *tname = L->nparam > 0 && (L->kind == LK_EMBED || L->kind == LK_LOGITS) &&
                                !strchr(m->params[L->param[0]].name, '.') ? m->params[L->param[0]].name : NULL;
    switch (L->kind) {
    case LK_LINEAR:
        snprintf(buf, n, "linear(%lld -> %lld%s)", (long long)L->in_features, (long long)L->out_features,
                 L->bias ? "" : ", bias = false");
        break;
    case LK_RELU: snprintf(buf, n, "relu"); break;
    case LK_GELU: snprintf(buf, n, "gelu"); break;
    case LK_LAYERNORM: snprintf(buf, n, "layernorm%s", L->bias ? "" : "(bias = false)"); break;
    case LK_RMSNORM: snprintf(buf, n, "rmsnorm(eps = %g)", L->eps); break;
    case LK_SWIGLU:
        snprintf(buf, n, "swiglu(%lld -> %lld%s)", (long long)L->in_features, (long long)L->out_features,
                 L->bias ? ", bias = true" : "");
        break;
    case LK_BATCHNORM: snprintf(buf, n, "batchnorm%s", L->deferred ? "(deferred)" : ""); break;
    case LK_EMBED:
        if (tname) snprintf(buf, n, "embed(%s)", tname);
        else snprintf(buf, n, "embed(%lld -> %lld)", (long long)L->vocab, (long long)L->dim);
        break;
    case LK_POS_EMBED: snprintf(buf, n, "pos_embed(%lld, %lld)", (long long)L->seq, (long long)L->dim); break;
    case LK_ATTENTION: {
        int o = snprintf(buf, n, "attention(heads = %lld%s", (long long)L->heads, L->causal ? ", causal" : "");
        if (L->kv_heads != L->heads && o >= 0 && (size_t)o < n) o += snprintf(buf + o, n - (size_t)o, ", kv_heads = %lld", (long long)L->kv_heads);
        if (L->rope_theta > 0 && o >= 0 && (size_t)o < n) o += snprintf(buf + o, n - (size_t)o, ", rope = %g", L->rope_theta);
        if (!L->bias && o >= 0 && (size_t)o < n) o += snprintf(buf + o, n - (size_t)o, ", bias = false");
        if (L->separate_qkv && o >= 0 && (size_t)o < n) o += snprintf(buf + o, n - (size_t)o, ", separate_qkv = true");
        if (L->p > 0 && o >= 0 && (size_t)o < n) o += snprintf(buf + o, n - (size_t)o, ", dropout = %g", L->p);
        if (o >= 0 && (size_t)o < n) snprintf(buf + o, n - (size_t)o, ")");
        break;
    }
    case LK_LOGITS:
        if (tname) snprintf(buf, n, "logits(%s)", tname);
        else snprintf(buf, n, "logits(%lld -> %lld)", (long long)L->dim, (long long)L->vocab);
        break;
    case LK_DROPOUT: snprintf(buf, n, "dropout(p = %g)", L->p); break;
    case LK_STASH: snprintf(buf, n, "stash %s", L->skip >= 0 ? m->skips[L->skip].name : "?"); break;
    case LK_POP: {
        char pm[48];
        snprintf(buf, n, "pop %s %s", L->skip >= 0 ? m->skips[L->skip].name : "?",
                 L->skip >= 0 ? pop_mode(&m->skips[L->skip], pm, sizeof pm) : "?");
        break;
    }
    default: describe_conv(L, buf, n); break;
    }
    return buf;
}

static const char *sched_name(const ir_train *t, char *buf, size_t n) {
    switch (t->schedule) {
    case SCHED_GPIPE: return "gpipe";
    case SCHED_1F1B: return "1f1b";
    case SCHED_ZB1: return "zb1";
    case SCHED_ZBV: return "zbv";
    case SCHED_AUTO: return "auto";
    case SCHED_INTERLEAVED: snprintf(buf, n, "interleaved(%d)", t->interleave); return buf;
    case SCHED_FILE: snprintf(buf, n, "file(\"%s\")", t->schedule_file ? t->schedule_file : ""); return buf;
    }
    return "?";
}

/* "constant lr", "cosine lr (warmup 10, min 1e-05 at step 200)", ... */
static const char *lr_text(const ir_train *t, char *buf, size_t n) {
    static const char *const names[] = {"constant", "cosine", "linear", "inverse_sqrt"};
    const char *k = names[t->lr_schedule];
    if (t->lr_schedule == LR_COSINE || t->lr_schedule == LR_LINEAR)
        snprintf(buf, n, "%s lr (warmup %lld, min %g at step %lld)", k, (long long)t->warmup, t->lr_min,
                 (long long)t->steps);
    else if (t->lr_schedule == LR_INVSQRT || t->warmup > 0)
        snprintf(buf, n, "%s lr (warmup %lld)", k, (long long)t->warmup);
    else
        snprintf(buf, n, "constant lr");
    return buf;
}

/* Which parameters decay at which rate: the default rule or the groups. */
static void summary_decay(const ir_model *m, FILE *out) {
    const ir_train *t = &m->train;
    int ntrained = 0;
    for (int i = 0; i < m->nparams; i++)
        ntrained += !m->params[i].is_buffer;
    if (t->optimizer == OPT_ADAM) {
        fprintf(out, "  weight decay: none (adam)\n");
        return;
    }
    if (!t->ndecay_groups && t->weight_decay == 0) {
        fprintf(out, "  weight decay: none (weight_decay = 0)\n");
        return;
    }
    if (!t->ndecay_groups) {
        int nrule = 0;
        for (int i = 0; i < m->nparams; i++) nrule += !m->params[i].is_buffer && m->params[i].decay;
        fprintf(out, "  weight decay %g on %d of %d parameters (the default rule: weight matrices and tables, not "
                     "biases or norms)\n", t->weight_decay, nrule, ntrained);
        return;
    }
    for (int g = 0; g < t->ndecay_groups; g++) {
        const ir_decay_group *G = &t->decay_groups[g];
        fprintf(out, "  weight decay %g for", G->value);
        for (int k = 0; k < G->npatterns; k++) fprintf(out, " \"%s\"", G->patterns[k]);
        fprintf(out, ": %d parameter%s", G->nparams, G->nparams == 1 ? "" : "s");
        int shown = 0;
        for (int i = 0; i < m->nparams && shown < 4; i++)
            if (m->params[i].decay_group == g) fprintf(out, "%s%s", shown++ ? ", " : " (", m->params[i].name);
        fprintf(out, "%s\n", shown ? (G->nparams > shown ? ", ...)" : ")") : "");
    }
    int rest = 0;
    for (int i = 0; i < m->nparams; i++) rest += !m->params[i].is_buffer && m->params[i].decay_group < 0;
    fprintf(out, "  weight decay %g on the %d other parameter%s (the optimizer's)\n", t->weight_decay, rest,
            rest == 1 ? "" : "s");
}

/* The data order and the evaluation, defaults included. */
static void summary_data(const ir_train *t, FILE *out) {
    fprintf(out, "  data %s; with --eval-data, evaluation ", t->shuffle ? "shuffled every epoch (shuffle = true)"
                                                                   : "in file order (shuffle = false)");
    if (t->eval_every > 0)
        fprintf(out, "every %lld steps and after the last", (long long)t->eval_every);
    else
        fprintf(out, "after the last step (eval_every = 0)");
    if (t->eval_batches > 0)
        fprintf(out, " on its first %lld batches\n", (long long)t->eval_batches);
    else
        fprintf(out, " on every row (eval_batches = 0)\n");
}

static const char *const ckpt_names[] = {"always", "except_last", "never"};
static const char *const loss_names[] = {"mse(sum)", "mse(mean)", "cross_entropy"};

/* The value of layer attribute `attr` as written in a .pipe (0: not one the
 * defaults list shows). */
static int attr_value(const ir_layer *L, const char *attr, char *buf, size_t n) {
    if (!strcmp(attr, "eps")) snprintf(buf, n, "%g", L->eps);
    else if (!strcmp(attr, "momentum")) snprintf(buf, n, "%g", L->momentum);
    else if (!strcmp(attr, "bias")) snprintf(buf, n, "%s", L->bias ? "true" : "false");
    else return 0;
    return 1;
}

/* The value of train setting `name` as written in a .pipe (0: none to show). */
static int setting_value(const ir_train *t, const char *name, char *buf, size_t n) {
    if (!strcmp(name, "batch")) snprintf(buf, n, "%lld", (long long)t->batch);
    else if (!strcmp(name, "microbatches")) snprintf(buf, n, "%lld", (long long)t->microbatches);
    else if (!strcmp(name, "schedule") && t->schedule == SCHED_1F1B) snprintf(buf, n, "1f1b");
    else if (!strcmp(name, "checkpoint")) snprintf(buf, n, "%s", ckpt_names[t->checkpoint]);
    else if (!strcmp(name, "loss")) snprintf(buf, n, "%s", loss_names[t->loss]);
    else if (!strcmp(name, "optimizer")) snprintf(buf, n, "sgd(lr = %g)", t->lr);
    else if (!strcmp(name, "lr_schedule")) snprintf(buf, n, "constant");
    else if (!strcmp(name, "steps")) snprintf(buf, n, "%lld", (long long)t->steps);
    else if (!strcmp(name, "grad_clip")) snprintf(buf, n, "0 (off)");
    else if (!strcmp(name, "seed")) snprintf(buf, n, "%llu", (unsigned long long)t->seed);
    else if (!strcmp(name, "precision")) snprintf(buf, n, "%s", pg_dtype_name(t->precision));
    else if (!strcmp(name, "eval_every")) snprintf(buf, n, "%lld", (long long)t->eval_every);
    else if (!strcmp(name, "eval_batches")) snprintf(buf, n, "%lld", (long long)t->eval_batches);
    else if (!strcmp(name, "shuffle")) snprintf(buf, n, "%s", t->shuffle ? "true" : "false");
    else return 0;
    return 1;
}

/* What pipegen filled in that the model does not say: the train settings not
 * written, each layer attribute that took its default (grouped by kind,
 * attribute and value, naming the layers); then the initial values (a `param`'s
 * init written or not, and the layers' own, which are fixed). */
static void print_defaults(const ir_model *m, FILE *out) {
    char v[128];
    const char *head = "defaults filled in (not written in the model; write them to change them):\n";
    int n = 0;
    for (int k = 0; k < 32 && pg_train_setting_name(k); k++)
        if (m->train.defaulted >> k & 1 && setting_value(&m->train, pg_train_setting_name(k), v, sizeof v)) {
            fprintf(out, "%s%s%s = %s", n ? "" : head, n ? ", " : "  train: ", pg_train_setting_name(k), v);
            n++;
        }
    if (n) {
        fputc('\n', out);
        head = "";
    }
    for (int i = 0; i < m->nlayers; i++) { /* the first layer of each (kind, attribute, value) lists them all */
        const ir_layer *L = &m->layers[i];
        const attr_spec *specs = layer_kind_attrs(L->kind);
        for (int a = 0; a < 32 && specs[a].name; a++) {
            if (!(L->defaulted >> a & 1) || !attr_value(L, specs[a].name, v, sizeof v)) continue;
            int first = 1;
            for (int j = 0; j < i && first; j++) {
                char w[128];
                first = !(m->layers[j].kind == L->kind && m->layers[j].defaulted >> a & 1 &&
                          attr_value(&m->layers[j], specs[a].name, w, sizeof w) && !strcmp(v, w));
            }
            if (!first) continue;
            fprintf(out, "%s  %s %s = %s:", head, layer_kind_name(L->kind), specs[a].name, v);
            head = "";
            int count = 0;
            for (int j = i; j < m->nlayers; j++) {
                char w[128];
                const ir_layer *K = &m->layers[j];
                if (K->kind != L->kind || !(K->defaulted >> a & 1) || !attr_value(K, specs[a].name, w, sizeof w) ||
                    strcmp(v, w))
                    continue;
                if (count < 6) fprintf(out, "%s %s", count ? "," : "", K->name);
                count++;
            }
            if (count > 6) fprintf(out, " and %d more", count - 6);
            fputc('\n', out);
        }
    }
    fprintf(out, "initial values (a function of the parameter's name, the seed and the element):\n");
    for (int i = 0; i < m->nparams; i++) { /* a `param` of the model's own (its name has no layer in it) */
        const ir_param *p = &m->params[i];
        if (strchr(p->name, '.') || p->is_buffer) continue;
        if (p->init == INIT_NORMAL) snprintf(v, sizeof v, "normal(%g)", p->init_scale);
        else if (p->init == INIT_UNIFORM) snprintf(v, sizeof v, "uniform(%g)", p->init_scale);
        else snprintf(v, sizeof v, "%s", p->init == INIT_ZEROS ? "zeros" : "ones");
        fprintf(out, "  param %s: %s\n", p->name, v);
    }
    fprintf(out, "  the layers' own, as PyTorch's: the weights and biases of projections and convolutions (linear, "
                 "attention, swiglu, conv1d, conv2d, conv_transpose2d) uniform(-1/sqrt(fan_in), 1/sqrt(fan_in)); "
                 "embed, pos_embed and logits tables normal(0.02); norm weights 1, biases 0\n");
}

void pg_model_summary(const ir_model *m, FILE *out) {
    const ir_train *t = &m->train;
    char a[48], b[48], s[128];
    int64_t total = pg_model_param_count(m);
    fprintf(out, "model %s: %d stage%s, %s parameters (%s bytes in f32)\n", m->name ? m->name : "?", m->nstages,
            m->nstages == 1 ? "" : "s", count(total, a, sizeof a), count(total * 4, b, sizeof b));
    fprintf(out, "  batch %lld in %lld micro-batch%s, schedule %s%s%s, checkpoint %s\n", (long long)t->batch,
            (long long)t->microbatches, t->microbatches == 1 ? "" : "es", sched_name(t, s, sizeof s),
            t->auto_chosen ? " (chosen by schedule = auto)" : "", m->placement == PLACE_V ? ", placement v" : "",
            ckpt_names[t->checkpoint]);
    char ls[64];
    if (t->ignore_index != PG_NO_IGNORE)
        snprintf(ls, sizeof ls, "%s(ignore = %lld)", loss_names[t->loss], (long long)t->ignore_index);
    else
        snprintf(ls, sizeof ls, "%s", loss_names[t->loss]);
    if (t->optimizer == OPT_SGD)
        fprintf(out, "  loss %s, optimizer sgd(lr = %g, momentum = %g, weight_decay = %g)", ls, t->lr,
                t->momentum, t->weight_decay);
    else if (t->optimizer == OPT_ADAM)
        fprintf(out, "  loss %s, optimizer adam(lr = %g, betas = (%g, %g), eps = %g)", ls, t->lr,
                t->beta1, t->beta2, t->adam_eps);
    else
        fprintf(out, "  loss %s, optimizer adamw(lr = %g, betas = (%g, %g), eps = %g, weight_decay = %g)",
                ls, t->lr, t->beta1, t->beta2, t->adam_eps, t->weight_decay);
    fprintf(out, ", %s%s, precision %s\n", lr_text(t, s, sizeof s), t->grad_clip > 0 ? ", grad_clip" : "",
            pg_dtype_name(t->precision));
    summary_decay(m, out);
    summary_data(t, out);
    pg_shape_str(m->input_dtype, &m->input, a, sizeof a);
    pg_shape_str(m->target_dtype, &m->target, b, sizeof b);
    fprintf(out, "  input %s : %s, target %s : %s\n", m->input_name, a, m->target_name, b);

    /* column widths over all layers */
    int wn = 0, wd = 0, ws = 0;
    for (int i = 0; i < m->nlayers; i++) {
        char d[128], sh[64];
        int ln = (int)strlen(m->layers[i].name), ld = (int)strlen(describe(m, &m->layers[i], d, sizeof d));
        int ls = (int)strlen(pg_shape_str(DT_F32, &m->layers[i].out, sh, sizeof sh));
        if (ln > wn) wn = ln;
        if (ld > wd) wd = ld;
        if (ls > ws) ws = ls;
    }
    for (int st = 0; st < m->nstages; st++) {
        int nl = 0;
        for (int i = 0; i < m->nlayers; i++) nl += m->layers[i].stage == st;
        int64_t pc = pg_stage_param_count(m, st);
        fprintf(out, "stage %d: %d layer%s, %s parameters (%s bytes)\n", st, nl, nl == 1 ? "" : "s",
                count(pc, a, sizeof a), count(pc * 4, b, sizeof b));
        for (int i = 0; i < m->nlayers; i++) {
            const ir_layer *L = &m->layers[i];
            if (L->stage != st) continue;
            char d[128], sh[64];
            int64_t np = 0;
            for (int j = 0; j < L->nparam; j++) np += pg_shape_numel(&m->params[L->param[j]].shape);
            pg_dtype odt = L->kind == LK_STASH ? L->in_dtype : DT_F32;
            char line[512];
            size_t o = (size_t)snprintf(line, sizeof line, "  %-*s  %-*s  %-*s", wn, L->name, wd,
                                        describe(m, L, d, sizeof d), ws, pg_shape_str(odt, &L->out, sh, sizeof sh));
            if (m->nchunks != m->nstages && o < sizeof line)
                o += (size_t)snprintf(line + o, sizeof line - o, "  chunk %d", L->chunk);
            if (np && o < sizeof line) snprintf(line + o, sizeof line - o, "  %s", count(np, a, sizeof a));
            size_t e = strlen(line);
            while (e > 0 && line[e - 1] == ' ') line[--e] = '\0';
            fputs(line, out);
            fputc('\n', out);
        }
    }
    int ncross = 0;
    for (int i = 0; i < m->nskips; i++) {
        const ir_skip *k = &m->skips[i];
        if (k->pop_layer < 0 || m->layers[k->stash_layer].stage == m->layers[k->pop_layer].stage) continue;
        if (!ncross++) fprintf(out, "skips crossing stages:\n");
        char pm[48];
        pg_shape_str(DT_F32, &k->shape, a, sizeof a);
        fprintf(out, "  %s: stage %d -> stage %d, %s, %s\n", k->name, m->layers[k->stash_layer].stage,
                m->layers[k->pop_layer].stage, pop_mode(k, pm, sizeof pm), a);
    }
    int nties = 0;
    for (int i = 0; i < m->nparams; i++) {
        const ir_param *p = &m->params[i];
        if (p->tie == TIE_NONE) continue;
        if (!nties++) fprintf(out, "ties:\n");
        fprintf(out, "  %s: %s, stages", p->name, p->tie == TIE_REPLICATE ? "replicate" : "transmit");
        int first = 1;
        for (int st = 0; st < 64; st++)
            if (p->stage_mask >> st & 1) {
                fprintf(out, "%s %d", first ? "" : ",", st);
                first = 0;
            }
        if (p->tie == TIE_TRANSMIT) fprintf(out, " (owner %d)", p->owner_stage);
        fputc('\n', out);
    }
    print_defaults(m, out);
}
