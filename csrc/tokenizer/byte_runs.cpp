#include "tokenizer/byte_runs.h"

#include <algorithm>
#include <string>
#include <unordered_map>

#include "tokenizer/byte_level.h"

namespace muser {

int byte_of_run_text(std::string_view token_text) {
  if (token_text.empty()) return -1;
  // GPT-2 alphabet characters are U+0021..U+0143: one or two UTF-8 bytes.
  const auto lead = static_cast<uint8_t>(token_text[0]);
  uint32_t cp = 0;
  if (lead < 0x80) {
    cp = lead;
  } else if ((lead & 0xE0) == 0xC0 && token_text.size() >= 2) {
    cp = (uint32_t{lead & 0x1Fu} << 6) | (static_cast<uint8_t>(token_text[1]) & 0x3Fu);
  } else {
    return -1;
  }
  const int byte = byte_level::byte_of_code_point(cp);
  if (byte < 0) return -1;
  const std::string& unit = byte_level::utf8_of_byte(static_cast<uint8_t>(byte));
  if (token_text.size() % unit.size() != 0) return -1;
  for (size_t i = 0; i < token_text.size(); i += unit.size()) {
    if (token_text.compare(i, unit.size(), unit) != 0) return -1;
  }
  return byte;
}

void finish_byte_run_merges(ByteRunMerges& runs) {
  std::sort(runs.merges.begin(), runs.merges.end(),
            [](const ByteRunMerge& a, const ByteRunMerge& b) { return a.rank < b.rank; });
  runs.level_ordered = false;
  if (runs.byte_token < 0 || runs.merges.size() > kMaxByteRunMerges) return;
  // The highest rank among the merges that create each token.
  std::unordered_map<int32_t, int32_t> last_created;
  for (const ByteRunMerge& m : runs.merges) {
    int32_t& rank = last_created.try_emplace(m.result, -1).first->second;
    rank = std::max(rank, m.rank);
  }
  for (const ByteRunMerge& m : runs.merges) {
    for (const int32_t side : {m.left, m.right}) {
      const auto it = last_created.find(side);
      if (it != last_created.end() && it->second >= m.rank) return;
    }
  }
  runs.level_ordered = true;
}

namespace {

// Appends (id, count) to a run-length encoding, merging it into the last
// block when the token is the same: the greedy pairing below must see every
// maximal run of a token as one block.
void append_block(std::vector<RunBlock>& blocks, int32_t id, uint32_t count) {
  if (count == 0) return;
  if (!blocks.empty() && blocks.back().id == id) {
    blocks.back().count += count;
  } else {
    blocks.push_back(RunBlock{id, count});
  }
}

}  // namespace

bool merge_byte_run(const ByteRunMerges& runs, uint32_t length, std::vector<int32_t>& out,
                    std::vector<RunBlock>& blocks, std::vector<RunBlock>& next) {
  blocks.assign(1, RunBlock{runs.byte_token, length});
  for (const ByteRunMerge& m : runs.merges) {
    next.clear();
    if (m.left == m.right) {
      // x x x x x -> z z x: pairs taken from the left of each run of x
      // (after merging a pair, the pair starting at its right half is stale).
      for (const RunBlock& b : blocks) {
        if (b.id == m.left && b.count >= 2) {
          append_block(next, m.result, b.count / 2);
          append_block(next, b.id, b.count % 2);
        } else {
          append_block(next, b.id, b.count);
        }
      }
    } else {
      // x y: only where a block of x meets a block of y; occurrences of a
      // pair of two different tokens cannot overlap.
      uint32_t taken = 0;  // taken from the front of this block by the merge before
      for (size_t i = 0; i < blocks.size(); ++i) {
        const RunBlock& b = blocks[i];
        const uint32_t count = b.count - taken;
        taken = 0;
        if (b.id == m.left && i + 1 < blocks.size() && blocks[i + 1].id == m.right) {
          append_block(next, b.id, count - 1);
          append_block(next, m.result, 1);
          taken = 1;
        } else {
          append_block(next, b.id, count);
        }
      }
    }
    if (next.size() > kMaxRunBlocks) return false;
    blocks.swap(next);
  }
  for (const RunBlock& b : blocks) out.insert(out.end(), b.count, b.id);
  return true;
}

}  // namespace muser
