// Saved sessions: a SessionSnapshot to plain arrays and back (muser/session_files.py
// writes them to a safetensors file). Every array crossing here is a copy.
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/vector.h>

#include "bindings/bindings.h"
#include "core/error.h"
#include "engine/engine.h"
#include "engine/session.h"

namespace nb = nanobind;

namespace muser::bindings {
namespace {

template <typename T>
nb::ndarray<nb::numpy, T> owned_array(std::vector<T>&& values, std::initializer_list<size_t> shape) {
  auto* data = new std::vector<T>(std::move(values));
  nb::capsule owner(data, [](void* p) noexcept { delete static_cast<std::vector<T>*>(p); });
  return nb::ndarray<nb::numpy, T>(data->data(), shape.size(), shape.begin(), owner);
}

template <typename T>
std::vector<T> to_vector(const nb::ndarray<const T, nb::c_contig, nb::device::cpu>& array) {
  return std::vector<T>(array.data(), array.data() + array.size());
}

nb::dict export_snapshot(const SessionSnapshot& snap) {
  KvExport kv;
  {
    nb::gil_scoped_release release;
    kv = snap.kv->export_kv(snap.tokens.size());
  }
  nb::dict out;
  out["max_context"] = snap.max_context;
  out["tokens"] = owned_array(std::vector<int32_t>(snap.tokens), {snap.tokens.size()});
  out["logits"] = snap.logits.empty() ? nb::none() : nb::cast(owned_array(std::vector<float>(snap.logits),
                                                                          {snap.logits.size()}));
  nb::list layers;
  for (KvExport::Layer& layer : kv.layers) {
    const size_t rows = kv.n_past - layer.first_position;
    nb::dict entry;
    entry["ring"] = layer.ring;
    entry["first_position"] = layer.first_position;
    entry["k"] = owned_array(std::move(layer.k), {rows, layer.k_width});
    entry["v"] = owned_array(std::move(layer.v), {rows, layer.v_width});
    layers.append(entry);
  }
  out["layers"] = layers;
  return out;
}

using U16Rows = nb::ndarray<const uint16_t, nb::ndim<2>, nb::c_contig, nb::device::cpu>;

std::shared_ptr<const SessionSnapshot> import_snapshot(
    Engine& engine, size_t max_context, const nb::ndarray<const int32_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>& tokens,
    const std::optional<nb::ndarray<const float, nb::ndim<1>, nb::c_contig, nb::device::cpu>>& logits,
    const std::vector<bool>& rings, const std::vector<size_t>& first_positions, const std::vector<U16Rows>& ks,
    const std::vector<U16Rows>& vs) {
  const HParams& hp = engine.hparams();
  auto fail = [](const std::string& what) { throw InvalidArgument("[session file] " + what); };
  if (max_context == 0 || max_context > hp.n_ctx_train) {
    fail("max_context " + std::to_string(max_context) + " outside 1.." + std::to_string(hp.n_ctx_train));
  }
  if (tokens.size() > max_context) fail("more tokens than max_context");
  if (rings.size() != first_positions.size() || rings.size() != ks.size() || rings.size() != vs.size()) {
    fail("layer lists of different lengths");
  }
  auto snap = std::make_shared<SessionSnapshot>();
  snap->engine = engine.shared_from_this();
  snap->max_context = max_context;
  snap->tokens.assign(tokens.data(), tokens.data() + tokens.size());
  for (size_t i = 0; i < snap->tokens.size(); ++i) {
    if (snap->tokens[i] < 0 || static_cast<uint32_t>(snap->tokens[i]) >= hp.n_vocab) {
      fail("token " + std::to_string(snap->tokens[i]) + " at index " + std::to_string(i) + " out of range");
    }
  }
  if (logits.has_value()) {
    if (logits->size() != hp.n_vocab) fail("expected " + std::to_string(hp.n_vocab) + " logits");
    snap->logits.assign(logits->data(), logits->data() + logits->size());
  } else if (!snap->tokens.empty()) {
    fail("a session with tokens needs its logits");
  }
  KvExport kv;
  kv.n_past = snap->tokens.size();
  for (size_t il = 0; il < rings.size(); ++il) {
    KvExport::Layer layer;
    layer.ring = rings[il];
    layer.first_position = first_positions[il];
    layer.k_width = ks[il].shape(1);
    layer.v_width = vs[il].shape(1);
    layer.k.assign(ks[il].data(), ks[il].data() + ks[il].size());
    layer.v.assign(vs[il].data(), vs[il].data() + vs[il].size());
    kv.layers.push_back(std::move(layer));
  }
  {
    nb::gil_scoped_release release;
    snap->kv = engine.new_kv_state(max_context);
    snap->kv->import_kv(kv);
  }
  return snap;
}

}  // namespace

void init_session_files(nb::module_& m) {
  m.def("snapshot_export", &export_snapshot, nb::arg("snapshot"),
        "A snapshot as plain arrays: max_context, tokens (int32), logits (float32 or None) and per layer "
        "{ring, first_position, k, v} (uint16 f16 bits, rows x width). Copies.");
  m.def("snapshot_import", &import_snapshot, nb::arg("engine"), nb::arg("max_context"), nb::arg("tokens"),
        nb::arg("logits").none(), nb::arg("rings"), nb::arg("first_positions"), nb::arg("k"), nb::arg("v"),
        "The inverse of snapshot_export, for `engine`: a SessionSnapshot to restore into a session with the same "
        "max_context. Checks every count and width (ValueError naming the first mismatch).");
}

}  // namespace muser::bindings
