#include "written_versions.h"

#include <ATen/core/LegacyTypeDispatch.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/csrc/autograd/variable.h>

#include <c10/util/SmallVector.h>

#include <string>
#include <vector>

namespace specops {
namespace {

constexpr const char kNamespace[] = "specops::";

bool is_written(const c10::Argument& argument) {
  return argument.alias_info() != nullptr && argument.alias_info()->isWrite();
}

void bump(const at::Tensor& t) {
  // An inference tensor has no version counter: nothing can read one, so there is nothing to bump.
  if (t.defined() && !t.is_inference()) torch::autograd::impl::bump_version(t);
}

void run_then_bump_written_versions(const c10::OperatorHandle& op, c10::DispatchKeySet keys,
                                    torch::jit::Stack* stack) {
  const std::vector<c10::Argument>& arguments = op.schema().arguments();
  const size_t first = stack->size() - arguments.size();
  // The op pops its arguments: keep the written ones (on the stack frame: this runs every call).
  c10::SmallVector<c10::IValue, 6> written;
  for (size_t i = 0; i < arguments.size(); ++i) {
    if (is_written(arguments[i])) written.push_back((*stack)[first + i]);
  }
  {
    at::AutoDispatchBelowADInplaceOrView guard;
    op.redispatchBoxed(keys & c10::after_ADInplaceOrView_keyset, stack);
  }
  for (const c10::IValue& value : written) {
    if (value.isTensor()) {
      bump(value.toTensor());
    } else if (value.isTensorList()) {
      for (const at::Tensor& t : value.toTensorList()) bump(t);
    }
  }
}

}  // namespace

void register_written_version_bumps(torch::Library& library) {
  c10::Dispatcher& dispatcher = c10::Dispatcher::singleton();
  for (const c10::OperatorName& name : dispatcher.getAllOpNames()) {
    if (name.name.rfind(kNamespace, 0) != 0) continue;
    const std::optional<c10::OperatorHandle> op = dispatcher.findSchema(name);
    if (!op.has_value()) continue;
    bool writes = false;
    for (const c10::Argument& argument : op->schema().arguments()) writes = writes || is_written(argument);
    if (!writes) continue;
    const std::string op_name = name.name.substr(sizeof(kNamespace) - 1);
    library.impl(op_name.c_str(), torch::CppFunction::makeFromBoxedFunction<&run_then_bump_written_versions>());
  }
}

}  // namespace specops
