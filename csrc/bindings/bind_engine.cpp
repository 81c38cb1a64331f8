// Engine, Session and SessionSnapshot. Compute and blocking calls release the
// GIL; everything returned to Python is a copy (logits: a fresh float32
// array the caller owns, so later decodes never change it).
#include <cstdint>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include <nanobind/ndarray.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/tuple.h>

#include "bindings/bindings.h"
#include "bindings/blocking_call.h"
#include "core/cancel_token.h"
#include "bindings/python_values.h"
#include "core/error.h"
#include "core/limits.h"
#include "backend/registry.h"
#include "engine/engine.h"
#include "engine/hidden_states.h"
#include "engine/session.h"
#include "tokenizer/tokenizer.h"

namespace nb = nanobind;

namespace muser::bindings {
namespace {

// Python ints are checked against the vocabulary before they are narrowed,
// so a huge id fails with the same ValueError as any other bad id.
std::vector<int32_t> token_ids(const std::vector<int64_t>& tokens, uint32_t n_vocab, const char* what) {
  std::vector<int32_t> out(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] < 0 || tokens[i] >= static_cast<int64_t>(n_vocab)) {
      throw InvalidArgument("[session] " + std::string(what) + ": token id " + std::to_string(tokens[i]) +
                            " at index " + std::to_string(i) + " out of range [0, " +
                            std::to_string(n_vocab) + ")");
    }
    out[i] = static_cast<int32_t>(tokens[i]);
  }
  return out;
}

const char* rope_style_name(RopeStyle style) { return style == RopeStyle::Normal ? "normal" : "neox"; }

nb::dict engine_config(const Engine& engine) {
  const HParams& hp = engine.hparams();
  const GgufFile& file = engine.file();
  nb::dict c;
  c["architecture"] = hp.arch_name;
  c["family"] = hp.family;
  c["name"] = python_str_or_bytes(file.get_string("general.name", ""));
  c["backend"] = engine.backend_name();
  c["threads"] = engine.threads();
  c["context_length"] = hp.n_ctx_train;
  c["n_vocab"] = hp.n_vocab;
  c["n_embd"] = hp.n_embd;
  c["n_layer"] = hp.n_layer;
  c["n_head"] = hp.n_head;
  c["n_head_kv"] = hp.n_head_kv;
  c["head_dim_k"] = hp.head_dim_k;
  c["head_dim_v"] = hp.head_dim_v;
  c["n_ff"] = hp.n_ff;
  c["n_rot"] = hp.n_rot;
  c["rms_eps"] = hp.rms_eps;
  c["rope_style"] = rope_style_name(hp.rope_style);
  c["rope_freq_base"] = hp.layers.empty() ? 0.0 : [&] {
    for (const auto& layer : hp.layers) {
      if (!layer.sliding) return layer.rope_base;
    }
    return hp.layers[0].rope_base;
  }();
  c["sliding_window"] = hp.sliding_window;
  nb::list sliding;
  for (const auto& layer : hp.layers) sliding.append(layer.sliding);
  c["sliding_layers"] = sliding;
  c["final_logit_softcapping"] = hp.final_logit_softcap;
  c["tied_output"] = engine.model().tied_output;

  // Special tokens and tokenizer flags, when the file states them.
  nb::dict special;
  const char* names[] = {"bos", "eos", "eot", "eom", "unknown", "separator", "padding"};
  for (const char* name : names) {
    std::string key = std::string("tokenizer.ggml.") + name + "_token_id";
    // Signed: optional ids the loader tolerates (llama.cpp only warns) may
    // be negative or past the vocabulary; config reports them as written.
    const GgufValue* v = file.find(key);
    if (v == nullptr) continue;
    if (v->type == GgufType::I8 || v->type == GgufType::I16 || v->type == GgufType::I32 || v->type == GgufType::I64) {
      special[name] = v->as_int;
    } else if (gguf_type_is_integer(v->type)) {
      special[name] = v->as_uint;
    }
  }
  c["special_tokens"] = special;
  c["add_bos_token"] = file.get_bool("tokenizer.ggml.add_bos_token", false);
  c["add_eos_token"] = file.get_bool("tokenizer.ggml.add_eos_token", false);
  if (file.has("tokenizer.chat_template")) {
    c["chat_template"] = python_str_or_bytes(file.get_string("tokenizer.chat_template"));
  } else {
    c["chat_template"] = nb::none();
  }
  return c;
}

}  // namespace

