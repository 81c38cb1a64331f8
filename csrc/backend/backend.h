// The interface every backend (CPU, null, later Metal and CUDA) implements.
//
// A backend does two things: it allocates the KV state of a session, and it
// runs one forward pass over a batch of rows. A batch is a list of segments;
// each segment is a contiguous run of positions of ONE session. Prefill sends
// one segment of up to kMaxSegmentRows rows; decode_group sends 1..4
// one-row segments of different sessions, so four sessions advance in a
// single pass over the weights.
//
// Exactness contract (DESIGN.md): the logits and the KV written for a row
// depend only on that row's token, its position and its session's earlier
// KV, never on the other rows of the batch or on how a prefill was split into
// segments. Implementations keep every reduction in a fixed order per row.
//
// Thread safety: new_kv_state may be called from any thread. forward runs one
// at a time per backend (the engine serializes forwards); the KV states it is
// given must not be touched by anyone else while it runs.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace muser {

// Largest segment a forward accepts. Ring planes of sliding-window layers are
// sized window + kMaxSegmentRows - 1 so that every row of a segment still
// sees its whole window while the segment writes its own keys.
constexpr size_t kMaxSegmentRows = 512;

// A backend-neutral copy of the positions a KV state holds (saved sessions).
// Per layer, the rows of positions [first_position, n_past) in position
// order, as f16 bits: K rows of k_width, V rows of v_width. Global layers
// start at 0; a sliding-window layer may start later (its ring no longer
// holds older positions, and no later query needs them). A backend whose
// state holds no keys (null) exports no layers.
struct KvExport {
  struct Layer {
    bool ring = false;
    size_t first_position = 0;
    size_t k_width = 0;
    size_t v_width = 0;
    std::vector<uint16_t> k;  // (n_past - first_position) x k_width
    std::vector<uint16_t> v;  // (n_past - first_position) x v_width
  };
  size_t n_past = 0;
  std::vector<Layer> layers;
};

// A session's keys and values in whatever form its backend keeps them.
// Positions are "intact" when every layer holds exactly what a forward of the
// session's history wrote there.
class KvState {
 public:
  virtual ~KvState() = default;

  // Positions the state can ever hold (the session's context limit).
  virtual size_t max_context() const = 0;

  // Whether queries at positions [first_query, end) find every key/value they
  // attend to among positions < end intact. intact(n, n) means "a forward can
  // resume at position n"; sliding-window ring planes may have overwritten
  // old positions, so this can be false for an n far behind the newest write.
  virtual bool intact(size_t first_query, size_t end) const = 0;

  // Positions >= `position` stop being part of the sequence (truncate).
  virtual void forget_from(size_t position) noexcept = 0;

  // A deep copy (snapshot). Throws std::bad_alloc; never changes *this.
  virtual std::unique_ptr<KvState> clone() const = 0;

  // Bytes of memory held.
  virtual size_t bytes() const = 0;

  // Saved sessions. export_kv copies what a forward resuming at n_past needs
  // (throws InvalidArgument unless intact(n_past, n_past)); import_kv
  // replaces the whole state with such a copy, after which intact(n_past,
  // n_past) holds and a forward continues bitwise as from the original.
  // import_kv checks every count and width against this state's model and
  // throws InvalidArgument naming the first mismatch, leaving *this as it was.
  virtual KvExport export_kv(size_t n_past) const = 0;
  virtual void import_kv(const KvExport& data) = 0;
};

// One session's rows in a forward.
struct ForwardSegment {
  KvState* kv = nullptr;          // the session's state; made by this backend's new_kv_state
  const int32_t* tokens = nullptr;  // n_tokens ids, each in [0, n_vocab)
  size_t n_tokens = 0;            // 1..kMaxSegmentRows
  size_t start = 0;               // position of tokens[0]
  // Receives the next-token logits of the segment's last row (n_vocab
  // floats); null when the caller does not need them.
  float* logits = nullptr;
  // false: positions [start, start + n_tokens) are computed and written to kv;
  //   kv must satisfy intact(start, start).
  // true (replay): those positions are already intact in kv from an earlier
  //   forward of the same tokens; they are recomputed for their logits only
  //   and kv is not written at all (truncate uses this to recover the logits
  //   of an earlier position). kv must satisfy intact(start, start + n_tokens).
  bool replay = false;
  // Optional (embeddings): receives the final hidden state of EVERY row of
  // the segment after the output norm -- the vectors the output matrix
  // would multiply -- as n_tokens x n_embd floats, row-major. Same
  // exactness contract as the logits: a row's vector does not depend on the
  // other rows of the batch or on how its sequence was split into segments.
  float* hidden = nullptr;
};

// Test hook: makes one future forward throw InternalError part-way through,
// after real KV writes, so tests can check the failure guarantees of the
// layers above on a genuine partial write. Inert unless armed.
class ForwardFaults {
 public:
  // The forward after `forwards_to_skip` further forwards fails once it has
  // computed (and written the KV of) layer `after_layer`.
  void arm(uint64_t forwards_to_skip, uint32_t after_layer) {
    after_layer_.store(after_layer);
    countdown_.store(static_cast<int64_t>(forwards_to_skip) + 1);
  }
  // Backends call this once at the start of each forward: the layer after
  // which this forward must fail, or -1.
  int64_t start_forward() {
    if (countdown_.load() <= 0) return -1;
    return countdown_.fetch_sub(1) == 1 ? static_cast<int64_t>(after_layer_.load()) : -1;
  }

 private:
  std::atomic<int64_t> countdown_{0};
  std::atomic<uint32_t> after_layer_{0};
};

class Backend {
 public:
  virtual ~Backend() = default;

  ForwardFaults faults;  // tests only

  virtual const char* name() const = 0;

  // A fresh KV state for a session of up to max_context positions. Memory is
  // taken as the session grows, not up front.
  virtual std::unique_ptr<KvState> new_kv_state(size_t max_context) const = 0;

  // Runs one forward pass over all rows of all segments (one weight pass).
  // Segments must belong to distinct KV states. Throws InvalidArgument for a
  // malformed batch (empty, too many rows, token out of range, past
  // max_context) and InternalError for a KV state that is not this backend's
  // or not intact where the segment needs it.
  //
  // Failure guarantee: if forward throws, every KV state still satisfies
  // intact(start, start) for its segment, so the session can retry from
  // where it was. (Ring slots overwritten on the way held positions at least
  // one window behind `start`: intact() reports them lost, and a session that
  // truncates back that far rebuilds from its token history.) Logits buffers
  // may have been partly written.
  virtual void forward(const std::vector<ForwardSegment>& segments) = 0;
};

}  // namespace muser
