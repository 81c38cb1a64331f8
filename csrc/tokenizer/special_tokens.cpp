#include "tokenizer/special_tokens.h"

#include <algorithm>

namespace muser {
namespace {

// C isspace in the "C" locale, which is what llama.cpp strips with.
bool is_c_space(char c) { return c == ' ' || (c >= '\t' && c <= '\r'); }

}  // namespace

SpecialTokenMatcher::SpecialTokenMatcher(std::vector<Entry> entries) : entries_(std::move(entries)) {
  root_.fill(-1);
  for (size_t e = 0; e < entries_.size(); ++e) {
    const std::string_view text = entries_[e].text;
    int32_t node = -1;
    for (size_t i = 0; i < text.size(); ++i) {
      const uint8_t b = static_cast<uint8_t>(text[i]);
      int32_t next = i == 0 ? root_[b] : child(node, b);
      if (next < 0) {
        next = static_cast<int32_t>(nodes_.size());
        Node fresh;
        fresh.byte = b;
        if (i == 0) {
          root_[b] = next;
        } else {
          fresh.next_sibling = nodes_[node].first_child;
          nodes_[node].first_child = next;
        }
        nodes_.push_back(fresh);
      }
      node = next;
    }
    // Texts are unique in a vocabulary, so each end node has one entry.
    if (node >= 0 && nodes_[node].entry < 0) nodes_[node].entry = static_cast<int32_t>(e);
  }
  link_suffixes();
}

void SpecialTokenMatcher::link_suffixes() {
  suffix_.assign(nodes_.size(), -1);
  ending_.assign(nodes_.size(), -1);
  // Breadth first: a node's suffix is shallower, so it is linked before it.
  std::vector<int32_t> order;
  order.reserve(nodes_.size());
  for (int32_t first : root_) {
    if (first < 0) continue;
    ending_[first] = nodes_[first].entry >= 0 ? first : -1;
    order.push_back(first);
  }
  for (size_t at = 0; at < order.size(); ++at) {
    const int32_t node = order[at];
    for (int32_t c = nodes_[node].first_child; c >= 0; c = nodes_[c].next_sibling) {
      const int32_t suffix = step(suffix_[node], nodes_[c].byte);
      suffix_[c] = suffix;
      ending_[c] = nodes_[c].entry >= 0 ? c : (suffix >= 0 ? ending_[suffix] : -1);
      order.push_back(c);
    }
  }
}

int32_t SpecialTokenMatcher::step(int32_t node, uint8_t byte) const {
  for (; node >= 0; node = suffix_[node]) {
    const int32_t next = child(node, byte);
    if (next >= 0) return next;
  }
  return root_[byte];
}

int32_t SpecialTokenMatcher::child(int32_t node, uint8_t byte) const {
  for (int32_t c = nodes_[node].first_child; c >= 0; c = nodes_[c].next_sibling) {
    if (nodes_[c].byte == byte) return c;
  }
  return -1;
}

void SpecialTokenMatcher::partition(std::string_view text, std::vector<TextFragment>& out,
                                    EncodeControl& control) const {
  out.clear();
  if (text.empty()) return;
  out.push_back(TextFragment{-1, 0, text.size()});
  if (entries_.empty()) return;

  // One pass over the text finds which special tokens occur at all; only
  // those need the (token by token) splitting below. A token seen once is
  // not followed again, nor the shorter ones its chain leads to, which
  // were all marked with it.
  std::vector<uint8_t> present(entries_.size(), 0);
  size_t n_present = 0;
  int32_t node = -1;
  for (size_t i = 0; i < text.size(); ++i) {
    const uint8_t byte = static_cast<uint8_t>(text[i]);
    node = node < 0 ? root_[byte] : step(node, byte);  // at the root: most bytes of most texts
    if (node < 0) continue;
    for (int32_t e = ending_[node]; e >= 0 && !present[nodes_[e].entry];
         e = suffix_[e] >= 0 ? ending_[suffix_[e]] : -1) {
      present[nodes_[e].entry] = 1;
      ++n_present;
    }
  }
  control.work(text.size());
  if (n_present == 0) return;

  std::vector<TextFragment> next;
  for (size_t e = 0; e < entries_.size(); ++e) {
    if (!present[e]) continue;
    const Entry& entry = entries_[e];
    next.clear();
    for (const TextFragment& frag : out) {
      if (frag.token >= 0) {
        next.push_back(frag);
        continue;
      }
      size_t base = frag.offset;
      size_t length = frag.length;
      control.work(length);
      while (length > 0) {
        const size_t match = text.substr(0, base + length).find(entry.text, base);
        if (match == std::string_view::npos) {
          next.push_back(TextFragment{-1, base, length});
          break;
        }
        size_t left_length = match - base;
        if (entry.lstrip) {
          while (left_length > 0 && is_c_space(text[base + left_length - 1])) --left_length;
        }
        if (left_length > 0) next.push_back(TextFragment{-1, base, left_length});
        next.push_back(TextFragment{entry.id, 0, 0});
        size_t right = match + entry.text.size();
        size_t right_length = base + length - right;
        if (entry.rstrip) {
          while (right_length > 0 && is_c_space(text[right])) {
            ++right;
            --right_length;
          }
        }
        base = right;
        length = right_length;
      }
    }
    out.swap(next);
  }
}

}  // namespace muser
