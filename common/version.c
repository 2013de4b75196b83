/* ember: the library's version (include/ember/version.h.in). */
#include <ember/version.h>

const char *ember_version_string(void)
{
    return EMBER_VERSION_STRING;
}
