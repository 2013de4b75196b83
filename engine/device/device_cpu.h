/*
 * engine/device/device_cpu: the "cpu" backend's ops table, for device.c,
 * which picks a backend by name.  Not installed: a program gets a device's
 * table from ember_device_ops() after ember_device_open().
 */
#ifndef EMBER_ENGINE_DEVICE_CPU_H
#define EMBER_ENGINE_DEVICE_CPU_H

#include <ember/device.h>

extern const ember_device_ops_t ember_device_cpu_ops;

#endif
