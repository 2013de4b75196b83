/*
 * cuda/refblas: the CBLAS subset engine/ops/dense.c uses, naive and single-
 * threaded, for GPU-only builds on a machine without any BLAS (the GPU check
 * machine).  There it only computes the CPU reference the CUDA kernels are
 * checked against; every full build links OpenBLAS instead.
 */
#ifndef EMBER_REFBLAS_CBLAS_H
#define EMBER_REFBLAS_CBLAS_H

#ifdef __cplusplus
extern "C" {
#endif

enum CBLAS_ORDER {
    CblasRowMajor = 101,
    CblasColMajor = 102
};
enum CBLAS_TRANSPOSE {
    CblasNoTrans = 111,
    CblasTrans = 112
};

void cblas_sgemm(enum CBLAS_ORDER order, enum CBLAS_TRANSPOSE ta, enum CBLAS_TRANSPOSE tb, int m,
                 int n, int k, float alpha, const float *a, int lda, const float *b, int ldb,
                 float beta, float *c, int ldc);

#ifdef __cplusplus
}
#endif
#endif
