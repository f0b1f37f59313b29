/// \file
/// sinkrt::device's public API in one include: every installed header of the library.
///
/// What an application needs to run on this machine: InProcessDevice, its
/// DeviceOptions, AvailableCores() and the OpenMP wait policy. The executor,
/// the collectives and the daemon (device/src/) are internal; a remote
/// device is reached through sinkd and sinkrt/host/remote_device.h.
#pragma once

// IWYU pragma: begin_exports
#include "sinkrt/device/device_options.h"
#include "sinkrt/device/in_process_device.h"
#include "sinkrt/device/openmp_policy.h"
// IWYU pragma: end_exports
