/// \file
/// sinkrt for an application, in one include: the public API of the host,
/// device and runtime libraries (sinkrt/host/host.h, sinkrt/device/device.h,
/// sinkrt/runtime/runtime.h).
///
/// ~~~
///   #include <sinkrt/sinkrt.h>
/// ~~~
///
/// Link sinkrt::sinkrt (CMake) or `pkg-config --libs sinkrt`. The installed
/// headers are the API that docs/design/compatibility.md promises; they name
/// no Asio or nlohmann type.
#pragma once

// IWYU pragma: begin_exports
#include "sinkrt/device/device.h"
#include "sinkrt/host/host.h"
#include "sinkrt/runtime/runtime.h"
// IWYU pragma: end_exports
