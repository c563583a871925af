// specops._C: the build facts of this extension, the fast-path helpers (csrc/fastpath/, used
// through specops._fastpath alone) and checks.h's shared checks (used through specops.arguments).
// Loading it also runs the TORCH_LIBRARY registrations of every op compiled into the same shared
// object.
#include <pybind11/pybind11.h>

#include <string>

#include "build_facts.h"
#include "checks_binding.h"
#include "fastpath/fast_call.h"
#include "fastpath/row_views.h"
#include "fastpath/usual_forms.h"
#include "written_versions.h"

namespace py = pybind11;

PYBIND11_MODULE(_C, m) {
  m.doc() =
      "specops native extension: ops are in torch.ops.specops; this module holds build facts and the fast-path "
      "helpers (FastOp, row_views, items, items_each, rows_below, usual_tensor_list, usual_group_settings, "
      "record_maker) and checks.h's shared checks (check_tensor, "
      "check_query_start_loc, check_entries, check_no_overlap, check_outputs_alias_nothing; used through "
      "specops.arguments)";
  // After every static initializer of this shared object: every op's schema is defined.
  specops::register_written_versions();
  specops::bind_fast_call(m);
  specops::bind_row_views(m);
  specops::bind_usual_forms(m);
  specops::bind_checks(m);
  namespace facts = specops::build_facts;
  m.attr("version") = facts::kVersion;
  const std::string cann_version = facts::kCannVersion;
  m.attr("cann_version") = cann_version.empty() ? py::object(py::none()) : py::str(cann_version);
  m.attr("torch_version") = facts::kTorchVersion;
  m.attr("compiler") = facts::kCompiler;
  py::list names;
  const std::string all = facts::kBackends;
  size_t begin = 0;
  while (begin <= all.size()) {
    size_t end = all.find(',', begin);
    if (end == std::string::npos) end = all.size();
    if (end > begin) names.append(all.substr(begin, end - begin));
    begin = end + 1;
  }
  py::tuple backends(names);
  m.attr("backends") = backends;
#ifdef __SANITIZE_ADDRESS__
  m.attr("sanitize") = true;
#else
  m.attr("sanitize") = false;
#endif
}
