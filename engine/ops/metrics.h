/*
 * engine/ops/metrics: ROC AUC and log loss; the interface is public
 * (<ember/metrics.h>), this header keeps the engine's include path.
 */
#ifndef EMBER_ENGINE_METRICS_H
#define EMBER_ENGINE_METRICS_H

#include <ember/metrics.h>

#endif
