/* Bootstrap helpers that need no processes: the Slurm nodelist parser. */
#include "transport/tp_internal.h"

#include <stdio.h>
#include <string.h>

static int check(const char *nodelist, const char *want)
{
    char host[64] = "";
    ember_status_t status = tp_slurm_first_host(nodelist, host, sizeof(host));
    int ok = want ? status == EMBER_OK && strcmp(host, want) == 0 : status != EMBER_OK;
    if (!ok)
        printf("FAIL: '%s' -> '%s' (%s), want %s\n", nodelist, host, ember_status_string(status),
               want ? want : "an error");
    return ok;
}

int main(void)
{
    int ok = check("node1", "node1") & check("node[01-04]", "node01") &
             check("gpu[7,9-10],cpu1", "gpu7") & check("a,b,c", "a") &
             check("rack2-n[003-010]", "rack2-n003") & check("", NULL) & check("[1-2]", "1") &
             check("x[", NULL);
    printf("%s\n", ok ? "1 passed, 0 failed" : "0 passed, 1 failed");
    return ok ? 0 : 1;
}
