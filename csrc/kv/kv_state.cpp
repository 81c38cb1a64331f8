#include "kv/kv_state.h"

#include <algorithm>
#include <string>

#include "core/error.h"

namespace muser {

KvState::KvState(const KvLayout& layout, size_t max_context, std::unique_ptr<KvStorage> storage)
    : layout_(std::make_shared<const KvLayout>(layout)),
      max_context_(max_context),
      window_(layout.window()),
      ring_rows_(layout.ring_rows(max_context)),
      storage_(std::move(storage)) {
  if (max_context == 0) throw InvalidArgument("[kv_cache] max_context: expected at least 1, got 0");
  if (!storage_) throw InternalError("[kv_cache] no storage");
  if (layout_->has_ring()) ring_position_.assign(ring_rows_, -1);
}

KvState::KvState(const KvState& other, std::unique_ptr<KvStorage> storage)
    : layout_(other.layout_),
      max_context_(other.max_context_),
      window_(other.window_),
      ring_rows_(other.ring_rows_),
      storage_(std::move(storage)),
      global_intact_end_(other.global_intact_end_),
      ring_position_(other.ring_position_) {}

void KvState::begin_write(size_t start, size_t n) {
  if (n == 0 || start > max_context_ || n > max_context_ - start) {
    throw InternalError("[kv_cache] write of positions [" + std::to_string(start) + ", " +
                        std::to_string(start + n) + ") outside the context of " +
                        std::to_string(max_context_));
  }
  storage_->grow(start + n, std::min(start + n, ring_rows_));
  // From here on nothing throws: the positions are marked lost, so a forward
  // that fails part-way can never leave half-written rows looking intact.
  global_intact_end_ = std::min(global_intact_end_, start);
  for (size_t p = start; p < start + n && !ring_position_.empty(); ++p) ring_position_[p % ring_rows_] = -1;
}

void KvState::end_write(size_t start, size_t n) noexcept {
  if (global_intact_end_ == start) global_intact_end_ = start + n;
  for (size_t p = start; p < start + n && !ring_position_.empty(); ++p) {
    ring_position_[p % ring_rows_] = static_cast<int64_t>(p);
  }
}

bool KvState::intact(size_t first_query, size_t end) const {
  if (end > max_context_ || first_query > end) return false;
  if (layout_->has_global() && global_intact_end_ < end) return false;
  if (!ring_position_.empty()) {
    // The oldest position any query in [first_query, end) can see.
    const size_t lowest = first_query + 1 > window_ ? first_query + 1 - window_ : 0;
    for (size_t p = lowest; p < end; ++p) {
      if (ring_position_[p % ring_rows_] != static_cast<int64_t>(p)) return false;
    }
  }
  return true;
}

void KvState::forget_from(size_t position) noexcept {
  global_intact_end_ = std::min(global_intact_end_, position);
  for (int64_t& held : ring_position_) {
    if (held >= static_cast<int64_t>(position)) held = -1;
  }
}

std::unique_ptr<KvState> KvState::clone() const {
  // Global rows past the intact end hold nothing of the sequence; the copy
  // leaves them out (it grows again when written).
  return std::unique_ptr<KvState>(new KvState(*this, storage_->clone(global_intact_end_)));
}

size_t KvState::bytes() const { return storage_->bytes() + ring_position_.capacity() * sizeof(int64_t); }

}  // namespace muser
