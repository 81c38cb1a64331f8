// Pre-tokenizer families. The names, flags and patterns are llama.cpp's
// (src/llama-vocab.cpp, llm_tokenizer_bpe), stored as data.
#include "tokenizer/pre_tokenizer.h"

#include <algorithm>

#include "tokenizer/unicode_text.h"

namespace muser::pretok {
namespace {

struct NamedSpec {
  std::vector<const char*> names;
  PreTokenizerSpec spec;
};

const std::vector<NamedSpec>& table() {
  static const std::vector<NamedSpec> specs = [] {
    std::vector<NamedSpec> t;
    auto add = [&](std::vector<const char*> names, PreTokenizerSpec spec) { t.push_back({std::move(names), std::move(spec)}); };
    {
      PreTokenizerSpec s;
      s.family = "default";
      s.patterns = {
          reinterpret_cast<const char*>(u8R"~([\p{P}\$\+<=>\^~\|]+)~"),
          reinterpret_cast<const char*>(u8R"~('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S))~"),
          reinterpret_cast<const char*>(u8R"~(\p{N}+)~"),
          reinterpret_cast<const char*>(u8R"~([0-9][0-9][0-9])~"),
      };
      add({"default"}, std::move(s));
    }
    {
      PreTokenizerSpec s;
      s.family = "llama3";
      s.patterns = {
          reinterpret_cast<const char*>(u8R"~((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)~"),
      };
      s.ignore_merges = true;
      s.add_bos = true;
      add({"llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2", "jina-v5-nano"}, std::move(s));
    }
    {
      PreTokenizerSpec s;
      s.family = "dbrx";
      s.patterns = {
          reinterpret_cast<const char*>(u8R"~((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)~"),
      };
      add({"dbrx", "smaug-bpe"}, std::move(s));
    }
    {
      PreTokenizerSpec s;
      s.family = "chatglm4";
      s.patterns = {
          reinterpret_cast<const char*>(u8R"~((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)~"),
      };
      s.no_bos = true;
      add({"glm4", "chatglm-bpe"}, std::move(s));
    }
    {
      PreTokenizerSpec s;
      s.family = "deepseek-llm";
      s.patterns = {
          reinterpret_cast<const char*>(u8R"~([\r\n])~"),
          reinterpret_cast<const char*>(u8R"~(\s?[A-Za-zµÀ-ÖØ-öø-ƺƼ-ƿǄ-ʓʕ-ʯͰ-ͳͶͷͻ-ͽͿΆΈ-ΊΌΎ-ΡΣ-ϵϷ-ҁҊ-ԯԱ-ՖႠ-ჅᎠ-Ᏽᏸ-ᏽᲐ-ᲺᲽ-Ჿᴀ-ᴫᵫ-ᵷᵹ-ᶚḀ-ἕἘ-Ἕἠ-ὅὈ-Ὅὐ-ὗὙὛὝὟ-ώᾀ-ᾴᾶ-ᾼιῂ-ῄῆ-ῌῐ-ΐῖ-Ίῠ-Ῥῲ-ῴῶ-ῼℂℇℊ-ℓℕℙ-ℝℤΩℨK-ℭℯ-ℴℹℼ-ℿⅅ-ⅉⅎↃↄⰀ-ⱻⱾ-ⳤⳫ-ⳮⳲⳳꙀ-ꙭꚀ-ꚛꜢ-ꝯꝱ-ꞇꞋ-ꞎꭰ-ꮿﬀ-ﬆﬓ-ﬗＡ-Ｚａ-ｚ𐐀-𐑏𐒰-𐓓𐓘-𐓻𐲀-𐲲𐳀-𐳲𑢠-𑣟𞤀-𞥃]+)~"),
          reinterpret_cast<const char*>(u8R"~(\s?[!-/:-~！-／：-～‘-‟　-。]+)~"),
          reinterpret_cast<const char*>(u8R"~(\s+$)~"),
          reinterpret_cast<const char*>(u8R"~([一-龥ࠀ-一가-퟿]+)~"),
          reinterpret_cast<const char*>(u8R"~(\p{N}+)~"),
      };
      s.clean_spaces = false;
      add({"deepseek-llm"}, std::move(s));
    }
    {
      PreTokenizerSpec s;
      s.family = "deepseek-coder";
      s.patterns = {
          reinterpret_cast<const char*>(u8R"~([\r\n])~"),
          reinterpret_cast<const char*>(u8R"~(\s?\p{L}+)~"),
          reinterpret_cast<const char*>(u8R"~(\s?\p{P}+)~"),
          reinterpret_cast<const char*>(u8R"~([一-龥ࠀ-一가-퟿]+)~"),
          reinterpret_cast<const char*>(u8R"~(\p{N})~"),
      };
      s.clean_spaces = false;
      add({"deepseek-coder"}, std::move(s));
    }
    {
      PreTokenizerSpec s;
      s.family = "deepseek-v3";
      s.patterns = {
          reinterpret_cast<const char*>(u8R"~(\p{N}{1,3})~"),
          reinterpret_cast<const char*>(u8R"~([一-龥぀-ゟ゠-ヿ]+)~"),
          reinterpret_cast<const char*>(u8R"~([!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)~"),
      };
      s.clean_spaces = false;
      add({"deepseek-v3", "hunyuan-dense", "joyai-llm"}, std::move(s));
    }
    {
      PreTokenizerSpec s;
      s.family = "falcon";
      s.patterns = {
          reinterpret_cast<const char*>(u8R"~([\p{P}\$\+<=>\^~\|`]+)~"),
          reinterpret_cast<const char*>(u8R"~('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S))~"),
          reinterpret_cast<const char*>(u8R"~([0-9][0-9][0-9])~"),
      };
      add({"falcon"}, std::move(s));
    }
    {
      PreTokenizerSpec s;
      s.family = "starcoder";
      s.patterns = {
          reinterpret_cast<const char*>(u8R"~(\p{N})~"),
          reinterpret_cast<const char*>(u8R"~('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S))~"),
      };
      add({"starcoder", "refact", "codeshell", "exaone", "minerva-7b", "mellum2"}, std::move(s));
    }
    {
      PreTokenizerSpec s;
      s.family = "starcoder";
      s.patterns = {
          reinterpret_cast<const char*>(u8R"~(\p{N})~"),
          reinterpret_cast<const char*>(u8R"~('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S))~"),
      };
      s.clean_spaces = false;
      add({"command-r", "smollm"}, std::move(s));
    }
    {
      PreTokenizerSpec s;
      s.family = "gpt2";
      s.patterns = {
          reinterpret_cast<const char*>(u8R"~('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S))~"),
      };
      add({"gpt-2", "gpt2", "phi-2", "jina-es", "jina-de", "gigachat", "jina-v2-es", "jina-v2-de", "a.x-4.0", "mellum", "modern-bert", "exaone4", "mpt", "olmo", "jais"}, std::move(s));
    }
    {
      PreTokenizerSpec s;
      s.family = "gpt2";
      s.patterns = {
          reinterpret_cast<const char*>(u8R"~('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S))~"),
      };
      s.clean_spaces = false;
      add({"trillion", "granite-docling"}, std::move(s));
    }
    {
      PreTokenizerSpec s;
      s.family = "gpt2";
      s.patterns = {
          reinterpret_cast<const char*>(u8R"~('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S))~"),
      };
      add({"jina-v1-en", "jina-v2-code", "roberta-bpe"}, std::move(s));
    }
    {
      PreTokenizerSpec s;
      s.family = "qwen2";
      s.patterns = {
          reinterpret_cast<const char*>(u8R"~((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)~"),
      };
      s.clean_spaces = false;
      add({"qwen2", "deepseek-r1-qwen", "kormo", "f2llmv2", "hunyuan", "solar-open"}, std::move(s));
    }
    {
      PreTokenizerSpec s;
      s.family = "qwen2";
      s.patterns = {
          reinterpret_cast<const char*>(u8R"~((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)~"),
      };
      add({"megrez", "stablelm2"}, std::move(s));
    }
    {
      PreTokenizerSpec s;
      s.family = "qwen35";
      s.patterns = {
          reinterpret_cast<const char*>(u8R"~((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)~"),
      };
      s.clean_spaces = false;
      add({"qwen35"}, std::move(s));
    }
    {
      PreTokenizerSpec s;
      s.family = "poro";
      s.patterns = {
          reinterpret_cast<const char*>(u8R"~( ?[^(\s|.,!?…。，、।۔،)]+)~"),
      };
      s.clean_spaces = false;
      add({"poro-chat"}, std::move(s));
    }
    {
      PreTokenizerSpec s;
      s.family = "poro";
      s.patterns = {
          reinterpret_cast<const char*>(u8R"~( ?[^(\s|.,!?…。，、।۔،)]+)~"),
      };
      add({"bloom", "gpt3-finnish"}, std::move(s));
    }
    {
      PreTokenizerSpec s;
      s.family = "viking";
      s.patterns = {
          reinterpret_cast<const char*>(u8R"~( ?[^(\s|.,!?…。，、।۔،)]+)~"),
          reinterpret_cast<const char*>(u8R"~(\p{N})~"),
      };
      s.clean_spaces = false;
      add({"viking"}, std::move(s));
    }
    {
      PreTokenizerSpec s;
      s.family = "tekken";
      s.patterns = {
          reinterpret_cast<const char*>(u8R"~([^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+|[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)~"),
      };
      s.clean_spaces = false;
      s.ignore_merges = true;
      s.add_bos = true;
      add({"tekken"}, std::move(s));
    }
    {
      PreTokenizerSpec s;
      s.family = "gpt-4o";
      s.patterns = {
          reinterpret_cast<const char*>(u8R"~([^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)~"),
      };
      s.clean_spaces = false;
      add({"gpt-4o", "llama4", "kanana2", "talkie"}, std::move(s));
    }
    {
      PreTokenizerSpec s;
      s.family = "seed-coder";
      s.patterns = {
          reinterpret_cast<const char*>(u8R"~((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1}| ?[^\s\p{L}\p{N}\r\n]+|\s*[\r\n]+|\s+(?!\S)|\s+)~"),
      };
      s.clean_spaces = false;
      add({"seed-coder"}, std::move(s));
    }
    {
      PreTokenizerSpec s;
      s.family = "qwen2";
      s.patterns = {
          reinterpret_cast<const char*>(u8R"~((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)~"),
      };
      s.clean_spaces = false;
      add({"grok-2"}, std::move(s));
    }
    {
      PreTokenizerSpec s;
      s.family = "bailingmoe";
      s.patterns = {
          reinterpret_cast<const char*>(u8R"~('(?:[sSdDmMtT]|[lL][lL]|[vV][eE]|[rR][eE])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+)~"),
      };
      s.clean_spaces = false;
      add({"bailingmoe", "bailingmoe2", "llada-moe"}, std::move(s));
    }
    {
      PreTokenizerSpec s;
      s.family = "ufakzeka";
      s.patterns = {
          reinterpret_cast<const char*>(u8R"~([^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)~"),
      };
      s.clean_spaces = false;
      add({"ufakzeka"}, std::move(s));
    }
    {
      PreTokenizerSpec s;
      s.family = "minicpm5";
      s.patterns = {
          reinterpret_cast<const char*>(u8R"~(\p{N}{1,3})~"),
          reinterpret_cast<const char*>(u8R"~((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}+| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)~"),
      };
      s.ignore_merges = true;
      add({"minicpm5"}, std::move(s));
    }
    {
      PreTokenizerSpec s;
      s.family = "exaone-moe";
      s.patterns = {
          reinterpret_cast<const char*>(u8R"~((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?(?:\p{L}\p{M}*(?: \p{L}\p{M}*)*)+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]?|\s*[\r\n]|\s+(?!\S)|\s+)~"),
      };
      add({"exaone-moe"}, std::move(s));
    }
    return t;
  }();
  return specs;
}

}  // namespace

const PreTokenizerSpec* find_pre_tokenizer(std::string_view name) {
  if (name.empty()) name = "default";
  for (const NamedSpec& entry : table()) {
    for (const char* n : entry.names) {
      if (name == n) return &entry.spec;
    }
  }
  return nullptr;
}

std::vector<std::string> known_pre_tokenizer_names() {
  std::vector<std::string> names;
  for (const NamedSpec& entry : table()) {
    for (const char* n : entry.names) names.emplace_back(n);
  }
  return names;
}

// How many code points the decoding and collapsing passes go between two
// reports to EncodeControl (a power of two).
constexpr size_t kDecodeReportEvery = 4096;

PreTokenizer::PreTokenizer(const std::vector<const char*>& patterns) {
  regexes_.reserve(patterns.size());
  for (const char* p : patterns) regexes_.emplace_back(p);
}

namespace {

// Bytes of a code point in canonical UTF-8 (as `clean` holds it); without
// branches, which random text would mispredict.
inline uint32_t utf8_bytes(uint32_t cp) {
  return 1u + static_cast<uint32_t>(cp >= 0x80) + static_cast<uint32_t>(cp >= 0x800) +
         static_cast<uint32_t>(cp >= 0x10000);
}

// Code points of valid UTF-8 (invalid bytes may decode to more: then the
// vector grows as usual). Counts the bytes that do not continue a sequence.
size_t lead_bytes(std::string_view text) {
  size_t count = 0;
  for (const char c : text) count += (static_cast<uint8_t>(c) & 0xC0) != 0x80;
  return count;
}

// Byte offsets in `clean` of code-point indices asked for in ascending
// order: a cursor summing the code points' UTF-8 lengths (the pieces of the
// last pass arrive in order, so one walk over the code points serves all).
class ByteCursor {
 public:
  explicit ByteCursor(const std::vector<uint32_t>& code_points) : cps_(code_points.data()) {}
  uint32_t at(size_t index) {
    for (; cp_ < index; ++cp_) byte_ += utf8_bytes(cps_[cp_]);
    return byte_;
  }

