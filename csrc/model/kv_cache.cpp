#include "model/kv_cache.h"

#include <algorithm>

#include "core/error.h"

namespace muser {
namespace {

// Growing planes double, starting here, so a long session reallocates a
// handful of times rather than once per token.
constexpr size_t kMinGrowRows = 256;

}  // namespace

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

size_t KvCache::rows_needed(bool ring, size_t end) const {
  return ring ? std::min(end, ring_rows_) : end;
}

void KvCache::grow(size_t end) {
  // Sizes are computed first and every vector grown before any bookkeeping
  // changes, so std::bad_alloc leaves the cache as it was.
  auto target = [&](size_t have, size_t need, size_t cap) {
    if (need <= have) return have;
    return std::min(cap, std::max({need, have * 2, kMinGrowRows}));
  };
  size_t new_global = has_global_ ? target(global_rows_, rows_needed(false, end), max_context_) : 0;
  size_t new_ring = has_ring_ ? target(ring_alloc_, rows_needed(true, end), ring_rows_) : 0;
  if (new_global == global_rows_ && new_ring == ring_alloc_) return;
  for (LayerPlanes& planes : layers_) {
    size_t rows = planes.ring ? new_ring : new_global;
    planes.k.resize(rows * k_width_);
    planes.v.resize(rows * v_width_);
  }
  global_rows_ = new_global;
  ring_alloc_ = new_ring;
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
    size_t lowest = first_query + 1 > window_ ? first_query + 1 - window_ : 0;
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

KvCache::KvCache(const KvCache& other, size_t global_keep_rows)
    : max_context_(other.max_context_),
      k_width_(other.k_width_),
      v_width_(other.v_width_),
      window_(other.window_),
      ring_rows_(other.ring_rows_),
      global_rows_(global_keep_rows),
      ring_alloc_(other.ring_alloc_),
      has_global_(other.has_global_),
      has_ring_(other.has_ring_),
      global_intact_end_(other.global_intact_end_),
      ring_position_(other.ring_position_) {
  layers_.resize(other.layers_.size());
  for (size_t il = 0; il < layers_.size(); ++il) {
    const LayerPlanes& from = other.layers_[il];
    LayerPlanes& to = layers_[il];
    to.ring = from.ring;
    size_t rows = from.ring ? ring_alloc_ : global_rows_;
    to.k.assign(from.k.begin(), from.k.begin() + rows * k_width_);
    to.v.assign(from.v.begin(), from.v.begin() + rows * v_width_);
  }
}

std::unique_ptr<KvState> KvCache::clone() const {
  // Global rows past the intact end hold nothing of the sequence; the copy
  // leaves them out (it grows again when written).
  size_t keep = std::min(global_rows_, global_intact_end_);
  return std::unique_ptr<KvState>(new KvCache(*this, keep));
}

size_t KvCache::bytes() const {
  size_t total = ring_position_.capacity() * sizeof(int64_t);
  for (const LayerPlanes& planes : layers_) {
    total += (planes.k.capacity() + planes.v.capacity()) * sizeof(uint16_t);
  }
  return total;
}

}  // namespace muser
