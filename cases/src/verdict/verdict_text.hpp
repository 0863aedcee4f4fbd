#pragma once
// What the verdict, the port check, the variant search and the diagnoses share: output equality
// as a device's output is judged (NaN matches any NaN, zeros by sign), numbers, indices and index
// lists as the messages write them, an even sample of a list and the words that name it; and the
// verdict's one-line diagnosis (verdict_words.cpp, with describe).

#include <cmath>
#include <cstddef>
#include <iomanip>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

namespace numeq::cases {
struct Verdict;
}

namespace numeq::cases::detail {

inline bool same_value(double x, double y) {
  if (std::isnan(x) || std::isnan(y)) return std::isnan(x) && std::isnan(y);
  return x == y && std::signbit(x) == std::signbit(y);
}

inline std::string number(double x, int precision = 17) {
  std::ostringstream s;
  s << std::setprecision(precision) << x;
  return s.str();
}

// "[3,13]": an element's index as the worst-element list and the diagnosis write it.
inline std::string index_text(const std::vector<std::size_t>& index) {
  std::string s = "[";
  for (std::size_t d = 0; d < index.size(); ++d) s += (d ? "," : "") + std::to_string(index[d]);
  return s + "]";
}

// The first element of a kind of failure, as the diagnosis names it (index empty: none).
struct FirstFailure {
  std::string index;
  double got = 0, emulated = 0, bound = 0;
};

// The verdict's one line: why this tier, from its counts; `foreign` and `special` are the first
// element outside the output format and the first special-value mismatch.
std::string diagnosis_line(const Verdict& v, const std::string& platform, std::string_view out_format,
                           std::size_t det_only, const FirstFailure& foreign, const FirstFailure& special);

// The marked indices after their noun, at most 8 of them: "row 59", "rows 3, 7, 19",
// "columns 1, 2, ... (12 in all)"; empty when none is marked.
inline std::string listed(const std::vector<bool>& marked, const std::string& one, const std::string& many) {
  std::size_t n = 0;
  for (const bool m : marked) n += m;
  if (n == 0) return "";
  std::string s = n == 1 ? one : many;
  std::size_t shown = 0;
  for (std::size_t i = 0; i < marked.size(); ++i) {
    if (!marked[i]) continue;
    if (shown == 8) return s + ", ... (" + std::to_string(n) + " in all)";
    s += (shown++ ? ", " : " ") + std::to_string(i);
  }
  return s;
}

// At most n of `items`, spread evenly over them (the first and the last kept); all when fewer.
inline std::vector<std::size_t> spread_evenly(const std::vector<std::size_t>& items, std::size_t n) {
  if (items.size() <= n) return items;
  if (n < 2) return {items.begin(), items.begin() + static_cast<std::ptrdiff_t>(n)};
  std::vector<std::size_t> s(n);
  for (std::size_t j = 0; j < n; ++j) s[j] = items[j * (items.size() - 1) / (n - 1)];
  return s;
}

// What a diagnosis was tried on, as its evidence says it: "every failing element", or "64 of the
// 900 failing elements, spread evenly" (spread_evenly's sample).
inline std::string sample_words(std::size_t sample, std::size_t failing) {
  return sample == failing ? "every failing element"
                           : std::to_string(sample) + " of the " + std::to_string(failing) +
                                 " failing elements, spread evenly";
}

}  // namespace numeq::cases::detail
