/*
 * engine/device/device_comm: the communicator slots every device's table gets
 * (engine/device/device.c): the backend's own communicator, or the host ring on
 * staged copies where the backend cannot form the group.  See
 * engine/device/device_comm.c.
 */
#ifndef EMBER_ENGINE_DEVICE_COMM_H
#define EMBER_ENGINE_DEVICE_COMM_H

#include <ember/device.h>

/** Put the wrappers over @ops's communicator slots. */
void ember_device_comm_wrap(ember_device_ops_t *ops);

/** The backend's own table of @dev (stubs where it has no slot). */
const ember_device_ops_t *ember_device_backend_ops(const ember_device_t *dev);

#endif
