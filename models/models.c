/*
 * models/models: the one table of the models ember-train ships.  Adding a
 * model is its folder, models/NAME/ (CMake finds it, and builds every .c
 * file there), defining `const ember_model_ops_t ember_model_NAME`, and its
 * line in EMBER_MODELS below.  The first is --model's default.
 */
#include "models/model.h"

#include <string.h>

#define EMBER_MODELS(X) \
    X(tutorial)         \
    X(dlrm)

#define DECLARE(name) extern const ember_model_ops_t ember_model_##name;
EMBER_MODELS(DECLARE)
#undef DECLARE

#define ENTRY(name) &ember_model_##name,
const ember_model_ops_t *const ember_models[] = {EMBER_MODELS(ENTRY) NULL};
#undef ENTRY

const ember_model_ops_t *ember_model_find(const char *name)
{
    for (size_t i = 0; name && ember_models[i]; i++) {
        if (strcmp(ember_models[i]->name, name) == 0)
            return ember_models[i];
    }
    return NULL;
}
