// Byte-level BPE on a word made of one byte repeated (a run of spaces,
// dashes, letters...), computed on runs of equal tokens instead of one
// symbol per byte.
//
// A pre-tokenizer keeps a whole run of whitespace (or of one letter or
// punctuation mark) as one word, so 1 MB of spaces is a single word of a
// million symbols for the general merge loop. Every token such a word can
// become is the byte repeated (b^k), and the merge loop pops the pair of
// lowest rank, leftmost first. When no merge among these tokens can create
// a pair of lower rank than its own (`level_ordered` below; true of BPE
// vocabularies learned the usual way, where a token's merges come after
// the merges that create it), the loop's pops have non-decreasing ranks,
// and the pops of one rank happen in left-to-right order among the pairs
// that existed when that rank was reached (a merge x+y -> z makes no new
// x,y pair: z differs from x and y). So the loop's result equals: for each
// merge of these tokens in ascending rank, replace the occurrences of its
// pair greedily from the left. On a run-length encoded sequence (a handful
// of (token, count) blocks) that is a few steps per merge whatever the
// word's length; tests compare it with the general loop on real and
// synthetic vocabularies (tests/property/test_tokenizer_byte_runs.py).
// A byte whose merges are not level-ordered keeps the general loop.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

namespace muser {

struct ByteRunMerge {
  int32_t rank;
  int32_t left;    // id of b^i
  int32_t right;   // id of b^j
  int32_t result;  // id of b^(i+j)
};

// What a run of one byte can merge through, for the shortcut.
struct ByteRunMerges {
  int32_t byte_token = -1;            // id of the byte's own token (-1: none, no shortcut)
  bool level_ordered = false;         // the shortcut applies (see above)
  std::vector<ByteRunMerge> merges;   // every merge among b^k tokens, ascending rank
};

// The byte b when `token_text` is b's GPT-2 alphabet character repeated
// (once or more), else -1. The loader passes every merge's two sides here
// (linear in the merges' text, whatever the file holds).
int byte_of_run_text(std::string_view token_text);

// Sorts `runs.merges` by rank and decides `runs.level_ordered`: every merge
// ranks after every merge that creates either of its tokens. Also refuses
// (keeps the general loop for) a byte with more than kMaxByteRunMerges
// merges, so the shortcut's cost per word stays small.
constexpr size_t kMaxByteRunMerges = 1024;
void finish_byte_run_merges(ByteRunMerges& runs);

// One (token, count) block of a run-length encoded symbol sequence.
struct RunBlock {
  int32_t id;
  uint32_t count;
};

// Appends the ids of a run of `length` (>= 1) copies of the byte to `out`
// and returns true; `runs.level_ordered` must hold. Returns false, with
// `out` untouched, when the run-length encoding would need more than
// kMaxRunBlocks blocks (then the general loop encodes the word).
// `blocks` and `next` are scratch.
constexpr size_t kMaxRunBlocks = 64;
bool merge_byte_run(const ByteRunMerges& runs, uint32_t length, std::vector<int32_t>& out,
                    std::vector<RunBlock>& blocks, std::vector<RunBlock>& next);

}  // namespace muser
