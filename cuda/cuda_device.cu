/* ember: CUDA device discovery (the GPU issue adds kernels beside it). */
#include <cuda_runtime.h>

extern "C" {
#include <ember/log.h>

/* Number of visible CUDA devices; 0 when there is no driver or no GPU. */
int ember_cuda_device_count(void)
{
    int count = 0;
    cudaError_t err = cudaGetDeviceCount(&count);
    if (err != cudaSuccess) {
        ember_debug("cuda", "no CUDA device: %s", cudaGetErrorString(err));
        (void)cudaGetLastError();
        return 0;
    }
    return count;
}
}
