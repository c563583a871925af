#pragma once
// Greedy verification of a draft tree (SGLang's verify_tree_greedy).
//
// Request b walks its tree from the root (retrive_index[b, 0], a flat index b * n + 0 into the
// batch's n = num_draft tokens): at each level it tries the current node's children in link order
// (retrive_next_token, then retrive_next_sibling) and accepts the first whose candidate equals the
// target model's prediction at the last accepted node, target_predict.flat[last]. For every
// accepted node, predicts.flat[last] = that prediction, accept_index[b, j] = its flat index; at
// the end predicts.flat[last] = target_predict.flat[last] (the bonus token) and
// accept_token_num[b] = the accepted draft tokens (the root excluded). At most S - 1 are accepted
// (S = accept_index's columns); entries of accept_index past the path are -1, predicts elsewhere
// untouched.
//
// Invalid links never leave the request's row: a link outside [0, n) ends the list (as -1 does),
// a sibling list longer than n ends (a cycle), a flat index outside [0, B * n) is never accepted,
// and a root outside it accepts nothing (accept_index's row all -1, predicts untouched).
#include <cstdint>

namespace specops::kernels {

struct VerifyTreeShape {
  int64_t batch = 0;
  int64_t num_draft = 1;  // n: the columns of candidates and the retrive_* tensors
  int64_t num_spec = 1;   // S: accept_index's columns
};

inline void verify_tree_request(int32_t* predicts, int32_t* accept_index, int32_t* accept_token_num,
                                const int64_t* candidates, const int64_t* retrive_index,
                                const int64_t* next_token, const int64_t* next_sibling,
                                const int64_t* target_predict, int64_t b, const VerifyTreeShape& s) {
  const int64_t n = s.num_draft;
  const int64_t flat_end = s.batch * n;
  const int64_t row = b * n;
  int64_t last = retrive_index[row];
  int32_t* accepted = accept_index + b * s.num_spec;
  int64_t num_accepted = 0;
  if (last < 0 || last >= flat_end) {
    for (int64_t j = 0; j < s.num_spec; ++j) accepted[j] = -1;
    accept_token_num[b] = 0;
    return;
  }
  accepted[0] = static_cast<int32_t>(last);
  int64_t cur = 0;
  for (int64_t j = 1; j < s.num_spec; ++j) {
    cur = next_token[row + cur];
    const int64_t target = target_predict[last];
    bool found = false;
    // At most n tries a level: a longer sibling list has a cycle.
    for (int64_t tries = 0; tries < n && cur >= 0 && cur < n; ++tries) {
      const int64_t draft = retrive_index[row + cur];
      if (candidates[row + cur] == target && draft >= 0 && draft < flat_end) {
        predicts[last] = static_cast<int32_t>(target);
        accepted[++num_accepted] = static_cast<int32_t>(draft);
        last = draft;
        found = true;
        break;
      }
      cur = next_sibling[row + cur];
    }
    if (!found) break;
  }
  for (int64_t j = num_accepted + 1; j < s.num_spec; ++j) accepted[j] = -1;
  accept_token_num[b] = static_cast<int32_t>(num_accepted);
  predicts[last] = static_cast<int32_t>(target_predict[last]);
}

// candidates, retrive_*, target_predict [B, n] int64 contiguous; predicts [B * n],
// accept_index [B, S], accept_token_num [B] int32.
inline void verify_tree_greedy(int32_t* predicts, int32_t* accept_index, int32_t* accept_token_num,
                               const int64_t* candidates, const int64_t* retrive_index, const int64_t* next_token,
                               const int64_t* next_sibling, const int64_t* target_predict, const VerifyTreeShape& s) {
  for (int64_t b = 0; b < s.batch; ++b) {
    verify_tree_request(predicts, accept_index, accept_token_num, candidates, retrive_index, next_token, next_sibling,
                        target_predict, b, s);
  }
}

}  // namespace specops::kernels