void init_engine(nb::module_& m) {
  m.def(
      "available_backends",
      [] {
        std::vector<std::string> names;
        for (const BackendInfo& info : list_backends()) {
          if (info.usable) names.push_back(info.name);
        }
        return names;
      },
      "Backend names this build can run here (besides 'auto').");
  m.def(
      "backends",
      [] {
        std::vector<std::tuple<std::string, bool, std::string>> out;
        for (const BackendInfo& info : list_backends()) out.emplace_back(info.name, info.usable, info.reason);
        return out;
      },
      "Every backend muser knows, in 'auto' preference order: (name, usable here, why not).");
  m.def(
      "resolve_backend", &resolve_backend, nb::arg("name"),
      "The backend Engine(backend=name) would run ('auto' resolved); ValueError saying why for an "
      "unusable or unknown name.");
  nb::class_<SessionSnapshot>(m, "SessionSnapshot",
                              "A frozen copy of a session (KV, tokens, logits). Immutable; restore it "
                              "into any session of the same engine and max_context, any number of times.")
      .def_prop_ro("n_past", [](const SessionSnapshot& s) { return s.tokens.size(); })
      .def_prop_ro("nbytes", &SessionSnapshot::bytes, "Bytes of memory the snapshot holds.");

  nb::class_<Session>(m, "Session",
                      "One resident sequence. Calls on one session are serialized; a failed call "
                      "leaves tokens, n_past and logits unchanged.")
      .def(
          "prefill",
          [](Session& s, const std::vector<int64_t>& tokens, std::shared_ptr<CancelToken> cancel) {
            std::vector<int32_t> ids = token_ids(tokens, s.engine()->hparams().n_vocab, "prefill");
            PythonSignals signals;
            ReleasedGil release;
            s.prefill(ids, cancel.get());
          },
          nb::arg("tokens"), nb::arg("cancel").none() = nb::none(),
          "Append tokens (chunks of 512 rows, 64 while a decoder waits); releases the GIL.\n"
          "A cancelled token stops it at a chunk boundary with Cancelled, Ctrl-C with KeyboardInterrupt;\n"
          "either way the state is unchanged.")
      .def(
          "decode",
          [](Session& s, int64_t token) {
            std::vector<int32_t> ids = token_ids({token}, s.engine()->hparams().n_vocab, "decode");
            ReleasedGil release;
            s.decode(ids[0]);
          },
          nb::arg("token"), "Append one token; releases the GIL.")
      .def(
          "truncate",
          [](Session& s, int64_t n) {
            if (n < 0) throw InvalidArgument("[session] truncate: expected n >= 0, got " + std::to_string(n));
            PythonSignals signals;
            ReleasedGil release;
            s.truncate(static_cast<size_t>(n));
          },
          nb::arg("n"), "Keep the first n tokens; logits become those of position n - 1.")
      .def(
          "snapshot",
          [](const Session& s) {
            nb::gil_scoped_release release;
            return s.snapshot();
          },
          "Copy KV, tokens and logits into a SessionSnapshot.")
      .def(
          "restore",
          [](Session& s, const SessionSnapshot& snap) {
            nb::gil_scoped_release release;
            s.restore(snap);
          },
          nb::arg("snapshot"), "Replace this session's state with a copy of the snapshot.")
      .def_prop_ro(
          "logits",
          [](const Session& s) -> nb::object {
            const size_t n = s.engine()->hparams().n_vocab;
            float* data = new float[n];
            nb::capsule owner(data, [](void* p) noexcept { delete[] static_cast<float*>(p); });
            bool have;
            {
              nb::gil_scoped_release release;
              have = s.copy_logits(data);
            }
            if (!have) return nb::none();
            size_t shape[1] = {n};
            return nb::cast(nb::ndarray<nb::numpy, float, nb::ndim<1>>(data, 1, shape, owner));
          },
          "Next-token logits of the last position: a new float32 array (n_vocab,) the caller owns, "
          "or None before the first token.")
      .def_prop_ro("id", &Session::id, "This session's key in the engine's decode rotation.")
      // The readers wait for the session's lock (held through a whole
      // prefill), so they release the GIL like every other blocking call.
      .def_prop_ro(
          "tokens",
          [](const Session& s) {
            nb::gil_scoped_release release;
            return s.tokens();
          },
          "The token history (a copy).")
      .def_prop_ro("n_past",
                   [](const Session& s) {
                     nb::gil_scoped_release release;
                     return s.n_past();
                   })
      .def_prop_ro("max_context", &Session::max_context)
      .def_prop_ro(
          "kv_bytes",
          [](const Session& s) {
            nb::gil_scoped_release release;
            return s.kv_bytes();
          },
          "Bytes of memory the KV state holds.");

  nb::class_<Engine>(m, "Engine", "A mapped GGUF model with its backend. Thread-safe.")
      .def(nb::new_([](const std::string& path, std::optional<int> threads, const std::string& backend,
                       double null_step_seconds, double null_prefill_seconds_per_row) {
             EngineOptions options;
             if (threads.has_value() && *threads < 1) {
               throw InvalidArgument("[engine] threads: expected at least 1 (or None), got " +
                                     std::to_string(*threads));
             }
             options.threads = threads.value_or(0);
             options.backend = backend;
             options.null_step_seconds = null_step_seconds;
             options.null_prefill_seconds_per_row = null_prefill_seconds_per_row;
             nb::gil_scoped_release release;
             return Engine::open(path, options);
           }),
           nb::arg("path"), nb::arg("threads") = nb::none(), nb::arg("backend") = "auto",
           nb::arg("null_step_seconds") = 0.0, nb::arg("null_prefill_seconds_per_row") = 0.0,
           "Map and validate a GGUF model. Raises ModelFormatError for a bad or unsupported file.")
      .def_prop_ro("config", &engine_config, "Hyperparameters, special tokens and chat template (a new dict).")
      .def("metadata", [](const Engine& e) { return metadata_dict(e.file()); }, "All GGUF metadata (a copy).")
      .def_prop_ro("path", [](const Engine& e) { return e.file().path(); })
      .def_prop_ro("backend", [](const Engine& e) { return std::string(e.backend_name()); })
      .def_prop_ro("threads", &Engine::threads)
      .def_prop_ro(
          "tokenizer", [](const Engine& e) { return std::const_pointer_cast<Tokenizer>(e.tokenizer()); },
          "The model's tokenizer (immutable, shared).")
      .def_prop_ro("_graphs_built", [](const Engine& e) { return e.graphs_built(); },
                   "Tests only: step graphs recorded so far (one per shape class while cached).")
      .def(
          "_arm_forward_fault",
          [](Engine& e, uint64_t forwards_to_skip, uint32_t after_layer) {
            e.faults().arm(forwards_to_skip, after_layer);
          },
          nb::arg("forwards_to_skip"), nb::arg("after_layer"),
          "Tests only: the forward after `forwards_to_skip` more fails (InternalError) after layer "
          "`after_layer` has written its KV.")
      .def(
          "session",
          [](Engine& e, std::optional<int64_t> max_context) {
            int64_t n = max_context.value_or(
                std::min<int64_t>(static_cast<int64_t>(kDefaultMaxContext), static_cast<int64_t>(e.hparams().n_ctx_train)));
            if (n < 1) throw InvalidArgument("[session] max_context: expected at least 1, got " + std::to_string(n));
            return e.new_session(static_cast<size_t>(n));
          },
          nb::arg("max_context") = nb::none(),
          "A new session of up to max_context positions (default min(4096, training context)).")
      .def(
          "decode_group",
          [](Engine& e, const std::vector<Session*>& sessions, const std::vector<int64_t>& tokens) {
            std::vector<int32_t> ids = token_ids(tokens, e.hparams().n_vocab, "decode_group");
            for (size_t i = 0; i < sessions.size(); ++i) {
              if (sessions[i] != nullptr && sessions[i]->engine().get() != &e) {
                throw InvalidArgument("[decode_group] session " + std::to_string(i) + " belongs to another engine");
              }
            }
            nb::gil_scoped_release release;
            Session::decode_group(sessions, ids);
          },
          nb::arg("sessions"), nb::arg("tokens"),
          "Append tokens[i] to sessions[i] for 1..4 distinct sessions in one weight pass.\n"
          "Checks everything first: on any error no session changes. Releases the GIL.")
      .def_prop_ro(
          "schedule_recorder", [](Engine& e) -> ScheduleRecorder& { return e.scheduler().recorder(); },
          nb::rv_policy::reference_internal, "This engine's schedule recorder (see muser.testing).")
      .def(
          "hidden_states",
          [](Engine& e, const std::vector<std::vector<int64_t>>& texts, const CancelToken* cancel) {
            std::vector<std::vector<int32_t>> ids;
            ids.reserve(texts.size());
            for (const auto& text : texts) ids.push_back(token_ids(text, e.hparams().n_vocab, "hidden_states"));
            std::vector<std::vector<float>> hidden;
            {
              nb::gil_scoped_release release;
              hidden = compute_hidden_states(e, ids, cancel);
            }
            // One owned float32 array (n_tokens, n_embd) per text (a copy the caller owns).
            nb::list out;
            const size_t n_embd = e.hparams().n_embd;
            for (auto& rows : hidden) {
              auto* data = new std::vector<float>(std::move(rows));
              nb::capsule owner(data, [](void* p) noexcept { delete static_cast<std::vector<float>*>(p); });
              size_t shape[2] = {data->size() / n_embd, n_embd};
              out.append(nb::ndarray<nb::numpy, float, nb::ndim<2>>(data->data(), 2, shape, owner));
            }
            return out;
          },
          nb::arg("texts"), nb::arg("cancel") = nb::none(),
          "Final hidden states after the output norm, one float32 array (n_tokens, n_embd) per text.\n"
          "Texts are packed into prefill forwards under the scheduler. Releases the GIL.")
      .def(
          "scheduler_stats",
          [](Engine& e) { return scheduler_stats_dict(e.scheduler().stats()); },
          "Accelerator permits granted so far: counts, rows, wait and hold times (a new dict).");
}

}  // namespace muser::bindings
