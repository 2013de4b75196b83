/*
 * engine/io/criteo_data: a trainer's Criteo example stream; the interface
 * is public (<ember/criteo.h>), this header keeps the engine's include path.
 */
#ifndef EMBER_ENGINE_CRITEO_DATA_H
#define EMBER_ENGINE_CRITEO_DATA_H

#include "engine/io/criteo.h"

#include <ember/criteo.h>

#endif
