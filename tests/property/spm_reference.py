"""A direct, slow Python statement of llama.cpp's SentencePiece merge loop
(llm_tokenizer_spm), used as an oracle for muser's optimised C++ version.

It processes the whole text as one piece, exactly as llama.cpp does; the C++
code splits it into words and memoises, which must not change any id.
"""

from __future__ import annotations

import heapq

import gguf

SPACE = "\u2581".encode()


def utf8_length(lead: int) -> int:
    return (1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4)[lead >> 4]


class SentencePieceReference:
    def __init__(self, path: str) -> None:
        reader = gguf.GGUFReader(path)
        tokens = reader.fields["tokenizer.ggml.tokens"]
        scores = reader.fields["tokenizer.ggml.scores"]
        self.texts = [bytes(tokens.parts[i]) for i in tokens.data]
        self.scores = [float(scores.parts[i][0]) for i in scores.data]
        self.ids = {t: i for i, t in enumerate(self.texts)}

    def encode_fragment(self, text: bytes) -> list[int]:
        """Ids for one raw-text fragment (the space prefix already added)."""
        t = text.replace(b" ", SPACE)
        starts, lengths = [], []
        offset = 0
        while offset < len(t):
            n = min(utf8_length(t[offset]), len(t) - offset)
            starts.append(offset)
            lengths.append(n)
            offset += n
        count = len(starts)
        prev = list(range(-1, count - 1))
        nxt = list(range(1, count)) + [-1]
        heap: list[tuple[float, int, int, int, int]] = []

        def try_add(left: int, right: int) -> None:
            if left < 0 or right < 0:
                return
            piece = t[starts[left] : starts[left] + lengths[left] + lengths[right]]
            token = self.ids.get(piece)
            if token is not None:
                # Highest score first, then leftmost: a min-heap on (-score, left).
                heapq.heappush(heap, (-self.scores[token], left, right, len(piece), token))

        for i in range(1, count):
            try_add(i - 1, i)
        while heap:
            _, left, right, size, _ = heapq.heappop(heap)
            if lengths[left] == 0 or lengths[right] == 0 or lengths[left] + lengths[right] != size:
                continue
            lengths[left] += lengths[right]
            lengths[right] = 0
            nxt[left] = nxt[right]
            if nxt[right] >= 0:
                prev[nxt[right]] = left
            try_add(prev[left], left)
            try_add(left, nxt[left])

        out: list[int] = []
        i = 0 if count else -1
        while i != -1:
            piece = t[starts[i] : starts[i] + lengths[i]]
            if piece in self.ids:
                out.append(self.ids[piece])
            else:
                out.extend(self.ids[b"<0x%02X>" % b] for b in piece)
            i = nxt[i]
        return out
