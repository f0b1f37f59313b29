// Views: tensors that share another tensor's bytes instead of being copied.
//
// Every tensor is row-major and contiguous, so a Reshape's output is its
// input's bytes under another shape, each output of a Split along axis 0 is
// a contiguous sub-range of its input, and the inputs of a Concat along
// axis 0 can be written straight into adjacent sub-ranges of its output.
// PlanViews finds the ops of one program for which that is safe, drops their
// kernels from the plan (no task is emitted) and returns, per tensor, the
// group root whose bytes it lives in and the byte offset inside them. The
// buffer table turns this into BufferDef::view_of, the memory planner plans
// a group as one buffer over the union of its members' lifetimes.
//
// A group's members are only ever written once, by the kernel that produces
// them, and only read afterwards; the rules below keep it so (docs/design/compiler.md
// "Views"). A member must be:
//   - transient: an Intermediate, or an Input (dataset column, written by
//     GetNext) as a Reshape's or Split's source. Params, Consts, OptState and
//     Grads are persistent and written in place by the updates and the
//     AllReduce, so a view of one could be read after its base changed;
//   - not reported and not a graph output: the host reads those by name and
//     they live in the persistent Output region;
//   - not written in place by any op of the program (MutatedInputs; today only
//     persistent tensors are, the check keeps the rule true if that changes);
//   - not a MaxPool workspace (its buffer is not the tensor's bytes);
//   - the same dtype size on both sides, and none of zero bytes;
//   - at an offset inside its root that is a multiple of the arena alignment
//     (the verifier requires every buffer offset to be one).
// Concat additionally needs each input to be the whole of its own group
// (a root, or a view of a root with the same bytes, which is then moved
// under the Concat's output), its inputs' roots distinct and not Inputs.
// An op that fails any rule keeps its copy kernel; a Split or Concat is
// turned into views for all of its pieces or none.
#pragma once

#include <cstdint>
#include <map>
#include <vector>

#include "host/src/compiler/program_plan.h"
#include "sinkrt/host/graph.h"

namespace sinkrt::host::compiler {

struct ViewOf {
  TensorId root = kInvalidTensor;  // the group's root: not a view itself
  uint64_t offset = 0;             // bytes from the root's first byte
};

// Views of one program, by tensor: every member of a group but its root.
using ProgramViews = std::map<TensorId, ViewOf>;

// Removes the kernels of `plan` that become views and returns the views.
// `alignment`: the arena alignment every buffer offset must keep.
ProgramViews PlanViews(const Graph& g, const GraphFacts& facts, ProgramPlan& plan, uint64_t alignment);

}  // namespace sinkrt::host::compiler
