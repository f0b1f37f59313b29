/// \file
/// sinkrt::host's public API in one include: every installed header of the library.
///
/// Graphs, the model zoo, the compiler, Model with its datasets and callbacks,
/// parallel modes, remote devices, local clusters and init(). The library's
/// rooms (host/src/) are internal and not installed.
#pragma once

// IWYU pragma: begin_exports
#include "sinkrt/host/amp.h"
#include "sinkrt/host/auto_parallel.h"
#include "sinkrt/host/autodiff.h"
#include "sinkrt/host/buffer_role.h"
#include "sinkrt/host/calibration.h"
#include "sinkrt/host/callback.h"
#include "sinkrt/host/callbacks.h"
#include "sinkrt/host/communication.h"
#include "sinkrt/host/compiled_job.h"
#include "sinkrt/host/compiler.h"
#include "sinkrt/host/dataset.h"
#include "sinkrt/host/file_formats.h"
#include "sinkrt/host/graph.h"
#include "sinkrt/host/graph_file.h"
#include "sinkrt/host/init_kind.h"
#include "sinkrt/host/job_plan.h"
#include "sinkrt/host/local_cluster.h"
#include "sinkrt/host/local_device_limit.h"
#include "sinkrt/host/loss_scale.h"
#include "sinkrt/host/lr_schedule.h"
#include "sinkrt/host/model.h"
#include "sinkrt/host/model_zoo.h"
#include "sinkrt/host/nn.h"
#include "sinkrt/host/op_code.h"
#include "sinkrt/host/optimizer.h"
#include "sinkrt/host/parallel_context.h"
#include "sinkrt/host/pipeline.h"
#include "sinkrt/host/profiler.h"
#include "sinkrt/host/remote_device.h"
#include "sinkrt/host/report_callback.h"
#include "sinkrt/host/shard_strategies.h"
#include "sinkrt/host/tensor.h"
// IWYU pragma: end_exports
