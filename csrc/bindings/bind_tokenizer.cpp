// _core.Tokenizer: muser's C++ tokenizer (see csrc/tokenizer/tokenizer.h).
// Encoding and decoding release the GIL; results are copies.
#include <nanobind/nanobind.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <memory>

#include "bindings/bindings.h"
#include "core/error.h"
#include "tokenizer/thread_scratch.h"
#include "tokenizer/tokenizer.h"

namespace nb = nanobind;

namespace muser::bindings {
namespace {

// UTF-8 bytes of a str (or the raw bytes of a bytes object). The view stays
// valid while `text` lives: a str caches its UTF-8 form, bytes are immutable.
std::string_view text_bytes(nb::handle text) {
  if (PyUnicode_Check(text.ptr())) {
    Py_ssize_t size = 0;
    const char* data = PyUnicode_AsUTF8AndSize(text.ptr(), &size);
    if (data == nullptr) throw nb::python_error();  // e.g. a lone surrogate
    return std::string_view(data, static_cast<size_t>(size));
  }
  if (PyBytes_Check(text.ptr())) {
    return std::string_view(PyBytes_AS_STRING(text.ptr()), static_cast<size_t>(PyBytes_GET_SIZE(text.ptr())));
  }
  throw nb::type_error("text must be str or bytes");
}

// Token ids as a Python list (the GIL must be held). Ids below kSharedIds
// reuse one int object each, made on first use and kept for the process's
// life: random Unicode encodes to ~3 ids a character, and an int object
// allocated (then freed) per id was a large part of returning millions of
// them. Larger ids, rare in practice, get new objects.
nb::typed<nb::list, int> id_list(const std::vector<int32_t>& ids) {
  constexpr int32_t kSharedIds = 1 << 16;  // 2 MB of ints
  static const std::vector<PyObject*> shared = [] {
    std::vector<PyObject*> v(kSharedIds);
    for (int32_t i = 0; i < kSharedIds; ++i) {
      v[i] = PyLong_FromLong(i);
      if (v[i] == nullptr) throw nb::python_error();
    }
    return v;
  }();
  PyObject* list = PyList_New(static_cast<Py_ssize_t>(ids.size()));
  if (list == nullptr) throw nb::python_error();
  for (size_t i = 0; i < ids.size(); ++i) {
    const int32_t id = ids[i];
    PyObject* item;
    if (id >= 0 && id < kSharedIds) {
      item = shared[id];
      Py_INCREF(item);
    } else {
      item = PyLong_FromLong(id);
      if (item == nullptr) {
        Py_DECREF(list);
        throw nb::python_error();
      }
    }
    PyList_SET_ITEM(list, static_cast<Py_ssize_t>(i), item);
  }
  return nb::typed<nb::list, int>(nb::steal<nb::list>(list));
}

struct IdBuffer {
  std::vector<int32_t> ids;
  size_t capacity_bytes() const { return ids.capacity() * sizeof(int32_t); }
};
thread_local std::unique_ptr<IdBuffer> kept_ids;

std::vector<int32_t> token_ids(const std::vector<int64_t>& tokens, int32_t n_vocab) {
  std::vector<int32_t> ids;
  ids.reserve(tokens.size());
  for (int64_t t : tokens) {
    if (t < 0 || t >= n_vocab) {
      throw InvalidArgument(format_where("tokenizer.decode", "token id " + std::to_string(t) +
                                                                 " is outside the vocabulary [0, " +
                                                                 std::to_string(n_vocab) + ")"));
    }
    ids.push_back(static_cast<int32_t>(t));
  }
  return ids;
}

std::string decode_bytes(const Tokenizer& tok, const std::vector<int64_t>& tokens, bool remove_special,
                         bool unparse_special) {
  const std::vector<int32_t> ids = token_ids(tokens, tok.n_vocab());
  nb::gil_scoped_release release;
  return tok.decode(ids, remove_special, unparse_special);
}

nb::bytes to_bytes(std::string_view s) { return nb::bytes(s.data(), s.size()); }

}  // namespace

size_t kept_id_buffer_bytes() { return kept_ids ? kept_ids->capacity_bytes() : 0; }

void init_tokenizer(nb::module_& m) {
  nb::class_<Tokenizer>(m, "Tokenizer",
                        "Text <-> token ids from a GGUF vocabulary, identical to llama.cpp's tokenizer.\n"
                        "Immutable; safe to share across threads. Encoding and decoding release the GIL.")
      .def(nb::new_([](const GgufFile& file) { return Tokenizer::from_gguf(file); }), nb::arg("gguf_file"),
           "Build from an opened GgufFile. Raises ModelFormatError naming the tokenizer key that is\n"
           "missing, malformed or unsupported.")
      .def_static(
          "from_file",
          [](const std::string& path) {
            nb::gil_scoped_release release;
            const std::shared_ptr<const GgufFile> file = GgufFile::open(path);
            return Tokenizer::from_gguf(*file);
          },
          nb::arg("path"), "Open a GGUF file and build its tokenizer (ModelFormatError on a bad file).")
      .def(
          "encode",
          [](const Tokenizer& tok, nb::handle text, bool add_special, bool parse_special,
             std::shared_ptr<CancelToken> cancel) {
            const std::string_view bytes = text_bytes(text);
            // The ids buffer is the thread's, kept between calls within a
            // bound (csrc/tokenizer/thread_scratch.h): fresh pages for
            // millions of ids each call cost more than filling them.
            const ScratchLease<IdBuffer> ids(kept_ids, kKeptScratchBytes);
            {
              nb::gil_scoped_release release;
              tok.encode_into(bytes, add_special, parse_special, ids->ids, cancel.get());
            }
            return id_list(ids->ids);
          },
          nb::arg("text"), nb::arg("add_special") = true, nb::arg("parse_special") = false,
          nb::arg("cancel").none() = nb::none(),
          "Token ids of `text` (str, or bytes taken as UTF-8 even when invalid).\n"
          "add_special: add BOS/EOS as the vocabulary asks. parse_special: let control-token texts\n"
          "in `text` become those tokens (user-defined tokens are always recognised).\n"
          "cancel: a CancelToken checked every few kilobytes of work; once it reads as cancelled\n"
          "(or its deadline passes) encoding stops with Cancelled.")
      .def(
          "decode",
          [](const Tokenizer& tok, const std::vector<int64_t>& tokens, bool remove_special, bool unparse_special) {
            const std::string bytes = decode_bytes(tok, tokens, remove_special, unparse_special);
            PyObject* s = PyUnicode_DecodeUTF8(bytes.data(), static_cast<Py_ssize_t>(bytes.size()), "replace");
            if (s == nullptr) throw nb::python_error();
            return nb::steal<nb::str>(s);
          },
          nb::arg("tokens"), nb::arg("remove_special") = true, nb::arg("unparse_special") = false,
          "Text of `tokens` (llama_detokenize semantics); invalid UTF-8 becomes U+FFFD.\n"
          "Raises ValueError for an id outside [0, n_vocab).")
      .def(
          "decode_bytes",
          [](const Tokenizer& tok, const std::vector<int64_t>& tokens, bool remove_special, bool unparse_special) {
            return to_bytes(decode_bytes(tok, tokens, remove_special, unparse_special));
          },
          nb::arg("tokens"), nb::arg("remove_special") = true, nb::arg("unparse_special") = false,
          "Like decode() but returns the raw bytes (possibly not valid UTF-8).")
      .def(
          "token_bytes",
          [](const Tokenizer& tok, bool special) {
            nb::list out;
            for (int32_t id = 0; id < tok.n_vocab(); ++id) out.append(to_bytes(tok.piece_bytes(id, special)));
            return out;
          },
          nb::arg("special") = false,
          "Bytes each token contributes inside a text, for every id (control and unknown tokens\n"
          "are empty unless special=True).")
      .def(
          "piece",
          [](const Tokenizer& tok, int32_t id, bool special) { return to_bytes(tok.piece_bytes(id, special)); },
          nb::arg("id"), nb::arg("special") = false, "token_bytes(special)[id] for one token.")
      .def(
          "token_text",
          [](const Tokenizer& tok, int32_t id) { return to_bytes(tok.token_text(id)); }, nb::arg("id"),
          "The token's text as stored in the vocabulary (bytes).")
      .def(
          "token_types",
          [](const Tokenizer& tok) {
            std::vector<int32_t> types(static_cast<size_t>(tok.n_vocab()));
            for (int32_t id = 0; id < tok.n_vocab(); ++id) types[id] = static_cast<int32_t>(tok.token_type(id));
            return types;
          },
          "Effective GGUF token type of every id: 1 normal, 2 unknown, 3 control, 4 user-defined,\n"
          "5 unused, 6 byte (0 undefined), after llama.cpp's load-time corrections.")
      .def("is_eog", &Tokenizer::is_eog, nb::arg("id"), "Whether the id ends generation.")
      .def_static("known_pre_tokenizers", &pretok::known_pre_tokenizer_names,
                  "Every tokenizer.ggml.pre value supported for byte-level BPE vocabularies.")
      .def_prop_ro("n_vocab", &Tokenizer::n_vocab)
      .def_prop_ro("bos_id", &Tokenizer::bos_id, "-1 when absent")
      .def_prop_ro("eos_id", &Tokenizer::eos_id, "-1 when absent")
      .def_prop_ro("eot_id", &Tokenizer::eot_id, "-1 when absent")
      .def_prop_ro("unk_id", &Tokenizer::unk_id, "-1 when absent")
      .def_prop_ro("pad_id", &Tokenizer::pad_id, "-1 when absent")
      .def_prop_ro("eog_ids", &Tokenizer::eog_ids, "End-of-generation ids, ascending.")
      .def_prop_ro("add_bos", &Tokenizer::add_bos)
      .def_prop_ro("add_eos", &Tokenizer::add_eos)
      .def_prop_ro("add_space_prefix", &Tokenizer::add_space_prefix)
      .def_prop_ro("model", &Tokenizer::model_name, "tokenizer.ggml.model: 'llama' or 'gpt2'")
      .def_prop_ro("pre", &Tokenizer::pre_name, "tokenizer.ggml.pre as stored ('' when absent)");
}

}  // namespace muser::bindings
