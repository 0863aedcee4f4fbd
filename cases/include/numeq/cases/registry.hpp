#pragma once
// The op registry: one row (OpSpec) per operation of the catalogue, from which every other place
// that names an operation reads it. A row says what the op takes (its inputs, with their roles
// and shapes; its parameters, with types, defaults and valid names), its default output, how the
// catalogue draws it (input formats, dimensions, what K means), which planted kernel bugs apply
// to it, its one-line doc, and builds the Op (op.hpp: exact, reference, emulation and bound) from
// arguments by name.
//
// Readers: numeq.ops (each registered op is a function there, documented from its row), the
// catalogue of problems and the `numeq tolerances` sweep, numeq.bugs (which bugs an op takes),
// the review manifest's operations, and the NKI emulator's consistency tests.
//
// Adding an op: its emulation (an Op factory, op.hpp), its row in registry.cpp, its tests.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include <xtensor/xarray.hpp>

#include "numeq/cases/generators.hpp"
#include "numeq/cases/op.hpp"
#include "numeq/formats/rounding.hpp"

namespace numeq::cases {

// What a parameter holds. `axes`: an int (one axis), a list of ints, or none (every axis).
enum class ParamType : std::uint8_t { integer, real, boolean, text, axes };
using numeq::to_string;  // every enum's name (numeq/formats/names.hpp)

// A parameter's value; monostate is none (Python's None): an optional parameter left out.
using ParamValue = std::variant<std::monostate, bool, std::int64_t, double, std::string, std::vector<std::int64_t>>;

struct ParamSpec {
  std::string name;
  ParamType type = ParamType::text;
  ParamValue default_value;          // monostate: none
  std::vector<std::string> choices;  // text: the valid names (empty: any text, checked by the factory)
  std::string doc;
};

// What an input's values are.
enum class InputRole : std::uint8_t {
  values,   // values of the op's in_fmt (checked: inputs are rounded first)
  own,      // reals of their own format (a bias, gamma and beta, scales): float64 values as given
  mask,     // an attention mask, additive reals (-inf excludes); Python converts booleans first
  codes,    // integer codes (int8 / uint8)
};

struct InputSpec {
  std::string name;
  std::string shape;  // in words: "[..., M, K]"
  bool required = true;
  InputRole role = InputRole::values;
  // The catalogue draws it with this shape: -1 is K, i >= 0 the problem's i-th other dimension
  // (empty: not drawn; a scalar the catalogue's params give, or an optional input left out).
  std::vector<int> catalogue_shape;
  bool layout = false;  // the op reads this input's memory layout (numpy's reduction order)
  std::string doc;
};

// How the catalogue (numeq.catalogue, numeq tolerances, numeq.bugs) sets the op up: empty formats
// keep the op out of it.
struct CatalogueSpec {
  std::vector<std::string> formats;           // the input formats it is drawn in
  std::string out;                            // its output format ("": the input format)
  std::vector<std::size_t> shape;             // its other dimensions by default
  std::vector<std::size_t> table_shape;       // numeq tolerances' other dimensions (small)
  std::string k_meaning;                      // what K is for it, in words
  bool reduces = true;                        // false: K is a row width (elementwise), swept once
  // The parameters (or scalar inputs) it is built with, from its dimensions and K.
  std::function<std::map<std::string, ParamValue, std::less<>>(const std::vector<std::size_t>& dims, std::size_t k)>
      params;
  // The input generators that draw a meaningful problem of it (empty: every one).
  std::vector<Distribution> generators;
};

// One input's memory layout as numpy holds it (strides in bytes; buffered: numpy copies it).
struct Layout {
  std::vector<std::ptrdiff_t> strides;
  bool buffered = false;
};

// The arguments of one build, by name; build_op fills the parameters' defaults and checks names
// and types before the factory reads them.
struct OpArguments {
  std::map<std::string, xt::xarray<double>, std::less<>> inputs;  // optional inputs left out: absent
  std::map<std::string, Layout, std::less<>> layouts;
  std::map<std::string, ParamValue, std::less<>> params;
  std::string in_fmt;
  Cast out;

  const xt::xarray<double>& input(std::string_view name) const;
  const xt::xarray<double>* optional_input(std::string_view name) const;  // nullptr: left out
  Layout layout(std::string_view name) const;                             // C order where not given
  std::int64_t integer(std::string_view name) const;
  double real(std::string_view name) const;
  std::optional<double> optional_real(std::string_view name) const;
  bool boolean(std::string_view name) const;
  const std::string& text(std::string_view name) const;
  // An axes parameter as a list of axes of an ndim-dimensional input (none: every axis).
  std::vector<std::ptrdiff_t> axes(std::string_view name, std::size_t ndim) const;
};

struct OpSpec {
  std::string name;
  std::string doc;     // one line: what it computes
  std::string family;  // matmul, reduction, normalisation, attention or function
  std::vector<InputSpec> inputs;
  std::vector<ParamSpec> params;
  bool format_keywords = true;  // takes in_fmt, out and rounding (false: int8_matmul)
  std::string default_out;      // the output format unless given ("": the input format)
  CatalogueSpec catalogue;
  std::vector<std::string> bugs;  // numeq.bugs' planted bugs that apply to it
  std::function<Op(const OpArguments&)> build;
};

// Every registered op, in the order numeq lists them.
const std::vector<OpSpec>& op_registry();
// The row called `name`; numeq::error naming `parameter` and listing the valid names otherwise.
const OpSpec& op_spec(std::string_view name, std::string_view parameter = "op");
// The op `name` built from `arguments`: unknown inputs or parameters, missing required inputs and
// text outside a parameter's choices are numeq::error naming them and the valid choices;
// parameters left out take their defaults.
Op build_op(std::string_view name, OpArguments arguments);

// The catalogue's draw of `name` at other dimensions `dims` and reduction length `k` (the
// problems of numeq.catalogue, numeq tolerances, numeq.bugs): its drawn inputs (InputSpec::
// catalogue_shape) from `distribution`, input i (in the row's order) with seed + i, values of
// in_fmt; integer codes are the distribution's fp32 values times 16, rounded to nearest even and
// clamped into int8 (NaN to 0). numeq::error naming `generator` for a distribution the row's
// CatalogueSpec::generators leaves out.
std::map<std::string, xt::xarray<double>, std::less<>> catalogue_inputs(std::string_view name,
                                                                        std::string_view in_fmt,
                                                                        const std::vector<std::size_t>& dims,
                                                                        std::size_t k, Distribution distribution,
                                                                        std::uint64_t seed);
// That draw built into its op with the catalogue's params (CatalogueSpec::params), output `out`.
Op catalogue_op(std::string_view name, std::string_view in_fmt, std::string_view out,
                const std::vector<std::size_t>& dims, std::size_t k, Distribution distribution, std::uint64_t seed);

}  // namespace numeq::cases
