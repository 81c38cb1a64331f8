"""GBNF grammars: parser, Earley recognizer, token masks, JSON schema conversion.

Public: `Grammar` (immutable, shareable), `GrammarState` (a recognizer position),
`GrammarConstraint` (the sampler-side object, see constraint.py for the
protocol), `TokenTrie` (per-vocabulary byte trie, cached).
"""

from muser.errors import GrammarError
from muser.grammar.constraint import GrammarConstraint
from muser.grammar.grammar import Grammar
from muser.grammar.recognizer import GrammarState
from muser.grammar.token_mask import TokenTrie

__all__ = ["Grammar", "GrammarConstraint", "GrammarError", "GrammarState", "TokenTrie"]