 private:
  const uint32_t* cps_;
  size_t cp_ = 0;
  uint32_t byte_ = 0;
};

}  // namespace

void PreTokenizer::split(std::string_view text, std::string& buffer, std::string_view& clean_view,
                         std::vector<std::pair<uint32_t, uint32_t>>& words, PreTokenizerScratch& s,
                         EncodeControl& control) const {
  words.clear();
  std::string& clean = buffer;
  clean.clear();
  s.code_points.clear();
  size_t offset = 0;
  s.code_points.reserve(lead_bytes(text));
  // Canonical re-encoding, like llama.cpp: overlong forms shrink, bad bytes
  // become U+FFFD. A code point read from exactly as many bytes as its
  // canonical form has was that form (decoding keeps every payload bit), so
  // while that holds `clean` is a prefix of `text`, and when it holds to
  // the end the text itself is the clean text (random Unicode was copied,
  // megabytes, for nothing). Either way a code point's bytes in the clean
  // text are its canonical length (ByteCursor).
  bool same_as_text = true;
  while (offset < text.size()) {
    const size_t before = offset;
    const uint32_t cp = unicode::decode_one_fast(text, offset);
    s.code_points.push_back(cp);
    // Decoding a 16 Mi-character text takes tens of milliseconds before the
    // first match: it reports its work too, so a cancel is seen meanwhile.
    if ((s.code_points.size() & (kDecodeReportEvery - 1)) == 0) control.work(kDecodeReportEvery);
    if (same_as_text) {
      if (offset - before == utf8_bytes(cp)) continue;
      same_as_text = false;
      clean.reserve(text.size() + text.size() / 2);
      clean.assign(text.data(), before);
    }
    if (cp < 0x80) {
      clean.push_back(static_cast<char>(cp));
    } else {
      unicode::append_utf8(clean, cp);
    }
  }
  clean_view = same_as_text ? text : std::string_view(clean);
  const size_t n = s.code_points.size();
  if (n == 0) return;
  // Ordinary text takes tens of steps per character and regex; the limit
  // is a safety net against pathological backtracking.
  s.regex.steps = 0;
  s.regex.stack.clear();  // a kept scratch may hold frames of a search that threw
  s.regex.step_limit = 100'000'000ull + 1'000ull * n * regexes_.size();

  bool have_collapsed = false, have_wide = false;
  s.pieces.assign(1, {0u, static_cast<uint32_t>(n)});
  ByteCursor bytes(s.code_points);
  for (size_t pass = 0; pass < regexes_.size(); ++pass) {
    const Regex& re = regexes_[pass];
    std::vector<uint32_t>* symbols = nullptr;
    if (re.view() == SymbolView::Collapsed) {
      if (!have_collapsed) {
        s.collapsed.resize(n);
        for (size_t i = 0; i < n; i += kDecodeReportEvery) {
          const size_t count = std::min(kDecodeReportEvery, n - i);
          unicode::collapse(s.code_points.data() + i, count, s.collapsed.data() + i);
          control.work(count);
        }
        have_collapsed = true;
      }
      symbols = &s.collapsed;
    } else {
      if (!have_wide) {
        s.wide.resize(n);
        for (size_t i = 0; i < n; ++i) s.wide[i] = symbol_of(s.code_points[i], SymbolView::Wide);
        have_wide = true;
      }
      symbols = &s.wide;
    }
    // The last pass writes the words (byte ranges) directly; the others
    // write the code-point ranges the next pass re-splits.
    const bool last = pass + 1 == regexes_.size();
    s.next_pieces.clear();
    auto emit = [&](size_t begin, size_t end) {
      if (last) {
        const uint32_t byte_begin = bytes.at(begin);  // before at(end): the cursor only advances
        words.emplace_back(byte_begin, bytes.at(end));
      } else {
        s.next_pieces.emplace_back(static_cast<uint32_t>(begin), static_cast<uint32_t>(end));
      }
    };
    for (const auto& [begin, end] : s.pieces) {
      size_t kept = begin, from = begin, mb = 0, me = 0;
      while (from < end && re.search(symbols->data(), begin, end, from, mb, me, s.regex)) {
        if (mb > kept) emit(kept, mb);
        emit(mb, me);
        control.work(me - from);
        kept = from = me;
      }
      if (kept < end) emit(kept, end);
    }
    if (!last) s.pieces.swap(s.next_pieces);
  }
  if (regexes_.empty()) words.emplace_back(0u, static_cast<uint32_t>(clean_view.size()));
}

}  // namespace muser::pretok
