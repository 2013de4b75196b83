/*
 * engine/io/safetensors: safetensors files; the whole interface is public
 * (<ember/safetensors.h>), this header keeps the engine's include path.
 */
#ifndef EMBER_ENGINE_SAFETENSORS_H
#define EMBER_ENGINE_SAFETENSORS_H

#include <ember/safetensors.h>

#endif
