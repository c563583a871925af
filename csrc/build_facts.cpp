#include "build_facts.h"

namespace specops::build_facts {

const char* const kVersion = SPECOPS_VERSION;
const char* const kTorchVersion = SPECOPS_TORCH_VERSION;
const char* const kCompiler = SPECOPS_COMPILER;
const char* const kBackends = SPECOPS_BACKENDS;
const char* const kCannVersion = SPECOPS_CANN_VERSION;

}  // namespace specops::build_facts
