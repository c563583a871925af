#include "written_versions.h"

#include <ATen/core/LegacyTypeDispatch.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/csrc/autograd/variable.h>

#include <c10/util/SmallVector.h>

#include <memory>
#include <string>
#include <utility>
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

// Runs the op below ADInplaceOrView, then bumps the version of every tensor its written
// arguments hold. The positions of those arguments are read from the schema once, at
// registration, not on every call.
class RunThenBump final : public c10::OperatorKernel {
 public:
  explicit RunThenBump(std::vector<size_t> written) : written_(std::move(written)) {}

  void operator()(const c10::OperatorHandle& op, c10::DispatchKeySet keys, torch::jit::Stack* stack) {
    const size_t first = stack->size() - op.schema().arguments().size();
    // The op pops its arguments: keep the written ones (on the stack frame: this runs every call).
    c10::SmallVector<c10::IValue, 6> kept;
    for (const size_t position : written_) kept.push_back((*stack)[first + position]);
    {
      at::AutoDispatchBelowADInplaceOrView guard;
      op.redispatchBoxed(keys & c10::after_ADInplaceOrView_keyset, stack);
    }
    for (const c10::IValue& value : kept) {
      if (value.isTensor()) {
        bump(value.toTensor());
      } else if (value.isTensorList()) {
        for (const at::Tensor& t : value.toTensorList()) bump(t);
      }
    }
  }

 private:
  std::vector<size_t> written_;
};

// Every specops op with the positions of its Tensor(a!) arguments (none for the host-only ops
// that only read).
std::vector<std::pair<std::string, std::vector<size_t>>> specops_ops() {
  std::vector<std::pair<std::string, std::vector<size_t>>> ops;
  c10::Dispatcher& dispatcher = c10::Dispatcher::singleton();
  for (const c10::OperatorName& name : dispatcher.getAllOpNames()) {
    if (name.name.rfind(kNamespace, 0) != 0) continue;
    const std::optional<c10::OperatorHandle> op = dispatcher.findSchema(name);
    if (!op.has_value()) continue;
    std::vector<size_t> written;
    const std::vector<c10::Argument>& arguments = op->schema().arguments();
    for (size_t i = 0; i < arguments.size(); ++i) {
      if (is_written(arguments[i])) written.push_back(i);
    }
    ops.emplace_back(name.name.substr(sizeof(kNamespace) - 1), std::move(written));
  }
  return ops;
}

}  // namespace

void register_written_versions() {
  // The registrations live as long as the process (the extension is never unloaded).
  static torch::Library* inplace =
      new torch::Library(torch::Library::IMPL, "specops", c10::DispatchKey::ADInplaceOrView, __FILE__, __LINE__);
  static torch::Library* autograd =
      new torch::Library(torch::Library::IMPL, "specops", c10::DispatchKey::Autograd, __FILE__, __LINE__);
  for (auto& [name, written] : specops_ops()) {
    if (!written.empty()) {
      inplace->impl(name.c_str(), torch::CppFunction::makeFromBoxedFunctor(std::make_unique<RunThenBump>(written)));
    }
    autograd->impl(name.c_str(), torch::CppFunction::makeFromBoxedFunctor(std::make_unique<RunThenBump>(written)));
  }
}

}  // namespace specops
