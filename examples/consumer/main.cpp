// numeq from an installed package: cast a few values and check that the pieces agree.
// Exits nonzero (and says why) on any inconsistency.

#include <cstdint>
#include <cstdio>

#include <xtensor/xarray.hpp>

#include "numeq/numeq.hpp"

namespace {

int failures = 0;

void expect(bool ok, const char* what) {
  if (!ok) {
    std::printf("FAILED: %s\n", what);
    ++failures;
  }
}

}  // namespace

int main() {
  const double third = 1.0 / 3.0;
  const numeq::Cast bf16{numeq::formats::bf16};
  const numeq::Cast e4m3{numeq::formats::e4m3fn};

  const double b = numeq::round_to_format(third, bf16);
  const double e = numeq::round_to_format(third, e4m3);
  const std::uint64_t b_bits = numeq::encode(third, bf16);
  const std::uint64_t e_bits = numeq::encode(third, e4m3);
  std::printf("1/3 in bf16:   %.17g (bits 0x%04llx)\n", b, static_cast<unsigned long long>(b_bits));
  std::printf("1/3 in e4m3fn: %.17g (bits 0x%02llx)\n", e, static_cast<unsigned long long>(e_bits));

  // 1/3 = 1.010101...b * 2^-2. bf16 keeps 7 fraction bits: 1.0101010|1010... rounds up (the
  // first dropped bit is 1, more follow) to 1.0101011b * 2^-2 = 171/512 = 0.333984375, bits
  // 0x3EAB. e4m3fn keeps 3: 1.010|10101... rounds up to 1.011b * 2^-2 = 0.34375, bits 0x2B.
  expect(b == 0.333984375, "bf16(1/3) == 0.333984375");
  expect(b_bits == 0x3EAB, "bf16(1/3) bits == 0x3EAB");
  expect(e == 0.34375, "e4m3fn(1/3) == 0.34375");
  expect(e_bits == 0x2B, "e4m3fn(1/3) bits == 0x2B");

  // decode(encode(x)) == round_to_format(x), for a few values and formats.
  const double xs[] = {third, -2.5, 1e-3, 448.0, 500.0, 65504.0, 0.0};
  for (const numeq::Format* f : {&numeq::formats::bf16, &numeq::formats::fp16, &numeq::formats::e4m3fn,
                                 &numeq::formats::e5m2}) {
    const numeq::Cast cast{*f};
    for (double x : xs) {
      const double via_bits = numeq::decode(numeq::encode(x, cast), *f);
      const double direct = numeq::round_to_format(x, cast);
      const bool same = via_bits == direct || (via_bits != via_bits && direct != direct);
      if (!same) std::printf("  %s: x=%g decode(encode(x))=%g round_to_format(x)=%g\n", f->name.data(), x, via_bits, direct);
      expect(same, "decode(encode(x)) == round_to_format(x)");
    }
  }

  // The array interface (xtensor) agrees with the scalar one.
  const xt::xarray<double> a = {third, -2.5, 1e-3, 448.0};
  const xt::xarray<double> rounded = numeq::round(a, e4m3);
  for (std::size_t i = 0; i < a.size(); ++i)
    expect(rounded(i) == numeq::round_to_format(a(i), e4m3), "numeq::round(array) == round_to_format");

  if (failures != 0) {
    std::printf("%d check(s) failed\n", failures);
    return 1;
  }
  std::printf("numeq consumer: all checks passed\n");
  return 0;
}
