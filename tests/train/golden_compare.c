/*
 * golden_compare GOLDEN SAVED [TOL]: compare what `ember-train --replay
 * GOLDEN --save SAVED` wrote with the PyTorch run stored in GOLDEN: the loss
 * of every trainer at every step and the final parameters, within TOL
 * (default 1e-4) absolute.  Prints the largest difference of each; exit 0
 * when all are within TOL.
 */
#include "engine/safetensors.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int compare(ember_st_file_t *golden, const char *expected,
                   ember_st_file_t *saved, const char *got, double tol)
{
    float *a = NULL, *b = NULL;
    size_t na = 0, nb = 0;
    int ok = 0;

    if (ember_st_read_copy(golden, expected, EMBER_DTYPE_F32, (void **)&a, &na) ||
        ember_st_read_copy(saved, got, EMBER_DTYPE_F32, (void **)&b, &nb)) {
        printf("%-12s missing (%s / %s)\n", got, expected, got);
    } else if (na != nb) {
        printf("%-12s has %zu elements, PyTorch's %zu\n", got, nb, na);
    } else {
        double worst = 0;
        size_t at = 0;
        for (size_t i = 0; i < na; i++) {
            double d = fabs((double)a[i] - (double)b[i]);
            if (!(d <= worst)) { /* also catches NaN */
                worst = isnan(d) ? INFINITY : d;
                at = i;
            }
        }
        ok = worst <= tol;
        printf("%-12s max |diff| %.3g at element %zu (%zu elements) %s\n", got, worst,
               at, na, ok ? "ok" : "FAIL");
    }
    free(a);
    free(b);
    return ok;
}

int main(int argc, char **argv)
{
    ember_st_file_t *golden, *saved;
    char err[256];
    double tol = argc > 3 ? atof(argv[3]) : 1e-4;

    if (argc < 3) {
        fprintf(stderr, "usage: %s GOLDEN SAVED [TOL]\n", argv[0]);
        return 2;
    }
    if (ember_st_open(argv[1], &golden, err, sizeof(err)) ||
        ember_st_open(argv[2], &saved, err, sizeof(err))) {
        fprintf(stderr, "golden_compare: %s\n", err);
        return 2;
    }
    int ok = compare(golden, "expected.loss", saved, "loss", tol);
    ok &= compare(golden, "expected.emb.weight", saved, "emb.weight", tol);
    ok &= compare(golden, "expected.fc.weight", saved, "fc.weight", tol);
    ok &= compare(golden, "expected.fc.bias", saved, "fc.bias", tol);
    ember_st_close(golden);
    ember_st_close(saved);
    return ok ? 0 : 1;
}
