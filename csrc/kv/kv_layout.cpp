#include "kv/kv_layout.h"

#include <algorithm>

namespace muser {

size_t KvLayout::window() const {
  for (const KvLayerDesc& layer : layers) {
    if (layer.window != 0) return layer.window;
  }
  return 0;
}

size_t KvLayout::ring_rows(size_t max_context) const {
  const size_t w = window();
  return w == 0 ? 0 : std::min(max_context, w + kMaxStepRows - 1);
}

bool KvLayout::has_global() const {
  return std::any_of(layers.begin(), layers.end(), [](const KvLayerDesc& l) { return l.window == 0; });
}

bool KvLayout::has_ring() const {
  return std::any_of(layers.begin(), layers.end(), [](const KvLayerDesc& l) { return l.window != 0; });
}

}  // namespace muser
