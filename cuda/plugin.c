/*
 * cuda/plugin: what libember-cuda.so exports to engine/device/device.c's dlopen:
 * the backend's ops table and its GPU count (both defined in cuda_device.cu,
 * pulled in whole from libember_cuda.a).  Nothing else is needed here; this
 * file only gives the module a source of its own.
 */
#include <ember/device.h>

/* Defined in cuda_device.cu (declared for the backend in cuda_internal.h,
 * which needs the CUDA runtime's headers). */
extern const ember_device_ops_t ember_device_cuda_ops;
int ember_cuda_device_count(void);

/* Referenced so the linker keeps them exported even if the archive is not
 * pulled in whole by an older toolchain. */
const void *const ember_cuda_plugin_exports[] = {&ember_device_cuda_ops,
                                                 (const void *)ember_cuda_device_count};
