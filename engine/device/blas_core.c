/*
 * engine/device/blas_core: the CPU's own BLAS kernels for the "cpu"
 * device's dense layers (<ember/device.h>, ember_device_blas_check).
 *
 * OpenBLAS built for any x86 (DYNAMIC_ARCH, Debian's) picks its kernels
 * once, as it loads, from OPENBLAS_CORETYPE or the CPU's model number; a
 * model it does not know, which is what many virtual machines report, falls
 * back to its oldest kernels (Prescott: SSE3), 3-5x slower on the GEMMs of
 * DLRM's MLPs than the AVX2 or AVX-512 ones the CPU runs.  The choice cannot
 * be changed once the library is loaded, so the fix is the variable set and
 * the program executed again, once.
 */
#include <ember/device.h>
#include <ember/log.h>

#include <dlfcn.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

/* OpenBLAS's cores without AVX2 (its driver/others/dynamic.c names). */
static int core_lacks_avx2(const char *core)
{
    static const char *const old[] = {
            "Prescott",     "Core2",     "Penryn",     "Dunnington", "Nehalem",    "Sandybridge",
            "Atom",         "Katmai",    "Coppermine", "Northwood",  "Banias",     "Opteron",
            "Opteron_SSE3", "Barcelona", "Bobcat",     "Bulldozer",  "Piledriver", "Steamroller",
            "Excavator",    "Nano",      "Generic"};
    for (size_t i = 0; i < sizeof(old) / sizeof(old[0]); i++) {
        if (strcasecmp(core, old[i]) == 0)
            return 1;
    }
    return 0;
}

/* The core this CPU can run: NULL when it has no AVX2 either. */
static const char *core_for_cpu(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl"))
        return "SkylakeX";
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        return "Haswell";
#endif
    return NULL;
}

int ember_device_blas_check(char **argv)
{
    const char *(*corename)(void) =
            (const char *(*)(void))dlsym(RTLD_DEFAULT, "openblas_get_corename");
    if (!corename || getenv("OPENBLAS_CORETYPE") || !argv || !argv[0])
        return 0; /* another BLAS, or the user's choice */
    const char *core = corename(), *want = core_for_cpu();
    if (!core || !want || !core_lacks_avx2(core))
        return 0;
    ember_info("device",
               "OpenBLAS runs its %s kernels on a CPU with %s's: running again with "
               "OPENBLAS_CORETYPE=%s (set it to choose)",
               core, want, want);
    /* the program's own path, not /proc/self/exe, so that its name (ps,
     * top) stays the program's */
    char path[4096];
    const ssize_t length = readlink("/proc/self/exe", path, sizeof(path) - 1);
    if (length <= 0 || setenv("OPENBLAS_CORETYPE", want, 1) != 0)
        return -1;
    path[length] = '\0';
    execv(path, argv);
    const int error = errno; /* the slow kernels, then */
    ember_warn("device", "cannot run again with OPENBLAS_CORETYPE=%s: %s", want, strerror(error));
    unsetenv("OPENBLAS_CORETYPE");
    errno = error;
    return -1;
}
