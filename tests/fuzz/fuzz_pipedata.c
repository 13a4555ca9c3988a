/* tests/fuzz/fuzz_pipedata.c — libFuzzer target: `pipedata npy` and `pipedata
 * csv` (cmd/pd_npy.c: the .npy header's dict literal, dtypes, sizes; cmd/
 * pd_csv.c: fields, quotes, numbers, the target column). Each input is read
 * as an .npy file (by default and with --dtype i32) and as a CSV table
 * (without a target and with column "y" as it); what they write goes to a
 * folder of this process's own, replaced each time. Seeds: small .npy files
 * of every dtype pipedata reads, written here by the format's rules, and a
 * CSV table. (fuzz.sh compiles cmd/pipedata.c with its main renamed.) */
#include "fuzz_util.h"

#include "pipedata.h"

static char out_x[4096], out_y[4096];

/* An .npy file version 1.0 of header dict h and n value bytes v. */
static void npy_seed(const char *name, const char *h, const void *v, size_t n)
{
    unsigned char b[512];
    size_t hl = strlen(h), pad = 64 - (10 + hl + 1) % 64;
    memcpy(b, "\x93NUMPY\x01\x00", 8);
    b[8] = (unsigned char)((hl + pad + 1) & 0xff);
    b[9] = (unsigned char)((hl + pad + 1) >> 8);
    memcpy(b + 10, h, hl);
    memset(b + 10 + hl, ' ', pad);
    b[10 + hl + pad] = '\n';
    memcpy(b + 11 + hl + pad, v, n);
    fuzz_seed(name, b, 11 + hl + pad + n);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    char tmpl[] = "/tmp/fuzz-pipedata.XXXXXX";
    if (!mkdtemp(tmpl))
        abort();
    snprintf(out_x, sizeof out_x, "%s/x.pgd", tmpl);
    snprintf(out_y, sizeof out_y, "%s/y.pgd", tmpl);
    float f[6] = {1, -2, 3.5f, 0, 7, 8};
    double g[4] = {0.25, -1, 1e30, 2};
    int64_t l[3] = {1, -2, 3};
    unsigned char u[4] = {0, 1, 254, 255};
    npy_seed("f32.npy", "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 2), }", f, sizeof f);
    npy_seed("f64.npy", "{'descr': '<f8', 'fortran_order': False, 'shape': (2, 2), }", g, sizeof g);
    npy_seed("i8.npy", "{'descr': '<i8', 'fortran_order': False, 'shape': (3,), }", l, sizeof l);
    npy_seed("u1.npy", "{'descr': '|u1', 'fortran_order': False, 'shape': (2, 2), }", u, sizeof u);
    npy_seed("be.npy", "{'descr': '>f4', 'fortran_order': True, 'shape': (6,), }", f, sizeof f);
    static const char csv[] = "a,\"b c\",y\r\n1.5,2,0\n\n -3e2 ,\"4\",1\n";
    fuzz_seed("t.csv", csv, sizeof csv - 1);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *path = fuzz_file(data, size);
    pd_npy(path, out_x, NULL);
    pd_npy(path, out_x, "i32");
    pd_csv(path, out_x, NULL, NULL, NULL);
    pd_csv(path, out_x, "y", out_y, NULL);
    return 0;
}
