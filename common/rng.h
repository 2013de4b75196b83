/*
 * common/rng: the engine's random numbers; the generator itself is public
 * (<ember/rng.h>, header-only), so models draw exactly as the engine does.
 */
#ifndef EMBER_ENGINE_RNG_H
#define EMBER_ENGINE_RNG_H

#include <ember/rng.h>

#endif
