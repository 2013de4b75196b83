/*
 * ember: every public header, and the version they belong to.
 *
 * A program that trains its own model over ember includes this (or the
 * headers it needs) and links libember (CMake: find_package(ember),
 * ember::ember; pkg-config: ember).  The pieces:
 *
 *   <ember/job.h>          joining the job, ranks and roles, barriers, leaving
 *   <ember/ps.h>           serving as a parameter server
 *   <ember/table.h>        embedding tables sharded over the PS
 *   <ember/lookup.h>       a trainer's lookups (keyed jagged batches) and pushes
 *   <ember/allreduce.h>    the trainers' dense allreduce
 *   <ember/checkpoint.h>   checkpoints and resuming
 *   <ember/optimizer.h>    optimizers (dense ones for a model's own weights)
 *   <ember/device.h>       the device interface (CPU, CUDA) and its ops
 *   <ember/embedding_bag.h> the host EmbeddingBag ops
 *   <ember/safetensors.h>  safetensors files
 *   <ember/schema.h>       a feature schema: an example's label, dense and sparse features
 *   <ember/data.h>         a trainer's example stream for any schema (text, Criteo)
 *   <ember/criteo.h>       the Criteo click logs as a trainer's example stream
 *   <ember/metrics.h>      ROC AUC and log loss
 *   <ember/rng.h>          the generator of every ember draw
 *   <ember/transport.h>    the transport under the job (RPC, RMA)
 *   <ember/config.h>, <ember/log.h>, <ember/status.h>, <ember/dtype.h>,
 *   <ember/version.h>      configuration, logging, status codes, versions
 *
 * EMBER_ABI_VERSION (<ember/version.h>) is the ABI these headers describe;
 * ember_abi_version() the library's.
 */
#ifndef EMBER_EMBER_H
#define EMBER_EMBER_H

#include <ember/allreduce.h>
#include <ember/checkpoint.h>
#include <ember/config.h>
#include <ember/criteo.h>
#include <ember/data.h>
#include <ember/device.h>
#include <ember/dtype.h>
#include <ember/embedding_bag.h>
#include <ember/job.h>
#include <ember/log.h>
#include <ember/lookup.h>
#include <ember/metrics.h>
#include <ember/optimizer.h>
#include <ember/ps.h>
#include <ember/rng.h>
#include <ember/safetensors.h>
#include <ember/schema.h>
#include <ember/status.h>
#include <ember/table.h>
#include <ember/transport.h>
#include <ember/version.h>

#endif
