/// \file
/// sinkrt::runtime's public API in one include: every installed header of the library.
///
/// What host and device share and an application may use: Status and
/// Result, dtypes, addresses, rank tables, TLS configuration, DeviceLink,
/// verified task streams and the release number. The library's other
/// headers (runtime/src/) are internal and not installed.
#pragma once

// IWYU pragma: begin_exports
#include "sinkrt/runtime/address.h"
#include "sinkrt/runtime/admission.h"
#include "sinkrt/runtime/collective_use.h"
#include "sinkrt/runtime/device_link.h"
#include "sinkrt/runtime/dtype.h"
#include "sinkrt/runtime/profile_record.h"
#include "sinkrt/runtime/program_kind.h"
#include "sinkrt/runtime/rank_table.h"
#include "sinkrt/runtime/status.h"
#include "sinkrt/runtime/stream_format.h"
#include "sinkrt/runtime/task_stream_verifier.h"
#include "sinkrt/runtime/tls.h"
#include "sinkrt/runtime/version.h"
#include "sinkrt/runtime/wire_limits.h"
// IWYU pragma: end_exports
