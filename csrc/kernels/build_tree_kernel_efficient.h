#pragma once
// An EAGLE draft tree from the drafter's top-k selection (SGLang's build_tree_kernel_efficient).
//
// Request b drafts n = draft_token_num tokens: node 0 is the root (the verified token), node i
// (1 <= i < n) is the candidate selected_index[b, i - 1], a flat index into the drafter's
// candidates: the root's topk children first, then topk * topk per further step. Its parent's
// entry in parent_list is selected_index // topk: 0 for the root's children, else the flat index
// of the parent candidate is parent_list[b, selected_index // topk], and the parent node is the
// first position holding that index in selected_index, plus one. A parent that is not selected
// (SGLang warns: "invalid eagle tree") leaves the node unlinked.
//
// Outputs: retrive_index[b, i] = b * n + i; the links, children in ascending order
// (retrive_next_token[p]: p's first child; retrive_next_sibling[i]: the next child of i's
// parent; -1 for none); positions[b * n + i] = verified_seq_len[b] + the node's depth; and each
// node's row of the tree mask: the root and the node's ancestors-or-self, walked up at most
// `depth` steps (SGLang's Triton bound; a valid tree reaches the root within it).
#include <cstdint>
#include <vector>

namespace specops::kernels {

enum TreeMaskMode : int64_t { kFullMask = 0, kQlenOnly = 1, kQlenOnlyBitpacking = 2 };

struct BuildTreeShape {
  int64_t batch = 0;
  int64_t parent_width = 0;  // parent_list's columns (its row stride)
  int64_t topk = 1;
  int64_t depth = 1;
  int64_t num_draft = 1;  // n; selected_index has n - 1 columns
  int64_t mask_numel = 0;
  int64_t mode = kFullMask;
  int64_t mask_bytes = 1;  // bytes of a packed word (mode 2): 1, 2 or 4
};

// The packed mask's word width in bytes, from n alone (SGLang's uint8 / uint16 / uint32).
inline int64_t packed_mask_bytes(int64_t num_draft) { return num_draft > 16 ? 4 : (num_draft > 8 ? 2 : 1); }

// The parent node of node i of one request: 0 (the root), 1..n-1, or -1 (none: a selection
// outside the candidates, which the host op rejects, or a parent that was not selected).
inline int64_t tree_parent(const int64_t* parents, const int64_t* selected, int64_t i, const BuildTreeShape& s) {
  const int64_t pick = selected[i - 1];
  if (pick < 0) return -1;
  const int64_t slot = pick / s.topk;
  if (slot == 0) return 0;
  if (slot >= s.parent_width) return -1;
  const int64_t parent = parents[slot];
  for (int64_t p = 0; p < s.num_draft - 1; ++p) {
    if (selected[p] == parent) return p + 1;
  }
  return -1;
}

// MaskT: bool / uint8 (modes 0 and 1, a cell each) or the packed word (mode 2). seq_tree_start:
// the request's first FULL_MASK cell, sum of the earlier requests' (seq_len + n) * n.
// parent: scratch of n entries, each node's tree_parent (searched once, not once a walk step).
template <typename MaskT>
void build_tree_request(const int64_t* parents, const int64_t* selected, int64_t seq_len, int64_t b,
                        int64_t seq_tree_start, MaskT* tree_mask, int64_t* positions, int64_t* retrive_index,
                        int64_t* next_token, int64_t* next_sibling, int64_t* parent, const BuildTreeShape& s) {
  const int64_t n = s.num_draft;
  parent[0] = -1;
  for (int64_t i = 1; i < n; ++i) parent[i] = tree_parent(parents, selected, i, s);
  for (int64_t i = 0; i < n; ++i) {
    retrive_index[i] = b * n + i;
    next_token[i] = -1;
    next_sibling[i] = -1;
  }
  // Descending, so that each parent's first child is its smallest and siblings ascend.
  for (int64_t i = n - 1; i > 0; --i) {
    const int64_t p = parent[i];
    if (p < 0) continue;
    next_sibling[i] = next_token[p];
    next_token[p] = i;
  }
  for (int64_t i = 0; i < n; ++i) {
    // Row i's cells: [row, row + n) in modes 0 and 1 (column 0 the root, column k node k), one
    // packed word in mode 2 (bit k node k; n <= 32 there). A cell past the mask is not written.
    const bool packed = s.mode == kQlenOnlyBitpacking;
    const int64_t row = packed ? b * n + i
                               : (s.mode == kFullMask ? seq_tree_start + (seq_len + n) * i + seq_len : n * n * b + n * i);
    auto mark = [&](int64_t k, bool value) {
      if (row + k >= 0 && row + k < s.mask_numel) tree_mask[row + k] = static_cast<MaskT>(value);
    };
    if (!packed) {
      for (int64_t k = 0; k < n; ++k) mark(k, k == 0);
    }
    int64_t level = 0;
    uint64_t bits = 1;  // the root
    int64_t node = i;
    for (int64_t step = 0; i > 0 && step < s.depth; ++step) {
      ++level;
      if (packed) {
        bits |= uint64_t{1} << (node & 63);
      } else {
        mark(node, true);
      }
      const int64_t p = parent[node];
      if (p <= 0) break;
      node = p;
    }
    // Unsigned: a huge (invalid) seq_len wraps as on the device paths, without undefined behaviour.
    positions[i] = static_cast<int64_t>(static_cast<uint64_t>(seq_len) + static_cast<uint64_t>(level));
    if (packed && row < s.mask_numel) tree_mask[row] = static_cast<MaskT>(bits);
  }
}

// parent_list [B, parent_width], selected_index [B, n - 1], verified_seq_len [B] (valid: >= 0,
// the FULL_MASK rows within the mask), the other outputs [B, n] / [B * n], all contiguous.
template <typename MaskT>
void build_tree_kernel_efficient(const int64_t* parent_list, const int64_t* selected_index,
                                 const int64_t* verified_seq_len, MaskT* tree_mask, int64_t* positions,
                                 int64_t* retrive_index, int64_t* next_token, int64_t* next_sibling,
                                 const BuildTreeShape& s) {
  const int64_t n = s.num_draft;
  std::vector<int64_t> parent(static_cast<size_t>(n));
  int64_t seq_tree_start = 0;
  for (int64_t b = 0; b < s.batch; ++b) {
    build_tree_request<MaskT>(parent_list + b * s.parent_width, selected_index + b * (n - 1), verified_seq_len[b], b,
                              seq_tree_start, tree_mask, positions + b * n, retrive_index + b * n, next_token + b * n,
                              next_sibling + b * n, parent.data(), s);
    seq_tree_start += (verified_seq_len[b] + n) * n;
  }
}

}  // namespace specops::kernels
