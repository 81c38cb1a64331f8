#include "tokenizer/tokenizer.h"

#include <algorithm>

#include "core/error.h"
#include "tokenizer/spm_memo.h"

namespace muser {

void Tokenizer::check_id(int32_t id, const char* where) const {
  if (id < 0 || id >= n_vocab()) {
    throw InvalidArgument(format_where(where, "token id " + std::to_string(id) + " is outside the vocabulary [0, " +
                                                  std::to_string(n_vocab()) + ")"));
  }
}

std::string_view Tokenizer::token_text(int32_t id) const {
  check_id(id, "tokenizer.token_text");
  return std::string_view(text_arena_).substr(text_offset_[id], text_offset_[id + 1] - text_offset_[id]);
}

float Tokenizer::token_score(int32_t id) const {
  check_id(id, "tokenizer.token_score");
  return scores_[id];
}

TokenType Tokenizer::token_type(int32_t id) const {
  check_id(id, "tokenizer.token_type");
  const uint16_t a = attrs_[id];
  if (a & kAttrByte) return TokenType::Byte;
  if (a & kAttrControl) return TokenType::Control;
  if (a & kAttrUserDefined) return TokenType::UserDefined;
  if (a & kAttrUnknown) return TokenType::Unknown;
  if (a & kAttrUnused) return TokenType::Unused;
  if (a & kAttrNormal) return TokenType::Normal;
  return TokenType::Undefined;
}

bool Tokenizer::is_eog(int32_t id) const { return std::binary_search(eog_.begin(), eog_.end(), id); }

std::string_view Tokenizer::piece_bytes(int32_t id, bool special) const {
  check_id(id, "tokenizer.piece_bytes");
  if (!special && (attrs_[id] & (kAttrUnknown | kAttrControl))) return {};
  return std::string_view(piece_arena_).substr(piece_offset_[id], piece_offset_[id + 1] - piece_offset_[id]);
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special, bool parse_special,
                                       const CancelToken* cancel, MergeQueueKind queue) const {
  std::vector<int32_t> out;
  encode_into(text, add_special, parse_special, out, cancel, queue);
  return out;
}

void Tokenizer::encode_into(std::string_view text, bool add_special, bool parse_special, std::vector<int32_t>& out,
                            const CancelToken* cancel, MergeQueueKind queue) const {
  EncodeControl control(cancel, queue);
  out.clear();
  // Room for one id per byte: byte-level BPE never emits more except for
  // bytes with no token of their own (then it grows as usual). Reserving
  // touches no memory, and random Unicode emits ~0.8 ids a byte, so a
  // smaller guess reallocated and copied the ids twice on large texts.
  out.reserve(text.size() + 4);
  std::vector<TextFragment> fragments;
  (parse_special ? special_all_ : special_user_).partition(text, fragments, control);

  if (add_special && add_bos_) out.push_back(bos_);
  if (kind_ == TokenizerKind::SentencePiece) {
    // A space is prefixed to the first raw fragment and to every fragment
    // that follows a special token (SentencePiece's "dummy prefix").
    bool previous_special = true;
    std::string buffer;
    SpmMemo memo(text.size());
    for (const TextFragment& f : fragments) {
      if (f.token >= 0) {
        out.push_back(f.token);
        previous_special = true;
        continue;
      }
      buffer.clear();
      if (add_space_prefix_ && previous_special) buffer.push_back(' ');
      buffer.append(text.data() + f.offset, f.length);
      encode_spm(buffer, out, memo, control);
      previous_special = false;
    }
  } else {
    encode_bpe_fragments(text, fragments, out, control);
  }
  if (add_special && add_eos_) out.push_back(eos_);
}

std::string Tokenizer::decode(const int32_t* ids, size_t n, bool remove_special, bool unparse_special) const {
  for (size_t i = 0; i < n; ++i) check_id(ids[i], "tokenizer.decode");
  std::string text;
  // SentencePiece vocabularies with a space prefix lose one leading space,
  // except after a BOS that remove_special dropped.
  bool remove_space = add_space_prefix_;
  if (remove_special && add_bos_ && n > 0 && ids[0] == bos_) {
    remove_space = false;
    ++ids;
    --n;
  }
  if (remove_special && add_eos_ && n > 0 && ids[n - 1] == eos_) --n;
  for (size_t i = 0; i < n; ++i) {
    std::string_view piece = piece_bytes(ids[i], unparse_special);
    if (remove_space && !piece.empty() && piece[0] == ' ') piece.remove_prefix(1);
    remove_space = false;
    text.append(piece.data(), piece.size());
  }
  if (!clean_spaces_ || text.empty()) return text;

  // Tokenizer "clean up" as llama.cpp does it, three passes:
  // 1. " ?", " !", " .", " ,"  -> drop the space;
  std::string a;
  a.reserve(text.size());
  a.push_back(text[0]);
  for (size_t i = 1; i < text.size(); ++i) {
    const char x = text[i];
    if (text[i - 1] == ' ' && (x == '?' || x == '!' || x == '.' || x == ',')) a.pop_back();
    a.push_back(x);
  }
  // 2. " ' "  -> "'";
  std::string b;
  b.reserve(a.size());
  b.push_back(a[0]);
  for (size_t i = 1; i < a.size(); ++i) {
    const char x = a[i];
    if (x == '\'' && i + 1 < a.size() && a[i - 1] == ' ' && a[i + 1] == ' ') {
      b.pop_back();
      // The space after is dropped too; llama.cpp overwrites it with NUL in
      // place, so the next character does not see a space before it.
      a[++i] = '\0';
    }
    b.push_back(x);
  }
  // 3. " 's", " 'm", " 're", " 've"  -> drop the space.
  std::string c;
  c.reserve(b.size());
  c.push_back(b[0]);
  for (size_t i = 1; i < b.size(); ++i) {
    const char x = b[i];
    if (b[i - 1] == ' ' && x == '\'' && i + 1 < b.size()) {
      const char x1 = b[i + 1];
      if (x1 == 's' || x1 == 'm') {
        c.pop_back();
      } else if (i + 2 < b.size()) {
        const char x2 = b[i + 2];
        if ((x1 == 'r' && x2 == 'e') || (x1 == 'v' && x2 == 'e')) c.pop_back();
      }
    }
    c.push_back(x);
  }
  return c;
}

}  // namespace muser
