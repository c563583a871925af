#include "checks_binding.h"

#include <ATen/core/Tensor.h>
#include <torch/csrc/Device.h>
#include <torch/csrc/Dtype.h>
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/autograd/python_variable.h>

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "cpu/checks.h"

namespace py = pybind11;

namespace specops {

namespace {

// The tensor a Python value holds, or "NAME must be a tensor, got TYPE" (the ops' message). Errors
// are raised as checks.h raises them (TORCH_CHECK_VALUE: ValueError), torch's wrapper translating.
// A tensor by its type, as FastOp takes one (csrc/fastpath/py_values.h): not THPVariable_Check,
// which honours __class__ (a MagicMock(spec=torch.Tensor) is no tensor to unpack).
const at::Tensor& tensor_of(const py::handle& value, const std::string& name) {
  TORCH_CHECK_VALUE(PyObject_TypeCheck(value.ptr(), reinterpret_cast<PyTypeObject*>(THPVariableClass)) != 0, name, " must be a tensor, got ",
                    py::str(py::type::handle_of(value).attr("__name__")).cast<std::string>());
  return THPVariable_Unpack(value.ptr());
}

std::optional<cpu::Anchor> anchor_from(const py::handle& device, const std::string& device_of) {
  if (device.is_none()) return std::nullopt;
  TORCH_CHECK_TYPE(THPDevice_Check(device.ptr()), "device must be a torch.device");
  // Anchor keeps the name's pointer: the caller's string outlives every check below.
  return cpu::Anchor{reinterpret_cast<THPDevice*>(device.ptr())->device, device_of.c_str()};
}

void check_tensor(const py::handle& value, const std::string& name, const py::sequence& dtypes, int64_t dim,
                  const py::handle& device, const std::string& device_of) {
  std::vector<c10::ScalarType> types;
  for (const py::handle dtype : dtypes) {
    TORCH_CHECK_TYPE(THPDtype_Check(dtype.ptr()), "dtypes must hold torch dtypes");
    types.push_back(reinterpret_cast<THPDtype*>(dtype.ptr())->scalar_type);
  }
  TORCH_CHECK(!types.empty() && types.size() <= 3, "check_tensor takes one to three dtypes");
  const at::Tensor& t = tensor_of(value, name);
  const std::optional<cpu::Anchor> anchor = anchor_from(device, device_of);
  const cpu::Anchor* at = anchor ? &*anchor : nullptr;
  // checks.h takes its dtypes as a brace list (no heap on the ops' hot path).
  if (types.size() == 1) {
    cpu::check_tensor(t, name.c_str(), {types[0]}, dim, at);
  } else if (types.size() == 2) {
    cpu::check_tensor(t, name.c_str(), {types[0], types[1]}, dim, at);
  } else {
    cpu::check_tensor(t, name.c_str(), {types[0], types[1], types[2]}, dim, at);
  }
}

int64_t check_query_start_loc(const py::handle& value, const py::handle& device, const std::string& device_of) {
  const at::Tensor& t = tensor_of(value, "query_start_loc");
  const std::optional<cpu::Anchor> anchor = anchor_from(device, device_of);
  return cpu::check_query_start_loc_meta<int64_t>(t, anchor ? &*anchor : nullptr);
}

void check_no_overlap(const py::handle& a, const std::string& a_name, const py::handle& b,
                      const std::string& b_name) {
  cpu::check_no_overlap(tensor_of(a, a_name), a_name.c_str(), tensor_of(b, b_name), b_name.c_str());
}

void check_entries(const py::handle& value, const std::string& name, int64_t required, const std::string& what) {
  cpu::check_entries(tensor_of(value, name), name.c_str(), required, what.c_str());
}

// outputs, inputs: sequences of (tensor or None, name).
void check_outputs_alias_nothing(const py::sequence& outputs, const py::sequence& inputs) {
  const auto named = [](const py::sequence& pairs) {
    std::vector<std::pair<std::optional<at::Tensor>, std::string>> result;
    for (const py::handle pair : pairs) {
      const py::sequence items = py::reinterpret_borrow<py::sequence>(pair);
      std::string name = items[1].cast<std::string>();
      const py::object value = items[0];
      std::optional<at::Tensor> tensor;
      if (!value.is_none()) tensor = tensor_of(value, name);
      result.emplace_back(std::move(tensor), std::move(name));
    }
    return result;
  };
  const auto outs = named(outputs);
  const auto ins = named(inputs);
  std::vector<cpu::NamedTensor> out_list;
  std::vector<cpu::NamedTensor> in_list;
  for (const auto& [tensor, name] : outs) out_list.push_back({tensor ? &*tensor : nullptr, {name.c_str()}});
  for (const auto& [tensor, name] : ins) in_list.push_back({tensor ? &*tensor : nullptr, {name.c_str()}});
  cpu::check_outputs_alias_nothing(out_list, in_list);
}

}  // namespace

void bind_checks(py::module_& module) {
  module.def("check_tensor", torch::wrap_pybind_function(check_tensor), py::arg("t"), py::arg("name"),
             py::arg("dtypes"), py::arg("dim"), py::arg("device") = py::none(), py::arg("device_of") = "out",
             "dtype, rank, layout and (given device) the device of device_of, the argument every other tensor of "
             "the call shares a device with: csrc/cpu/checks.h's check_tensor");
  module.def("check_query_start_loc", torch::wrap_pybind_function(check_query_start_loc),
             py::arg("query_start_loc"), py::arg("device") = py::none(), py::arg("device_of") = "out",
             "query_start_loc's metadata (int32 [R + 1], R >= 0); returns R");
  module.def("check_entries", torch::wrap_pybind_function(check_entries), py::arg("t"), py::arg("name"),
             py::arg("required"), py::arg("what"), "at least `required` entries, `what` naming that count");
  module.def("check_no_overlap", torch::wrap_pybind_function(check_no_overlap), py::arg("a"), py::arg("a_name"),
             py::arg("b"), py::arg("b_name"), "a and b share no memory (nothing when on two devices)");
  module.def("check_outputs_alias_nothing", torch::wrap_pybind_function(check_outputs_alias_nothing),
             py::arg("outputs"), py::arg("inputs"),
             "no output shares memory with another output or an input; each a sequence of (tensor or None, name)");
}

}  // namespace specops
