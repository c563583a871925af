// Every op that writes a caller's tensor bumps that tensor's version counter, as torch's
// in-place ops do: autograd's saved-tensor checks and caches keyed by `_version` (the drafting
// layer's StepCache) rely on it. torch's own ADInplaceOrView fallback for custom ops
// (autogradNotImplementedInplaceOrViewFallback) bumps only mutated *returns*, and specops ops
// return nothing, so without this kernel no specops op bumped anything.
#pragma once

#include <torch/library.h>

namespace specops {

// Registers, for every specops schema with a Tensor(a!) or Tensor(a!)[] argument, an
// ADInplaceOrView kernel that runs the op below and then bumps the version of every tensor
// those arguments hold (a rejected call bumps nothing); and, for every specops schema, an
// Autograd kernel (the alias key: every backend's autograd key) that does the same below
// ADInplaceOrView at once: no specops op is differentiable (torch's opcheck asks such ops for an
// Autograd kernel that runs the op below autograd), and a call from autograd then skips torch's
// boxed autograd fallback and the ADInplaceOrView hop. The ADInplaceOrView kernels stay for
// callers below autograd. Called once, when specops._C is loaded: the schemas are defined by
// every op's file (TORCH_LIBRARY_FRAGMENT), and only then have all their static initializers run.
void register_written_versions();

}  // namespace specops
