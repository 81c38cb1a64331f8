// Special-token partitioning: before a text is tokenized, occurrences of
// special tokens' texts are cut out and become those tokens directly.
//
// llama.cpp's rule, reproduced exactly: special tokens are tried one after
// another, longest text first; each one splits every remaining raw-text
// fragment at its leftmost non-overlapping occurrences. A token with the
// lstrip (rstrip) attribute also swallows the whitespace before (after) it.
// Which tokens take part depends on parse_special: user-defined tokens
// always do; control and unknown tokens only when parse_special is true.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>
#include <vector>

#include "tokenizer/encode_control.h"

namespace muser {

// One piece of the partitioned text: a special token, or raw text.
struct TextFragment {
  int32_t token = -1;  // >= 0: this fragment is that token
  size_t offset = 0;   // raw text: byte range in the input
  size_t length = 0;
};

class SpecialTokenMatcher {
 public:
  struct Entry {
    int32_t id;
    std::string_view text;  // non-empty; owned by the tokenizer
    bool lstrip;
    bool rstrip;
  };

  // `entries` in priority order (the order tokens are tried in).
  explicit SpecialTokenMatcher(std::vector<Entry> entries = {});

  bool empty() const { return entries_.empty(); }

  // Partitions `text` into fragments (cleared first). Thread-safe.
  void partition(std::string_view text, std::vector<TextFragment>& out, EncodeControl& control) const;

 private:
  struct Node {
    int32_t first_child = -1;
    int32_t next_sibling = -1;
    int32_t entry = -1;  // index into entries_ when a token ends here
    uint8_t byte = 0;
  };
  int32_t child(int32_t node, uint8_t byte) const;
  // The node reached from `node` (-1: the root) by `byte` in the
  // Aho-Corasick automaton: the longest trie path that ends the text so far.
  int32_t step(int32_t node, uint8_t byte) const;
  void link_suffixes();

  std::vector<Entry> entries_;
  std::vector<Node> nodes_;
  std::array<int32_t, 256> root_{};
  // Per node: the node of its longest proper suffix on a trie path (-1: the
  // root), and the nearest node on that chain, itself included, where a
  // token ends (-1: none). Finding which tokens occur is then one pass over
  // the text, whatever it holds (a walk from every position cost the
  // longest match per byte: 31 steps a byte in a run of spaces).
  std::vector<int32_t> suffix_;
  std::vector<int32_t> ending_;
};

}  // namespace muser
