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
    // shift = 31 + ceil(log2(divisor)) and multiplier = ceil(2^shift / divisor), which is
    // < 2^32 because divisor > 2^(ceil(log2(divisor)) - 1). For a dividend n < 2^31 the error
    // multiplier * divisor - 2^shift < divisor makes n * error < 2^shift, so the quotient is
    // exact. Divisor 1 gives multiplier 2^31, shift 31: the identity, with no branch.
    const uint32_t log2_ceil = divisor <= 1 ? 0 : 32 - static_cast<uint32_t>(__builtin_clz(divisor - 1));
    shift_ = 31 + log2_ceil;
    multiplier_ = ((uint64_t{1} << shift_) + divisor - 1) / divisor;
  }

  uint32_t divisor() const { return divisor_; }

  uint32_t div(uint32_t dividend) const { return static_cast<uint32_t>((dividend * multiplier_) >> shift_); }

  uint32_t mod(uint32_t dividend) const { return dividend - div(dividend) * divisor_; }

 private:
  uint32_t divisor_ = 1;
  uint64_t multiplier_ = uint64_t{1} << 31;
  uint32_t shift_ = 31;
};

}  // namespace specops::kernels
