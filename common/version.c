/* ember: the library's version (include/ember/version.h.in). */
#include <ember/version.h>

const char *ember_version_string(void)
{
    return EMBER_VERSION_STRING;
}

unsigned ember_abi_version(void)
{
    return EMBER_ABI_VERSION;
}
