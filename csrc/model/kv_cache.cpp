#include "model/kv_cache.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"

namespace muser {

KvCache::KvCache(const HParams& hp, size_t max_context)
    : max_context_(max_context),
      k_width_(hp.k_width()),
      v_width_(hp.v_width()),
      window_(hp.has_sliding_layers() ? hp.sliding_window : 0) {
  if (max_context == 0) throw InvalidArgument("[kv_cache] max_context: expected at least 1, got 0");
  ring_rows_ = window_ == 0 ? 0 : std::min(max_context_, window_ + kMaxSegmentRows - 1);
  layers_.resize(hp.n_layer);
  for (uint32_t il = 0; il < hp.n_layer; ++il) {
    layers_[il].ring = hp.layers[il].sliding;
    if (layers_[il].ring) {
      has_ring_ = true;
    } else {
      has_global_ = true;
    }
  }
  if (has_ring_) ring_position_.assign(ring_rows_, -1);
}

KvCache::KvCache(const KvCache& other, size_t global_keep_pages)
    : max_context_(other.max_context_),
      k_width_(other.k_width_),
      v_width_(other.v_width_),
      window_(other.window_),
      ring_rows_(other.ring_rows_),
      has_global_(other.has_global_),
      has_ring_(other.has_ring_),
      global_intact_end_(other.global_intact_end_),
      ring_position_(other.ring_position_) {
  auto copy_pages = [](const std::vector<Page>& from, size_t n_pages, size_t width) {
    std::vector<Page> to;
    to.reserve(n_pages);
    for (size_t i = 0; i < n_pages; ++i) {
      to.emplace_back(new uint16_t[kKvPageRows * width]);
      std::memcpy(to.back().get(), from[i].get(), kKvPageRows * width * sizeof(uint16_t));
    }
    return to;
  };
  layers_.resize(other.layers_.size());
  for (size_t il = 0; il < layers_.size(); ++il) {
    const LayerPlanes& from = other.layers_[il];
    LayerPlanes& to = layers_[il];
    to.ring = from.ring;
    const size_t n_pages = from.ring ? from.k.size() : std::min(from.k.size(), global_keep_pages);
    to.k = copy_pages(from.k, n_pages, k_width_);
    to.v = copy_pages(from.v, n_pages, v_width_);
  }
}

size_t KvCache::pages_needed(bool ring, size_t end) const {
  const size_t rows = ring ? std::min(end, ring_rows_) : end;
  return (rows + kKvPageRows - 1) / kKvPageRows;
}

void KvCache::grow(size_t end) {
  // Pages are only ever added, and a plane's page count is its own, so
  // std::bad_alloc part-way leaves every existing row where it was.
  for (LayerPlanes& planes : layers_) {
    const size_t needed = pages_needed(planes.ring, end);
    while (planes.k.size() < needed) planes.k.emplace_back(new uint16_t[kKvPageRows * k_width_]);
    while (planes.v.size() < needed) planes.v.emplace_back(new uint16_t[kKvPageRows * v_width_]);
  }
}

void KvCache::begin_write(size_t start, size_t n) {
  if (n == 0 || start > max_context_ || n > max_context_ - start) {
    throw InternalError("[kv_cache] write of positions [" + std::to_string(start) + ", " +
                        std::to_string(start + n) + ") outside the context of " +
                        std::to_string(max_context_));
  }
  grow(start + n);
  global_intact_end_ = std::min(global_intact_end_, start);
  if (has_ring_) {
    for (size_t p = start; p < start + n; ++p) ring_position_[p % ring_rows_] = -1;
  }
}

void KvCache::end_write(size_t start, size_t n) noexcept {
  if (global_intact_end_ == start) global_intact_end_ = start + n;
  if (has_ring_) {
    for (size_t p = start; p < start + n; ++p) ring_position_[p % ring_rows_] = static_cast<int64_t>(p);
  }
}

bool KvCache::intact(size_t first_query, size_t end) const {
  if (end > max_context_ || first_query > end) return false;
  if (has_global_ && global_intact_end_ < end) return false;
  if (has_ring_) {
    // The oldest position any query in [first_query, end) can see.
    const size_t lowest = first_query + 1 > window_ ? first_query + 1 - window_ : 0;
    for (size_t p = lowest; p < end; ++p) {
      if (ring_position_[p % ring_rows_] != static_cast<int64_t>(p)) return false;
    }
  }
  return true;
}

void KvCache::forget_from(size_t position) noexcept {
  global_intact_end_ = std::min(global_intact_end_, position);
  for (int64_t& held : ring_position_) {
    if (held >= static_cast<int64_t>(position)) held = -1;
  }
}

std::unique_ptr<KvState> KvCache::clone() const {
  // Global pages past the intact end hold nothing of the sequence; the copy
  // leaves them out (it grows again when written).
  const size_t keep = pages_needed(false, global_intact_end_);
  return std::unique_ptr<KvState>(new KvCache(*this, keep));
}

size_t KvCache::bytes() const {
  size_t total = ring_position_.capacity() * sizeof(int64_t);
  for (const LayerPlanes& planes : layers_) {
    total += kKvPageRows * (planes.k.size() * k_width_ + planes.v.size() * v_width_) * sizeof(uint16_t);
  }
  return total;
}

}  // namespace muser
