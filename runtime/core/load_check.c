/* runtime/core/load_check.c — before --load reads a file, whether it holds the
 * model's parameters: every parameter of the model by name and shape, and no
 * tensor the model does not have. When it does not, one report instead of the
 * first missing name: the missing parameters and the unexpected tensors (the
 * first few of each, and how many), every shape that differs, and, when the
 * names are a Hugging Face model's, the command that converts it. Every stage
 * compares the whole model (the same report, so every stage refuses). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "stage_run.h"

#define SHOW 4 /* names listed of each kind */

/* a Hugging Face model's names: transformers' module paths */
static int looks_hf(const char *name)
{
    static const char *const pre[] = {"model.layers.", "model.embed_tokens.", "transformer.h.", "transformer.wte.",
                                      "lm_head.", "model.norm.", "h.0.attn.c_attn."};
    for (size_t i = 0; i < sizeof pre / sizeof pre[0]; i++)
        if (strncmp(name, pre[i], strlen(pre[i])) == 0)
            return 1;
    return 0;
}

static void dims_text(char *b, size_t n, int rank, const int64_t *d)
{
    size_t o = (size_t)snprintf(b, n, "[");
    for (int i = 0; i < rank && o < n; i++)
        o += (size_t)snprintf(b + o, n - o, "%s%lld", i ? ", " : "", (long long)d[i]);
    if (o < n)
        snprintf(b + o, n - o, "]");
}

/* ", name" for the first SHOW of a list, then " and N more" */
static void list_add(char *b, size_t n, int k, const char *name)
{
    size_t o = strlen(b);
    if (k < SHOW && o < n)
        snprintf(b + o, n - o, "%s%s", k ? ", " : "", name);
}

static void list_end(char *b, size_t n, int count)
{
    size_t o = strlen(b);
    if (count > SHOW && o < n)
        snprintf(b + o, n - o, " and %d more", count - SHOW);
}

int pg_run_load_check(const pg_run *r)
{
    const pg_stage_desc *d = r->d;
    const char *path = r->opt.load;
    int np = d->nmodel_params, nf = 0;
    char **fnames = NULL, err[512];
    const char **pn = malloc(sizeof *pn * (size_t)(np ? np : 1));
    int *rank = malloc(sizeof *rank * (size_t)(np ? np : 1));
    int64_t(*dim)[5] = malloc(sizeof *dim * (size_t)(np ? np : 1));
    if (!pn || !rank || !dim) {
        fprintf(stderr, "stage %d: --load: out of memory\n", d->stage);
        free(pn), free(rank), free(dim);
        return 1;
    }
    for (int i = 0; i < np; i++)
        pn[i] = d->model_params[i].name;
    if (pg_st_shapes(path, pn, np, rank, dim, err, sizeof err) || pg_st_names(path, &fnames, &nf, err, sizeof err)) {
        fprintf(stderr, "stage %d: --load: %s\n", d->stage, err);
        free(pn), free(rank), free(dim);
        return 1;
    }
    char miss[600] = "", extra[600] = "", shapes[900] = "";
    int nmiss = 0, nextra = 0, nshape = 0, hf = 0;
    for (int i = 0; i < np; i++) {
        const pg_param_desc *p = &d->model_params[i];
        if (rank[i] < 0) {
            list_add(miss, sizeof miss, nmiss++, p->name);
            continue;
        }
        int same = rank[i] == p->rank;
        for (int k = 0; same && k < p->rank; k++)
            same = dim[i][k] == p->dim[k];
        if (!same) {
            char a[96], b[96], one[320];
            dims_text(a, sizeof a, rank[i], dim[i]);
            dims_text(b, sizeof b, p->rank, p->dim);
            snprintf(one, sizeof one, "%s (file %s, model %s)", p->name, a, b);
            list_add(shapes, sizeof shapes, nshape++, one);
        }
    }
    for (int j = 0; j < nf; j++) {
        int known = 0;
        for (int i = 0; i < np && !known; i++)
            known = strcmp(fnames[j], pn[i]) == 0;
        if (!known)
            list_add(extra, sizeof extra, nextra++, fnames[j]);
        hf |= looks_hf(fnames[j]);
    }
    list_end(miss, sizeof miss, nmiss);
    list_end(extra, sizeof extra, nextra);
    list_end(shapes, sizeof shapes, nshape);
    free(fnames);
    free(pn), free(rank), free(dim);
    if (!nmiss && !nextra && !nshape)
        return 0;
    fprintf(stderr, "stage %d: --load: %s does not hold the parameters of model %s:\n", d->stage, path, d->model);
    if (nmiss)
        fprintf(stderr, "stage %d:   %d of its %d parameters are missing: %s\n", d->stage, nmiss, np, miss);
    if (nextra)
        fprintf(stderr, "stage %d:   %d of the file's %d tensors are not the model's: %s\n", d->stage, nextra, nf, extra);
    if (nshape)
        fprintf(stderr, "stage %d:   %d shape%s differ%s: %s\n", d->stage, nshape, nshape == 1 ? "" : "s",
                nshape == 1 ? "s" : "", shapes);
    if (hf)
        fprintf(stderr, "stage %d:   its names are a Hugging Face model's: convert the model's folder with "
                        "`pipegen import hf DIR -o OUT` and load the .safetensors it writes\n", d->stage);
    return 1;
}
