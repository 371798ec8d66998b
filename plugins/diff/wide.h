// Unsigned 128-bit integers for the stream's time arithmetic (a frame
// number times a frame interval in nanoseconds exceeds 64 bits): the
// compiler's own where it has one (64-bit targets), else WideU128, which
// has the few operations the stream's code uses. 32-bit targets (armhf,
// i386) have no unsigned __int128.
#pragma once

#include <cstdint>

namespace cudadiff {
namespace stream {

class WideU128 {
 public:
  constexpr WideU128() = default;
  constexpr WideU128(uint64_t v) : hi_(0), lo_(v) {}  // NOLINT: as an integer converts
  explicit constexpr operator uint64_t() const { return lo_; }

  // Times a 32-bit factor; the caller keeps the product below 2^128.
  friend WideU128 operator*(const WideU128 &a, uint32_t m) {
    const uint64_t p0 = (a.lo_ & 0xffffffffu) * m;
    const uint64_t p1 = (a.lo_ >> 32) * m + (p0 >> 32);
    const uint64_t p2 = (a.hi_ & 0xffffffffu) * m + (p1 >> 32);
    const uint64_t p3 = (a.hi_ >> 32) * m + (p2 >> 32);
    WideU128 r;
    r.lo_ = (p0 & 0xffffffffu) | (p1 << 32);
    r.hi_ = (p2 & 0xffffffffu) | (p3 << 32);
    return r;
  }
  // (Other factors and divisors would be cut to 32 bits: refused.)
  template <class T>
  friend WideU128 operator*(const WideU128 &, T) = delete;
  template <class T>
  friend WideU128 operator/(const WideU128 &, T) = delete;
  // Divided by a 32-bit divisor other than 0, rounded down.
  friend WideU128 operator/(const WideU128 &a, uint32_t d) {
    const uint32_t limb[4] = {uint32_t(a.hi_ >> 32), uint32_t(a.hi_), uint32_t(a.lo_ >> 32),
                              uint32_t(a.lo_)};
    uint32_t q[4];
    uint64_t rem = 0;
    for (int i = 0; i < 4; ++i) {
      const uint64_t cur = (rem << 32) | limb[i];
      q[i] = uint32_t(cur / d);
      rem = cur % d;
    }
    WideU128 r;
    r.hi_ = (uint64_t(q[0]) << 32) | q[1];
    r.lo_ = (uint64_t(q[2]) << 32) | q[3];
    return r;
  }
  // Modulo 2^128, as unsigned integers.
  friend WideU128 operator+(const WideU128 &a, const WideU128 &b) {
    WideU128 r;
    r.lo_ = a.lo_ + b.lo_;
    r.hi_ = a.hi_ + b.hi_ + (r.lo_ < a.lo_ ? 1 : 0);
    return r;
  }
  friend WideU128 operator-(const WideU128 &a, const WideU128 &b) {
    WideU128 r;
    r.lo_ = a.lo_ - b.lo_;
    r.hi_ = a.hi_ - b.hi_ - (a.lo_ < b.lo_ ? 1 : 0);
    return r;
  }
  friend bool operator<(const WideU128 &a, const WideU128 &b) {
    return a.hi_ != b.hi_ ? a.hi_ < b.hi_ : a.lo_ < b.lo_;
  }
  friend bool operator>(const WideU128 &a, const WideU128 &b) { return b < a; }
  friend bool operator<=(const WideU128 &a, const WideU128 &b) { return !(b < a); }
  friend bool operator>=(const WideU128 &a, const WideU128 &b) { return !(a < b); }
  friend bool operator==(const WideU128 &a, const WideU128 &b) {
    return a.hi_ == b.hi_ && a.lo_ == b.lo_;
  }
  friend bool operator!=(const WideU128 &a, const WideU128 &b) { return !(a == b); }

  uint64_t high() const { return hi_; }
  uint64_t low() const { return lo_; }

 private:
  uint64_t hi_ = 0, lo_ = 0;
};

#if defined(__SIZEOF_INT128__) && !defined(CUDADIFF_PORTABLE_U128)
using u128 = unsigned __int128;
#else
using u128 = WideU128;
#endif

}  // namespace stream
}  // namespace cudadiff
