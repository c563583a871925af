// build_tree_kernel_efficient: its metadata checks (the Meta kernel, and every backend's first
// step), then the CPU op: the checks, the value checks (selections inside the candidates,
// lengths >= 0, FULL_MASK rows inside the mask), the body.
#include <torch/library.h>

#include "cpu/tree_checks.h"
#include "kernels/build_tree_kernel_efficient.h"

namespace specops::cpu {
namespace {

// The mask's element types: a cell each (bool, uint8) in modes 0 and 1; in mode 2 one packed
// word a row, SGLang's width for draft_token_num (1, 2 or 4 bytes), signed or not.
void check_tree_mask_dtype(const at::Tensor& tree_mask, int64_t draft_token_num, int64_t tree_mask_mode) {
  const c10::ScalarType dtype = tree_mask.scalar_type();
  if (tree_mask_mode != kernels::kQlenOnlyBitpacking) {
    TORCH_CHECK_VALUE(dtype == c10::kBool || dtype == c10::kByte, "tree_mask must have dtype bool or uint8 for ",
                      "tree_mask_mode ", tree_mask_mode, ", got ", dtype_name(dtype));
    return;
  }
  const int64_t bytes = kernels::packed_mask_bytes(draft_token_num);
  const bool ok = bytes == 1   ? (dtype == c10::kByte || dtype == c10::kChar)
                  : bytes == 2 ? (dtype == c10::kUInt16 || dtype == c10::kShort)
                               : (dtype == c10::kUInt32 || dtype == c10::kInt);
  TORCH_CHECK_VALUE(ok, "tree_mask must have an integer dtype of ", bytes, " byte(s) (uint", bytes * 8, " or int",
                    bytes * 8, ") for tree_mask_mode 2 with draft_token_num = ", draft_token_num, ", got ",
                    dtype_name(dtype));
}

template <typename Int>
void check_build_tree_kernel_efficient(const at::Tensor& parent_list, const at::Tensor& selected_index,
                                       const at::Tensor& verified_seq_len, const at::Tensor& tree_mask,
                                       const at::Tensor& positions, const at::Tensor& retrive_index,
                                       const at::Tensor& retrive_next_token, const at::Tensor& retrive_next_sibling,
                                       int64_t topk, int64_t depth, int64_t draft_token_num, int64_t tree_mask_mode) {
  check_positive(topk, "topk");
  check_positive(depth, "depth");
  TORCH_CHECK_VALUE(draft_token_num >= 1 && draft_token_num <= 1024, "draft_token_num must be in [1, 1024], got ",
                    draft_token_num);
  TORCH_CHECK_VALUE(tree_mask_mode >= 0 && tree_mask_mode <= 2,
                    "tree_mask_mode must be 0 (FULL_MASK), 1 (QLEN_ONLY) or 2 (QLEN_ONLY_BITPACKING), got ",
                    tree_mask_mode);
  TORCH_CHECK_VALUE(tree_mask_mode != kernels::kQlenOnlyBitpacking || draft_token_num <= 32,
                    "draft_token_num must be <= 32 for tree_mask_mode 2 (a row is one 32-bit word), got ",
                    draft_token_num);
  // topk * (depth - 1) + 1 and the candidates' flat indices must fit int64 products.
  TORCH_CHECK_VALUE(topk <= INT32_MAX && depth <= INT32_MAX, "topk and depth must be <= 2^31 - 1, got topk = ", topk,
                    ", depth = ", depth);
  check_tensor(verified_seq_len, "verified_seq_len", {c10::kLong}, 1);
  const Anchor anchor = anchor_of(verified_seq_len, "verified_seq_len");
  const Int batch = numel_of<Int>(verified_seq_len);
  const Int n = Int(draft_token_num);
  check_tensor(parent_list, "parent_list", {c10::kLong}, 2, anchor);
  check_tensor(selected_index, "selected_index", {c10::kLong}, 2, anchor);
  check_tensor(tree_mask, "tree_mask", {c10::kBool, c10::kByte, c10::kChar, c10::kShort, c10::kUInt16, c10::kInt,
                                        c10::kUInt32}, 1, anchor);
  check_tensor(positions, "positions", {c10::kLong}, 1, anchor);
  check_tensor(retrive_index, "retrive_index", {c10::kLong}, 2, anchor);
  check_tensor(retrive_next_token, "retrive_next_token", {c10::kLong}, 2, anchor);
  check_tensor(retrive_next_sibling, "retrive_next_sibling", {c10::kLong}, 2, anchor);
  const Int width = depth == 1 ? size_of<Int>(parent_list, 1) : Int(topk * (depth - 1) + 1);
  check_tree_matrix<Int>(parent_list, "parent_list", batch, width, "B = verified_seq_len.numel()",
                         "topk * (depth - 1) + 1");
  check_tree_matrix<Int>(selected_index, "selected_index", batch, n - 1, "B", "draft_token_num - 1");
  check_tree_matrix<Int>(retrive_index, "retrive_index", batch, n, "B", "draft_token_num");
  check_tree_matrix<Int>(retrive_next_token, "retrive_next_token", batch, n, "B", "draft_token_num");
  check_tree_matrix<Int>(retrive_next_sibling, "retrive_next_sibling", batch, n, "B", "draft_token_num");
  TORCH_CHECK_VALUE(numel_of<Int>(positions) == batch * n, "positions must have B * draft_token_num = ", batch * n,
                    " entries, got ", numel_of<Int>(positions));
  check_tree_mask_dtype(tree_mask, draft_token_num, tree_mask_mode);
  // FULL_MASK's extent also covers the prefixes: the CPU op checks it from the lengths.
  if (tree_mask_mode == kernels::kQlenOnlyBitpacking) {
    check_entries(tree_mask, "tree_mask", batch * n, "B * draft_token_num");
  } else {
    check_entries(tree_mask, "tree_mask", batch * n * n, "B * draft_token_num^2");
  }
  check_outputs_alias_nothing({{&tree_mask, {"tree_mask"}}, {&positions, {"positions"}},
                               {&retrive_index, {"retrive_index"}}, {&retrive_next_token, {"retrive_next_token"}},
                               {&retrive_next_sibling, {"retrive_next_sibling"}}},
                              {{&parent_list, {"parent_list"}}, {&selected_index, {"selected_index"}},
                               {&verified_seq_len, {"verified_seq_len"}}});
}

void check_values(const at::Tensor& selected_index, const at::Tensor& verified_seq_len,
                  const kernels::BuildTreeShape& s) {
  const int64_t* picks = selected_index.data_ptr<int64_t>();
  const int64_t columns = s.num_draft - 1;
  for (int64_t e = 0; e < s.batch * columns; ++e) {
    const int64_t slot = picks[e] / s.topk;
    TORCH_CHECK_VALUE(picks[e] >= 0 && (slot == 0 || slot < s.parent_width), "selected_index[", e / columns, ", ",
                      e % columns, "] = ", picks[e], " is outside the candidates: its parent entry ",
                      "selected_index // topk must be 0 or below parent_list's ", s.parent_width, " columns");
  }
  const int64_t* lens = verified_seq_len.data_ptr<int64_t>();
  // FULL_MASK's rows: sum over requests of (seq_len + n) * n cells, counted without overflow.
  int64_t cells = 0;
  for (int64_t b = 0; b < s.batch; ++b) {
    TORCH_CHECK_VALUE(lens[b] >= 0, "verified_seq_len[", b, "] = ", lens[b], " must be >= 0");
    if (s.mode != kernels::kFullMask) continue;
    const int64_t room = (s.mask_numel - cells) / s.num_draft - s.num_draft;
    TORCH_CHECK_VALUE(lens[b] <= room, "tree_mask has ", s.mask_numel, " entries, fewer than FULL_MASK's ",
                      "sum(verified_seq_len + draft_token_num) * draft_token_num (request ", b, " ends past it)");
    cells += (lens[b] + s.num_draft) * s.num_draft;
  }
}

void build_tree_kernel_efficient(const at::Tensor& parent_list, const at::Tensor& selected_index,
                                 const at::Tensor& verified_seq_len, const at::Tensor& tree_mask,
                                 const at::Tensor& positions, const at::Tensor& retrive_index,
                                 const at::Tensor& retrive_next_token, const at::Tensor& retrive_next_sibling,
                                 int64_t topk, int64_t depth, int64_t draft_token_num, int64_t tree_mask_mode) {
  check_build_tree_kernel_efficient<int64_t>(parent_list, selected_index, verified_seq_len, tree_mask, positions,
                                             retrive_index, retrive_next_token, retrive_next_sibling, topk, depth,
                                             draft_token_num, tree_mask_mode);
  kernels::BuildTreeShape s;
  s.batch = verified_seq_len.numel();
  s.parent_width = parent_list.size(1);
  s.topk = topk;
  s.depth = depth;
  s.num_draft = draft_token_num;
  s.mask_numel = tree_mask.numel();
  s.mode = tree_mask_mode;
  s.mask_bytes = kernels::packed_mask_bytes(draft_token_num);
  check_values(selected_index, verified_seq_len, s);
  auto run = [&](auto* mask) {
    using MaskT = std::remove_pointer_t<decltype(mask)>;
    kernels::build_tree_kernel_efficient<MaskT>(
        parent_list.data_ptr<int64_t>(), selected_index.data_ptr<int64_t>(), verified_seq_len.data_ptr<int64_t>(),
        mask, positions.data_ptr<int64_t>(), retrive_index.data_ptr<int64_t>(),
        retrive_next_token.data_ptr<int64_t>(), retrive_next_sibling.data_ptr<int64_t>(), s);
  };
  // Raw bytes of the element's width: a packed word's bits are the same in a signed dtype.
  void* mask = tree_mask.data_ptr();
  if (tree_mask_mode != kernels::kQlenOnlyBitpacking) {
    if (tree_mask.scalar_type() == c10::kBool) {
      run(static_cast<bool*>(mask));
    } else {
      run(static_cast<uint8_t*>(mask));
    }
  } else if (s.mask_bytes == 1) {
    run(static_cast<uint8_t*>(mask));
  } else if (s.mask_bytes == 2) {
    run(static_cast<uint16_t*>(mask));
  } else {
    run(static_cast<uint32_t*>(mask));
  }
}

}  // namespace

// The schema (the op's contract with its checks above; csrc/registration.cpp names the library).
TORCH_LIBRARY_FRAGMENT(specops, m) {
  // docs/tree_speculation.md: SGLang's / sgl-kernel-npu's build_tree_kernel_efficient (its
  // argument names, retrive_* included), outputs written in place.
  m.def(
      "build_tree_kernel_efficient(Tensor parent_list, Tensor selected_index, Tensor verified_seq_len, "
      "Tensor(a!) tree_mask, Tensor(b!) positions, Tensor(c!) retrive_index, Tensor(d!) retrive_next_token, "
      "Tensor(e!) retrive_next_sibling, int topk, int depth, int draft_token_num, int tree_mask_mode) -> ()");
}
TORCH_LIBRARY_IMPL(specops, CPU, m) { m.impl("build_tree_kernel_efficient", &build_tree_kernel_efficient); }
TORCH_LIBRARY_IMPL(specops, Meta, m) {
  m.impl("build_tree_kernel_efficient", &check_build_tree_kernel_efficient<c10::SymInt>);
}

}  // namespace specops::cpu
