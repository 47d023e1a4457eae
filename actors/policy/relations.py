"""Words for the people, pets and roles in a user's life: one list for every module that
asks "is this about someone else?" (reflection's stance guards) or "does memory know
anything about the user's brother?" (the focus line). The words are :mod:`.lexicon`'s
rule ``relations``, in every language of the lexicon."""

from __future__ import annotations

from .lexicon import entries

__all__ = ["RELATIONS"]

RELATIONS = frozenset(entries("relations"))
"""Nouns after "my"/"our" that make a clause about someone (or something) else."""
