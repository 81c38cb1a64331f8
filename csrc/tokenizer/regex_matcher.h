// A small backtracking regex engine for the pre-tokenizer patterns.
//
// It supports exactly the constructs llama.cpp's pre-tokenizer regexes use:
// alternation, (...) / (?:...) groups (nothing is captured), (?=...) and
// (?!...) lookahead, character classes with ranges, negation, \s \S \d and
// \p{L} \p{N} \p{P} \p{M} \p{S} (\p{Lu} etc. as \p{L}), quantifiers ? * +
// {m} {m,} {m,n} (greedy only), and the anchors ^ and $. Semantics are
// ECMAScript's (what std::regex implements): leftmost match, and at that
// position the first alternative that succeeds, with greedy backtracking.
//
// Matching runs on "symbols", one per code point, in one of two views that
// mirror how llama.cpp feeds text to std::regex:
//  - Collapsed (patterns that use \p{...}): ASCII stays itself and every
//    other code point is its unicode::collapsed_byte() (0x0B for whitespace,
//    0xD2 for letters, ...). \p{L} then means [\xD2A-Za-z], and so on.
//  - Wide (patterns without \p{...}; they may contain non-ASCII literals):
//    code points as they are, except non-ASCII whitespace becomes 0x0B.
// \s is [\t\n\v\f\r ] in both views, so non-ASCII whitespace matches it.
//
// A Regex is immutable after construction and may be shared across threads;
// per-call state lives in RegexScratch.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace muser::pretok {

enum class SymbolView { Collapsed, Wide };

// Symbols of one code point in the given view.
uint32_t symbol_of(uint32_t cp, SymbolView view);

// A set of symbols: a bitmap for values < 256 and sorted ranges above.
struct SymbolSet {
  std::array<uint64_t, 4> low{};
  std::vector<std::pair<uint32_t, uint32_t>> high;  // inclusive, >= 256
  bool negated = false;

  bool contains(uint32_t v) const {
    bool in;
    if (v < 256) {
      in = (low[v >> 6] >> (v & 63)) & 1;
    } else {
      in = false;
      for (const auto& r : high) {
        if (v >= r.first && v <= r.second) { in = true; break; }
      }
    }
    return in != negated;
  }
  void add_range(uint32_t first, uint32_t last);
};

struct RegexScratch {
  struct Frame {
    int32_t pc;
    int32_t kind;  // 0: resume at pc/pos; 1: greedy run give-back
    size_t pos;
    size_t min_pos;
  };
  std::vector<Frame> stack;
  // Instruction steps taken, and the most allowed (backtracking on
  // adversarial input can be quadratic; past the limit search() throws
  // InvalidArgument instead of running for minutes).
  uint64_t steps = 0;
  uint64_t step_limit = UINT64_MAX;
};

class Regex {
 public:
  // Throws InternalError for syntax outside the supported subset (patterns
  // are built-in data, so this is a programming error, caught by tests).
  explicit Regex(std::string_view pattern_utf8);

  SymbolView view() const { return view_; }
  const std::string& pattern() const { return pattern_; }

  // Leftmost match in symbols[begin, end) that starts at or after `from`.
  // Assertions and lookahead see `begin`/`end` as the text boundaries.
  // On success sets [match_begin, match_end) and returns true.
  bool search(const uint32_t* symbols, size_t begin, size_t end, size_t from, size_t& match_begin,
              size_t& match_end, RegexScratch& scratch) const;

  struct Node;  // parse tree; defined in the .cpp

 private:
  enum class Op : uint8_t { Set, Run, Split, Jump, Match, AssertBegin, AssertEnd, Look };
  struct Inst {
    Op op;
    bool negate = false;  // Look
    int32_t x = 0;        // Set/Run: set index; Split: preferred; Jump: target; Look: sub-program
    int32_t y = 0;        // Split: alternative
    uint32_t min = 0;     // Run
    uint32_t max = 0;     // Run (UINT32_MAX = unbounded)
  };
  class Parser;
  friend class Parser;

  void emit(const Node& node);
  // Symbols (< 256) that can be the first one consumed on a path from `pc`
  // to Match; `any` when a path may consume nothing first (it reaches
  // Match, an assertion or a lookahead). Memoised in `first`, `state`
  // (0 new, 1 being computed: a loop, taken as any; 2 done).
  struct BranchFirst {
    std::array<uint64_t, 4> low{};
    bool any = false;
    bool may_start(uint32_t v) const { return any || v >= 256 || ((low[v >> 6] >> (v & 63)) & 1); }
  };
  BranchFirst first_of(int32_t pc, std::vector<BranchFirst>& first, std::vector<uint8_t>& state) const;
  bool run(int32_t pc, const uint32_t* symbols, size_t begin, size_t end, size_t pos, size_t& match_end,
           RegexScratch& scratch) const;

  std::string pattern_;
  SymbolView view_ = SymbolView::Collapsed;
  std::vector<SymbolSet> sets_;
  std::vector<Inst> program_;
  // Symbols (< 256) that can start a match; `first_any_` when the pattern can
  // start with anything (nullable, lookahead first, or high symbols).
  SymbolSet first_;
  bool first_any_ = true;
  // Per Split: what can start its preferred (x) and alternative (y) branch.
  // A branch that cannot start at the current symbol would fail on it
  // before any other effect, so run() goes straight to the other one
  // (random Unicode text tries all eight alternatives of GPT-2's pattern
  // at every word, mostly in vain).
  std::vector<BranchFirst> split_x_first_;
  std::vector<BranchFirst> split_y_first_;
  // The whole pattern is X+$ for a set X (deepseek-llm's \s+$): searched by
  // one backward scan instead of backtracking, which would be quadratic.
  bool trailing_run_ = false;
  std::vector<std::pair<const Node*, int32_t>> pending_looks_;
};

}  // namespace muser::pretok
