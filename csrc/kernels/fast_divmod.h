#pragma once
// Division by a runtime constant through a precomputed reciprocal (multiply + shift), exact
// for dividends in [0, 2^31). Slot-mapping math divides every token's position by the block
// size, the virtual block size and the interleave; a hardware divide costs 20-40 cycles, this
// costs about 4.
#include <cstdint>

namespace specops::kernels {

class FastDivmod {
 public:
  FastDivmod() = default;
  explicit FastDivmod(uint32_t divisor) : divisor_(divisor) {
    if (divisor <= 1) return;  // identity: multiplier_ stays 0
    uint32_t log2_ceil = 0;
    while ((uint64_t{1} << log2_ceil) < divisor) ++log2_ceil;
    shift_ = 31 + log2_ceil;
    // ceil(2^shift / divisor) < 2^32 because divisor > 2^(log2_ceil - 1).
    multiplier_ = static_cast<uint32_t>(((uint64_t{1} << shift_) + divisor - 1) / divisor);
  }

  uint32_t divisor() const { return divisor_; }

  uint32_t div(uint32_t dividend) const {
    if (multiplier_ == 0) return dividend;
    return static_cast<uint32_t>((uint64_t{dividend} * multiplier_) >> shift_);
  }

  uint32_t mod(uint32_t dividend) const { return dividend - div(dividend) * divisor_; }

 private:
  uint32_t divisor_ = 1;
  uint32_t multiplier_ = 0;
  uint32_t shift_ = 0;
};

}  // namespace specops::kernels
