#pragma once
// Division by a runtime constant through a precomputed reciprocal (multiply + shift), exact
// for dividends in [0, 2^31). Slot-mapping math divides every token's position by the block
// size, the virtual block size and the interleave; a hardware integer divide takes tens of
// cycles, a multiply and a shift a few.
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

  uint32_t times(uint32_t factor) const { return factor * divisor_; }

 private:
  uint32_t divisor_ = 1;
  uint64_t multiplier_ = uint64_t{1} << 31;
  uint32_t shift_ = 31;
};

// The same interface for a power-of-two divisor: a shift and a mask. Slot mappings pick it for
// a whole call when every divisor of the call is a power of two (the usual block sizes, CP
// sizes and interleaves), so the token loop does no multiplication at all.
class Pow2Divmod {
 public:
  Pow2Divmod() = default;
  explicit Pow2Divmod(uint32_t divisor)
      : divisor_(divisor), shift_(divisor <= 1 ? 0 : static_cast<uint32_t>(__builtin_ctz(divisor))) {}

  static bool accepts(uint32_t divisor) { return divisor != 0 && (divisor & (divisor - 1)) == 0; }

  uint32_t divisor() const { return divisor_; }

  uint32_t div(uint32_t dividend) const { return dividend >> shift_; }

  uint32_t mod(uint32_t dividend) const { return dividend & (divisor_ - 1); }

  uint32_t times(uint32_t factor) const { return factor << shift_; }

 private:
  uint32_t divisor_ = 1;
  uint32_t shift_ = 0;
};

}  // namespace specops::kernels
