/*
 * common/math_threads: how many threads this process's dense math (OpenBLAS,
 * OpenMP) runs, chosen so that a job's ranks on one node do not
 * oversubscribe its cores.
 *
 * OpenBLAS starts, by default, one thread per CPU it sees in every process;
 * four ranks on two cores then run eight spinning BLAS threads, and the
 * trainers' GEMMs wait on each other (a 2-trainer DLRM job ran 25-35%
 * slower than with one thread each).  The rule, as torchrun's
 * OMP_NUM_THREADS: the cores of this rank's binding divided among the local
 * ranks whose placement shares them, at least 1.  The user's word wins:
 * EMBER_THREADS, else OPENBLAS_NUM_THREADS or OMP_NUM_THREADS as set in the
 * environment (then ember leaves the libraries as they chose).
 *
 * The libraries are found at run time (dlsym), so nothing here links them:
 * a process without OpenBLAS or OpenMP only reports the count.
 */
#ifndef EMBER_COMMON_MATH_THREADS_H
#define EMBER_COMMON_MATH_THREADS_H

#include <stddef.h>

/**
 * Decide this process's math threads from @chosen (the binding's share,
 * with @chosen_why saying why) and the overrides above; set them in the
 * OpenBLAS and OpenMP loaded in this process.  Returns the count and writes
 * "N (why)" into @text (e.g. "1 (2 cores of cpus 0-1 shared by 4 local
 * ranks)", "4 (EMBER_THREADS)").  Call once, at start, before any dense
 * math: from the main thread only (OpenBLAS resizes its pool).
 */
unsigned ember_math_threads_apply(unsigned chosen, const char *chosen_why, char *text,
                                  size_t length);

#endif
