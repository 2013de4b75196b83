/*
 * common/slurm: what ember reads of Slurm's environment, in one place.
 *
 * Slurm's variables are not ember's (common/config's table), but they are
 * read from outside all the same, so each is checked at its full width: a
 * malformed value is an error naming the variable, never a silent default.
 */
#ifndef EMBER_COMMON_SLURM_H
#define EMBER_COMMON_SLURM_H

#include <ember/status.h>

#include <stddef.h>

/* $@name as an integer from 0 to INT32_MAX; @fallback when unset or empty;
 * -1, with an error naming it, when set to anything else. */
int ember_slurm_int(const char *name, int fallback);

/* Tasks on node @node (0-based) from Slurm's "2(x3),1" notation (the form of
 * SLURM_STEP_TASKS_PER_NODE); -1 when @text is malformed or has no such node. */
int ember_slurm_tasks_on_node(const char *text, int node);

/* The first host of a nodelist ("node[01-04,07],gpu5" -> "node01": the
 * prefix, then the first number of the first range, zero padding kept). */
ember_status_t ember_slurm_first_host(const char *nodelist, char *host, size_t size);

#endif
