// numeq._core: thin pybind11 layer over the C++ library, one registration file per layer (bind.hpp);
// argument checking that needs Python knowledge (dtypes, ml_dtypes, scalars) lives in the Python
// package, everything numeric here. This file makes the module: the C++ errors' Python types and
// the registrations.

#include <pybind11/pybind11.h>

#include <exception>
#include <new>
#include <stdexcept>
#include <string>

#include "bind.hpp"
#include "heap.hpp"
#include "numeq/formats/error.hpp"

namespace py = pybind11;

namespace {

// Sets a Python exception from a C++ message. Messages quote the caller's text (a JSON parser's
// "last read" bytes may end inside a UTF-8 sequence): undecodable bytes become U+FFFD instead of
// turning the error into a UnicodeDecodeError.
void set_error(PyObject* type, const std::string& message) {
  PyObject* text = PyUnicode_DecodeUTF8(message.data(), static_cast<Py_ssize_t>(message.size()), "replace");
  if (text == nullptr) return;  // the decoder's own error (out of memory) stands
  PyErr_SetObject(type, text);
  Py_DECREF(text);
}

}  // namespace

PYBIND11_MODULE(_core, m) {
  numeq_bindings::keep_freed_memory();
  m.doc() = "numeq C++ core (use the numeq package, not this module)";
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const numeq::type_error& e) {
      set_error(PyExc_TypeError, e.what());
    } catch (const numeq::error& e) {
      set_error(PyExc_ValueError, e.what());
    } catch (const std::bad_alloc&) {
      // The Python layer checks the sizes it can see; anything left is a size or count inside an
      // argument (a plan's node size, a shape) too large for this machine's memory.
      set_error(PyExc_MemoryError,
                "out of memory: a size or count given in the arguments (a shape, a plan's node size) needs more "
                "memory than this machine has");
    } catch (const std::length_error& e) {
      set_error(PyExc_MemoryError, std::string("out of memory: a size or count given in the arguments is beyond "
                                               "what a container can hold (") + e.what() + ")");
    } catch (const std::exception& e) {
      // nlohmann::json's exceptions ("[json.exception.out_of_range.406] ...") come from JSON text
      // the caller gave (a plan or a profile): a ValueError, as every other malformed-JSON report.
      const std::string what = e.what();
      if (what.rfind("[json.exception.", 0) == 0) {
        set_error(PyExc_ValueError, "JSON: " + what);
        return;
      }
      throw;  // pybind11's own translation (RuntimeError and the standard mappings)
    }
  });

  numeq_bindings::bind_formats(m);
  numeq_bindings::bind_reference_exact(m);
  numeq_bindings::bind_reference_functions(m);
  numeq_bindings::bind_reference_composite(m);
  numeq_bindings::bind_core(m);
  numeq_bindings::bind_reveal(m);
  numeq_bindings::bind_cases(m);
  numeq_bindings::bind_registry(m);
}
