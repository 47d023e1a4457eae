"""The memory policy: may this be remembered, and what did the user ask to forget?

Pure functions over text, no I/O, shared by both writers of memory — the reflection
(:mod:`actors.reflection.plan`) and the agent's own tool calls
(:mod:`.write_guard`): a message worth no model call (:mod:`.skip`), grounding in the
user's words (:mod:`.grounding`), whose fact it is and whether it is negated or
imagined (:mod:`.stance`), keys that mean one thing (:mod:`.keys`), forget requests and
their targets (:mod:`.forget`), prompt injection (:mod:`.instructions`), standing reply
preferences (:mod:`.standing`), relations (:mod:`.relations`), over the candidates both
writers propose (:mod:`.candidates`). Every word list they read is in one module
(:mod:`.lexicon`): most for one set of languages, a few only for the languages their
guard was written in (the lexicon's ``PARTIAL`` rules); profile keys are
:mod:`.keys`'s.

The bottom of the actors floor: it imports nothing of the project's above the kernel
and services (import-linter contract in ``pyproject.toml``).
"""
