/* common/slurm, which the bootstrap and placement read Slurm through: the
 * nodelist's first host, the tasks-per-node notation, integers at full width. */
#include "common/slurm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int first_host(const char *nodelist, const char *want)
{
    char host[64] = "";
    ember_status_t status = ember_slurm_first_host(nodelist, host, sizeof(host));
    int ok = want ? status == EMBER_OK && strcmp(host, want) == 0 : status != EMBER_OK;
    if (!ok)
        printf("FAIL: nodelist '%s' -> '%s' (%s), want %s\n", nodelist, host,
               ember_status_string(status), want ? want : "an error");
    return ok;
}

static int tasks(const char *text, int node, int want)
{
    int got = ember_slurm_tasks_on_node(text, node);
    if (got != want)
        printf("FAIL: tasks per node '%s', node %d -> %d, want %d\n", text, node, got, want);
    return got == want;
}

static int integer(const char *text, int fallback, int want)
{
    if (text)
        setenv("EMBER_TEST_SLURM_VALUE", text, 1);
    else
        unsetenv("EMBER_TEST_SLURM_VALUE");
    int got = ember_slurm_int("EMBER_TEST_SLURM_VALUE", fallback);
    if (got != want)
        printf("FAIL: '%s' -> %d, want %d\n", text ? text : "(unset)", got, want);
    return got == want;
}

int main(void)
{
    int ok = first_host("node1", "node1") & first_host("node[01-04]", "node01") &
             first_host("gpu[7,9-10],cpu1", "gpu7") & first_host("a,b,c", "a") &
             first_host("rack2-n[003-010]", "rack2-n003") & first_host("", NULL) &
             first_host("[1-2]", "1") & first_host("x[", NULL);
    ok &= tasks("2(x3),1", 0, 2) & tasks("2(x3),1", 2, 2) & tasks("2(x3),1", 3, 1) &
          tasks("2(x3),1", 4, -1) & tasks("4", 0, 4) & tasks("1,(x2)", 1, -1) &
          tasks("2(x3", 0, -1) & tasks("2(x0)", 0, -1) & tasks("99999999999", 0, -1) &
          tasks("2(x4294967297),1", 1, -1) & tasks("3x", 0, -1);
    ok &= integer(NULL, 7, 7) & integer("", 7, 7) & integer("12", 7, 12) &
          integer("2147483647", 7, 2147483647) & integer("2147483648", 7, -1) &
          integer("4294967297", 7, -1) & integer("-1", 7, -1) & integer("3 ", 7, -1) &
          integer("0x10", 7, -1);
    printf("%s\n", ok ? "1 passed, 0 failed" : "0 passed, 1 failed");
    return ok ? 0 : 1;
}
