/* cuda/refblas: naive sgemm (see cblas.h). */
#include "cblas.h"

void cblas_sgemm(enum CBLAS_ORDER order, enum CBLAS_TRANSPOSE ta, enum CBLAS_TRANSPOSE tb, int m,
                 int n, int k, float alpha, const float *a, int lda, const float *b, int ldb,
                 float beta, float *c, int ldc)
{
    /* Column-major is row-major with A and B swapped: C^T = B^T A^T. */
    if (order == CblasColMajor) {
        cblas_sgemm(CblasRowMajor, tb, ta, n, m, k, alpha, b, ldb, a, lda, beta, c, ldc);
        return;
    }
    for (int i = 0; i < m; i++) {
        for (int j = 0; j < n; j++) {
            float acc = 0.0f;
            for (int p = 0; p < k; p++) {
                float x = ta == CblasNoTrans ? a[i * lda + p] : a[p * lda + i];
                float y = tb == CblasNoTrans ? b[p * ldb + j] : b[j * ldb + p];
                acc += x * y;
            }
            float *cij = &c[i * ldc + j];
            *cij = alpha * acc + (beta == 0.0f ? 0.0f : beta * *cij);
        }
    }
}
