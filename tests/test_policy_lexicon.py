"""The memory guards read one lexicon (:mod:`actors.policy.lexicon`), and every rule
works in every language of it: English, French, German, Spanish, Italian, Portuguese
and Russian. The lexicon's rules of some languages (``PARTIAL``) are checked for their
shape only; no policy module keeps a word list of its own (:func:`test_no_word_list_in_code`).

Each test takes one rule and, per language, a sentence the rule must catch and a near
miss it must not, and checks them through the guards' public functions (the write
guard, forget intent, the stance judge, the grounding filter, the skip reason, the
reflection plan), not through the word lists themselves.
"""

from __future__ import annotations

import ast
import pathlib
import re

import pytest

from actors.policy import forget, lexicon, stance, standing, write_guard
from actors.policy.candidates import ParsedFact
from actors.policy.grounding import filter_ungrounded, is_trivial_window
from actors.policy.skip import skip_reason
from actors.reflection.parser import ParsedReflection
from actors.reflection.plan import plan_reflection

LANGS = lexicon.LANGUAGES
_ACTORS = pathlib.Path(lexicon.__file__).parents[1]


def _by_lang(table: dict[str, tuple]) -> list:
    assert set(table) == set(LANGS), f"cases must cover {LANGS}"
    return [pytest.param(*table[lang], id=lang) for lang in LANGS]


def _judge(key: str | None, text: str, message: str) -> str | None:
    return stance.judge(key, text, stance.clauses(message), message)


def _plan(message: str, *facts: tuple[str, str]) -> dict[str, str]:
    parsed = ParsedReflection(kind="entries",
                              facts=[ParsedFact(key=k, value=v) for k, v in facts])
    plan = plan_reflection(parsed, message, {}, max_facts=8, max_notes=8)
    return {f.key: f.value for f in plan.facts}


# --- the lexicon itself --------------------------------------------------------------


def test_every_rule_covers_every_language() -> None:
    assert LANGS == ("en", "fr", "de", "es", "it", "pt", "ru")
    for rule, table in lexicon.RULES.items():
        assert tuple(table) == LANGS or set(table) == set(LANGS), rule
        for lang in LANGS:
            assert table[lang], f"rule {rule!r} has no entry for {lang!r}"
            assert all(e == e.strip() and e for e in table[lang]), (rule, lang)


def test_partial_rules_name_some_languages() -> None:
    """A rule of some languages has entries for some of the lexicon's languages, not all
    (it would be a rule of :data:`RULES`), and no name of a rule of every language."""
    assert not set(lexicon.PARTIAL) & set(lexicon.RULES)
    for rule, table in lexicon.PARTIAL.items():
        assert table and set(table) < set(LANGS), rule
        for lang, words in table.items():
            assert words and all(e == e.strip() and e for e in words), (rule, lang)


def test_value_tables_give_one_value_per_word() -> None:
    for table in (lexicon.LANGUAGE_NAMES, lexicon.NUMBER_WORDS):
        for value, names in table.items():
            for lang, words in names.items():
                assert words and all(w == w.strip().lower() for w in words), (value, lang)
        by_word: dict[str, set[str]] = {}
        for value, names in table.items():
            for words in names.values():
                for w in words:
                    by_word.setdefault(w, set()).add(value)
        assert all(len(v) == 1 for v in by_word.values()), by_word
        assert lexicon.meanings(table) == {w: v.pop() for w, v in by_word.items()}


def test_every_rule_is_documented_and_read() -> None:
    doc = lexicon.__doc__ or ""
    sources = "\n".join(p.read_text(encoding="utf-8") for p in _ACTORS.rglob("*.py")
                        if p.name != "lexicon.py")
    for rule in (*lexicon.RULES, *lexicon.PARTIAL):
        assert f"``{rule}``" in doc, f"rule {rule!r} missing from the module docstring"
        assert re.search(rf"[\"']{rule}[\"']", sources), f"rule {rule!r} is read by no guard"


def test_patterns_compile_and_bound_words() -> None:
    for rule in (*lexicon.RULES, *lexicon.PARTIAL):
        lexicon.compile_rules(rule)  # every rule compiles
    rx = lexicon.compile_rules("negation")
    assert rx.search("I do NOT eat meat") and not rx.search("a note on nothingness")
    assert rx.search("I don’t eat meat")  # typographic apostrophe
    assert lexicon.compile_rules("first_person").search("J’habite à Lyon")
    assert lexicon.compile_rules("remember").search("ЗАПОМНИ это")  # case folding, Cyrillic
    assert not lexicon.compile_rules("persist").search("nevertheless")
    # unbounded, an entry also matches a word's start; a rule of some languages, only those
    assert re.match(lexicon.pattern("echo_verbs", bound=False), "replying")
    assert not re.match(lexicon.pattern("echo_verbs"), "replying")
    assert lexicon.entries("echo_verbs", languages=("fr",)) == ()


# --- no word list outside the lexicon ---------------------------------------------

_WORD = r"[^\W\d_]+(?:['’-][^\W\d_]+)*"
_WORDS = re.compile(rf"{_WORD}")
_ALTERNATION = re.compile(  # two or more words as alternatives: "reply|respond", "tools?|x"
    rf"(?<![\w\\]){_WORD}(?:\\s[+*]{_WORD})*(?:\\w\*|s\?)?"
    rf"(?:\|{_WORD}(?:\\s[+*]{_WORD})*(?:\\w\*|s\?)?)+")

KEPT_IN_CODE = {
    "grounding._RU_ENDINGS": "Russian case endings, transliterated: parts of words",
    "grounding._NAME_KEY_RE": "profile keys that name the user",
    "keys.GROUPS": "profile keys",
    "keys._GENERIC": "parts of profile keys",
    "keys._KEY_STOP": "parts of profile keys",
    "keys._PLACE_WORDS": "parts of profile keys",
    "forget._KEY_GENERIC": "parts of profile keys",
    "stance.IDENTITY_KEYS": "profile keys",
    "stance._NAME_KEYS": "profile keys",
    "write_guard.Guard": "a type's values (the kinds of memory call), not words",
    # Not yet in the lexicon: whole sentence shapes of prompt injection in seven languages
    # whose spellings ("api[\s_-]*keys", "[\w-]*") the lexicon's notation cannot write.
    "instructions._RULES": "prompt-injection shapes",
    "instructions._SECRETS": "prompt-injection shapes",
    "instructions._PATTERNS": "prompt-injection shapes",
}
"""What a policy module may keep in code that looks like a word list, and why: profile
keys are identifiers, not words of a language; the prompt-injection shapes are not yet
the lexicon's."""


def _is_word(text: object) -> bool:
    return isinstance(text, str) and len(text) >= 2 and bool(_WORDS.fullmatch(text))


def _holds_words(node: ast.AST, docs: set[int]) -> bool:
    """Whether ``node`` is a word list: a set, list or tuple of three words or more, a
    dict of three words or more to words (not keyed by the lexicon's languages), a
    string of three words or more split into a list, or a regex with an alternation of
    words."""
    if isinstance(node, (ast.Set, ast.List, ast.Tuple)):
        return sum(isinstance(e, ast.Constant) and _is_word(e.value) for e in node.elts) >= 3
    if isinstance(node, ast.Dict):
        pairs = [(k.value, v.value) for k, v in zip(node.keys, node.values)
                 if isinstance(k, ast.Constant) and isinstance(v, ast.Constant)]
        return sum(_is_word(k) and _is_word(v) for k, v in pairs) >= 3 \
            and not {k for k, _ in pairs} <= set(LANGS)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
            and node.func.attr == "split" and isinstance(node.func.value, ast.Constant):
        return sum(map(_is_word, str(node.func.value.value).split())) >= 3
    if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
        return bool(_ALTERNATION.search(node.value.replace("\\b", "")))
    return False


def _word_lists(path: pathlib.Path) -> list[str]:
    """``module.NAME`` (line) of each word list in the module's code, docstrings aside."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docs = {id(n.value) for n in ast.walk(tree)
            if isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant)}
    found = []
    for stmt in tree.body:
        targets = (stmt.targets if isinstance(stmt, ast.Assign)
                   else [stmt.target] if isinstance(stmt, ast.AnnAssign) else [stmt])
        name = ", ".join(getattr(t, "id", getattr(t, "name", "?")) for t in targets)
        if name == "__all__":
            continue
        found += [f"{path.stem}.{name} (line {getattr(n, 'lineno', 0)})" for n in ast.walk(stmt)
                  if _holds_words(n, docs)]
    return found


def test_no_word_list_in_code() -> None:
    """Every word list the policy reads is the lexicon's: no module of
    :mod:`actors.policy` keeps one of its own (but :data:`KEPT_IN_CODE`)."""
    found = [hit for path in sorted((_ACTORS / "policy").glob("*.py"))
             if path.name != "lexicon.py" for hit in _word_lists(path)]
    kept = [hit for hit in found if hit.split(" (")[0] not in KEPT_IN_CODE]
    assert not kept, f"word lists outside actors/policy/lexicon.py: {kept}"
    allowed = {hit.split(" (")[0] for hit in found}
    assert allowed == set(KEPT_IN_CODE), "KEPT_IN_CODE names what is gone"


def test_the_word_list_check_sees_word_lists(tmp_path: pathlib.Path) -> None:
    module = tmp_path / "m.py"
    module.write_text('''"""Doc: reply|respond|answer."""
import re
A = frozenset({"please", "just", "now"})
B = frozenset("one two three".split())
C = re.compile(r"\\b(?:reply|respond)\\b")
D = {"short": "short", "brief": "short", "long": "detailed"}
H = {"trivial": "small talk is not kept", "question": "a question", "request": "no"}
def f(w):
    return w in ("little", "big", "older")
E = {"en": "You", "fr": "Vous", "de": "Du"}
F = ("a", "b", "c", "1", "ab_c")
G = re.compile(r"[.!?;\\n]+|,\\s+|(?<=[.!?])\\s+|\\n+")
''', encoding="utf-8")
    assert [h.split(" (")[0] for h in _word_lists(module)] == ["m.A", "m.B", "m.C", "m.D",
                                                               "m.f"]


# --- request to remember (write_guard.EXPLICIT / may_write) ---------------------------

REMEMBER = {
    "en": ("Remember that I am vegetarian", "I am vegetarian and I like tea"),
    "fr": ("Souviens-toi que je suis végétarien", "Je suis végétarien"),
    "de": ("Merk dir, dass ich Vegetarier bin", "Ich bin Vegetarier"),
    "es": ("Recuerda que soy vegetariano", "Soy vegetariano"),
    "it": ("Ricorda che sono vegetariano", "Sono vegetariano"),
    "pt": ("Lembre que eu sou vegetariano", "Eu sou vegetariano"),
    "ru": ("Запомни, что я вегетарианец", "Я вегетарианец"),
}


@pytest.mark.parametrize("asked,not_asked", _by_lang(REMEMBER))
def test_remember(asked: str, not_asked: str) -> None:
    assert write_guard.may_write(asked)
    assert not write_guard.may_write(not_asked)
    assert write_guard.refusal("note", {"content": "x"}, not_asked)


# --- forget verbs and "don't forget" ---------------------------------------------------

FORGET = {
    "en": ("Forget my phone number", "Don't forget my phone number"),
    "fr": ("Oublie mon numéro de téléphone", "N'oublie pas mon numéro de téléphone"),
    "de": ("Vergiss meine Telefonnummer", "Vergiss nicht meine Telefonnummer"),
    "es": ("Olvida mi número de teléfono", "No olvides mi número de teléfono"),
    "it": ("Dimentica il mio numero di telefono", "Non dimenticare il mio numero di telefono"),
    "pt": ("Esquece o meu número de telefone", "Não esqueça o meu número de telefone"),
    "ru": ("Забудь мой номер телефона", "Не забудь мой номер телефона"),
}


@pytest.mark.parametrize("request_,near_miss", _by_lang(FORGET))
def test_forget_and_dont_forget(request_: str, near_miss: str) -> None:
    assert forget.forget_intent(request_)
    assert forget.request_targets(request_)
    assert not forget.forget_intent(near_miss)
    assert not forget.request_targets(near_miss)
    assert skip_reason(request_) is None


DELETE = {
    "en": ("Delete my address from your memory", "Delete the draft email"),
    "fr": ("Efface mon adresse de ta mémoire", "Efface le brouillon"),
    "de": ("Lösche meine Adresse aus deinem Gedächtnis", "Lösche den Entwurf"),
    "es": ("Borra mi dirección de tu memoria", "Borra el borrador"),
    "it": ("Cancella il mio indirizzo dalla tua memoria", "Cancella la bozza"),
    "pt": ("Apaga o meu endereço da tua memória", "Apaga o rascunho"),
    "ru": ("Удали мой адрес из памяти", "Удали черновик"),
}


@pytest.mark.parametrize("request_,near_miss", _by_lang(DELETE))
def test_delete_with_a_memory_word(request_: str, near_miss: str) -> None:
    assert forget.forget_intent(request_)
    assert write_guard.may_remove(request_)
    assert not forget.forget_intent(near_miss)


STOP_REMEMBERING = {
    "en": ("Stop remembering my address", "Keep remembering my address"),
    "fr": ("Arrête de retenir mon adresse", "Continue de retenir mon adresse"),
    "de": ("Hör auf dir meine Adresse zu merken", "Merk dir meine Adresse"),
    "es": ("Deja de recordar mi dirección", "Sigue recordando mi dirección"),
    "it": ("Smetti di ricordare il mio indirizzo", "Continua a ricordare il mio indirizzo"),
    "pt": ("Pare de lembrar o meu endereço", "Continue a lembrar o meu endereço"),
    "ru": ("Перестань запоминать мой адрес", "Продолжай запоминать мой адрес"),
}


@pytest.mark.parametrize("request_,near_miss", _by_lang(STOP_REMEMBERING))
def test_stop_remembering(request_: str, near_miss: str) -> None:
    assert forget.forget_intent(request_)
    assert not forget.forget_intent(near_miss)


# --- something changed, and what was let go --------------------------------------------

CHANGE = {
    "en": ("Actually I moved to Berlin", "I live in Berlin"),
    "fr": ("En fait, j'ai déménagé à Berlin", "J'habite à Berlin"),
    "de": ("Ich wohne jetzt in Berlin", "Ich wohne in Berlin"),
    "es": ("Ahora vivo en Berlín", "Vivo en Berlín"),
    "it": ("Adesso vivo a Berlino", "Vivo a Berlino"),
    "pt": ("Agora moro em Berlim", "Moro em Berlim"),
    "ru": ("Теперь я живу в Берлине", "Я живу в Берлине"),
}


@pytest.mark.parametrize("changed,unchanged", _by_lang(CHANGE))
def test_change(changed: str, unchanged: str) -> None:
    assert forget.CHANGE.search(changed)
    assert not forget.CHANGE.search(unchanged)
    # A change alone offers no removal tool (reflection supersedes the fact); one that
    # lets go of a value the profile shows does.
    assert not write_guard.may_remove(changed)
    assert not write_guard.may_remove(unchanged)


LET_GO = {
    "en": ("I sold the Civic last week", "I washed the Civic last week"),
    "fr": ("J'ai vendu la Civic", "J'ai lavé la Civic"),
    "de": ("Letztes Jahr verkaufte ich den Civic", "Letztes Jahr wusch ich den Civic"),
    "es": ("Vendí el Civic", "Lavé el Civic"),
    "it": ("Ho venduto la Civic", "Ho lavato la Civic"),
    "pt": ("Vendi o Civic", "Lavei o Civic"),
    "ru": ("Я продал Civic", "Я помыл Civic"),
}


@pytest.mark.parametrize("let_go,kept", _by_lang(LET_GO))
def test_let_go(let_go: str, kept: str) -> None:
    known = {"car": "Honda Civic"}
    assert forget.dropped_values(let_go, known) == ["car"]
    assert forget.dropped_values(kept, known) == []
    assert write_guard.may_remove(let_go, known)
    assert write_guard.removal_refusal(let_go, key="car", value="Honda Civic") is None
    assert write_guard.removal_refusal(kept, key="car", value="Honda Civic") is not None


# --- negation and negative stance ---------------------------------------------------------

NEGATION = {
    "en": ("I don't drink coffee", "I drink coffee", "coffee"),
    "fr": ("Je ne bois pas de café", "Je bois du café", "café"),
    "de": ("Ich trinke keinen Kaffee", "Ich trinke Kaffee", "Kaffee"),
    "es": ("No bebo café", "Bebo café", "café"),
    "it": ("Non bevo caffè", "Bevo caffè", "caffè"),
    "pt": ("Não bebo café", "Bebo café", "café"),
    "ru": ("Я не пью кофе", "Я пью кофе", "кофе"),
}


@pytest.mark.parametrize("negated,stated,value", _by_lang(NEGATION))
def test_negation(negated: str, stated: str, value: str) -> None:
    assert _judge("drink", value, negated) == "negated"
    assert _judge("drink", value, stated) is None


NEGATIVE_STANCE = {
    "en": ("I hate olives", "I love olives", "olives"),
    "fr": ("Je déteste les olives", "J'adore les olives", "olives"),
    "de": ("Ich hasse Oliven", "Ich liebe Oliven", "Oliven"),
    "es": ("Odio las aceitunas", "Amo las aceitunas", "aceitunas"),
    "it": ("Odio le olive", "Amo le olive", "olive"),
    "pt": ("Odeio azeitonas", "Amo azeitonas", "azeitonas"),
    "ru": ("Я ненавижу оливки", "Я люблю оливки", "оливки"),
}


@pytest.mark.parametrize("negative,positive,value", _by_lang(NEGATIVE_STANCE))
def test_negative_stance(negative: str, positive: str, value: str) -> None:
    assert _judge("food", value, negative) == "negated"
    assert _judge("food", value, positive) is None


NEGATORS = {
    "en": ("Don't always answer in Italian", "Always answer in Italian"),
    "fr": ("Ne réponds pas toujours en italien", "Réponds toujours en italien"),
    "de": ("Antworte nicht immer auf Italienisch", "Antworte immer auf Italienisch"),
    "es": ("No contestes siempre en italiano", "Contesta siempre en italiano"),
    "it": ("Non rispondere sempre in italiano", "Rispondi sempre in italiano"),
    "pt": ("Não responda sempre em italiano", "Responda sempre em italiano"),
    "ru": ("Не отвечай всегда на итальянском", "Всегда отвечай на итальянском"),
}


@pytest.mark.parametrize("negated,standing_", _by_lang(NEGATORS))
def test_standing_preference_and_its_negation(negated: str, standing_: str) -> None:
    assert [k for k, _ in standing.standing_preferences(standing_)] == ["reply_language"]
    assert standing.standing_preferences(negated) == []


ONE_OFF = {
    "en": "Answer in Italian",
    "fr": "Réponds en italien",
    "de": "Antworte auf Italienisch",
    "es": "Contesta en italiano",
    "it": "Rispondi in italiano",
    "pt": "Responda em italiano",
    "ru": "Отвечай на итальянском",
}


@pytest.mark.parametrize("lang", LANGS)
def test_standing_marker(lang: str) -> None:
    """Without a standing marker a reply language is a one-off instruction."""
    assert standing.standing_preferences(ONE_OFF[lang]) == []
    assert standing.standing_preferences(NEGATORS[lang][1]) != []


# --- hypotheticals, wishes, daydreams, intents ---------------------------------------------

HYPOTHETICAL = {
    "en": ("If I moved to Lisbon I would surf", "I moved to Lisbon", "Lisbon"),
    "fr": ("Si je déménageais à Lisbonne", "J'ai déménagé à Lisbonne", "Lisbonne"),
    "de": ("Vielleicht ziehe ich nach Lissabon", "Ich ziehe nach Lissabon", "Lissabon"),
    "es": ("Tal vez viva en Lisboa", "Vivo en Lisboa", "Lisboa"),
    "it": ("Forse vivrò a Lisbona", "Vivo a Lisbona", "Lisbona"),
    "pt": ("Talvez eu more em Lisboa", "Eu moro em Lisboa", "Lisboa"),
    "ru": ("Я бы переехал в Лиссабон", "Я переехал в Лиссабон", "Лиссабон"),
}


@pytest.mark.parametrize("hypo,real,city", _by_lang(HYPOTHETICAL))
def test_hypothetical(hypo: str, real: str, city: str) -> None:
    assert _judge("city", city, hypo) == "hypothetical"
    assert _judge("city", city, real) is None


WISH = {
    "en": ("I would like green tea", "I would drink green tea"),
    "fr": ("J'aimerais du thé vert", "Si je buvais du thé vert"),
    "de": ("Ich würde gerne grünen Tee trinken", "Ich würde grünen Tee trinken"),
    "es": ("Me gustaría té verde", "Quizás té verde"),
    "it": ("Vorrei del tè verde", "Forse del tè verde"),
    "pt": ("Gostaria de chá verde", "Talvez chá verde"),
    "ru": ("Я бы хотел зелёный чай", "Я бы пил зелёный чай"),
}


@pytest.mark.parametrize("wish,conditional", _by_lang(WISH))
def test_a_wish_is_no_hypothetical(wish: str, conditional: str) -> None:
    value = re.findall(r"\w+", wish)[-1]  # the tea
    assert _judge("drink", value, wish) is None
    assert _judge("drink", value, conditional) == "hypothetical"


HYPOTHETICAL_OPEN = {
    "en": ("Imagine I lived in Lisbon, I surf every day", "I live in Lisbon, I surf every day",
           "surf"),
    "fr": ("Imagine que je vis à Lisbonne, je fais du surf tous les jours",
           "Je vis à Lisbonne, je fais du surf tous les jours", "surf"),
    "de": ("Stell dir vor, ich wohne in Lissabon, ich surfe jeden Tag",
           "Ich wohne in Lissabon, ich surfe jeden Tag", "surfe"),
    "es": ("Imagina que vivo en Lisboa, hago surf cada día",
           "Vivo en Lisboa, hago surf cada día", "surf"),
    "it": ("Immagina che vivo a Lisbona, faccio surf ogni giorno",
           "Vivo a Lisbona, faccio surf ogni giorno", "surf"),
    "pt": ("Imagine que moro em Lisboa, faço surf todos os dias",
           "Moro em Lisboa, faço surf todos os dias", "surf"),
    "ru": ("Представь, я живу в Лиссабоне, я занимаюсь серфингом",
           "Я живу в Лиссабоне, я занимаюсь серфингом", "серфингом"),
}


@pytest.mark.parametrize("hypo,real,value", _by_lang(HYPOTHETICAL_OPEN))
def test_a_sentence_opened_as_a_hypothetical(hypo: str, real: str, value: str) -> None:
    assert _judge("hobby", value, hypo) == "hypothetical"
    assert _judge("hobby", value, real) is None


DAYDREAM = {
    "en": ("In theory I surf every day", "I surf every day", "surf"),
    "fr": ("En théorie je fais du surf tous les jours", "Je fais du surf tous les jours",
           "surf"),
    "de": ("Theoretisch surfe ich jeden Tag", "Ich surfe jeden Tag", "surfe"),
    "es": ("En teoría hago surf cada día", "Hago surf cada día", "surf"),
    "it": ("In teoria faccio surf ogni giorno", "Faccio surf ogni giorno", "surf"),
    "pt": ("Em teoria faço surf todos os dias", "Faço surf todos os dias", "surf"),
    "ru": ("Теоретически я занимаюсь серфингом", "Я занимаюсь серфингом", "серфингом"),
}


@pytest.mark.parametrize("dream,real,value", _by_lang(DAYDREAM))
def test_daydream(dream: str, real: str, value: str) -> None:
    assert _judge("hobby", value, dream) == "hypothetical"
    assert _judge("hobby", value, real) is None


INTENT = {
    "en": ("Maybe I will move to Lisbon", "The user plans to move to Lisbon",
           "The user moves to Lisbon"),
    "fr": ("Peut-être que je vivrai à Lisbonne", "Espère vivre à Lisbonne", "Vit à Lisbonne"),
    "de": ("Vielleicht lebe ich in Lissabon", "Hofft, in Lissabon zu leben",
           "Lebt in Lissabon"),
    "es": ("Tal vez viva en Lisboa", "Espera vivir en Lisboa", "Vive en Lisboa"),
    "it": ("Forse vivrò a Lisbona", "Spera di vivere a Lisbona", "Vive a Lisbona"),
    "pt": ("Talvez eu more em Lisboa", "Espera morar em Lisboa", "Mora em Lisboa"),
    "ru": ("Может быть я перееду в Лиссабон", "Планирует переехать в Лиссабон",
           "Переедет в Лиссабон"),
}


@pytest.mark.parametrize("message,intent,plain", _by_lang(INTENT))
def test_an_item_stating_an_intent_keeps_the_stance(message: str, intent: str,
                                                    plain: str) -> None:
    assert _judge(None, intent, message) is None
    assert _judge(None, plain, message) == "hypothetical"


# --- who speaks: first person, third person, possessives and relations --------------------

PERSON = {
    "en": ("He lives in Lisbon", "I live in Lisbon", "Lisbon"),
    "fr": ("Il habite à Lisbonne", "J'habite à Lisbonne", "Lisbonne"),
    "de": ("Er wohnt in Lissabon", "Ich wohne in Lissabon", "Lissabon"),
    "es": ("Él vive en Lisboa", "Yo vivo en Lisboa", "Lisboa"),
    "it": ("Lui vive a Lisbona", "Io vivo a Lisbona", "Lisbona"),
    "pt": ("Ele mora em Lisboa", "Eu moro em Lisboa", "Lisboa"),
    "ru": ("Он живёт в Лиссабоне", "Я живу в Лиссабоне", "Лиссабоне"),
}


@pytest.mark.parametrize("other,user,city", _by_lang(PERSON))
def test_third_person_against_first_person(other: str, user: str, city: str) -> None:
    assert _judge("city", city, other) == "third_person"
    assert _judge("city", city, user) is None


POSSESSIVE = {
    "en": ("My brother lives in Lisbon", "My flat is in Lisbon", "Lisbon"),
    "fr": ("Mon frère habite à Lisbonne", "Mon appartement est à Lisbonne", "Lisbonne"),
    "de": ("Mein Bruder wohnt in Lissabon", "Meine Wohnung ist in Lissabon", "Lissabon"),
    "es": ("Mi hermano vive en Lisboa", "Mi piso está en Lisboa", "Lisboa"),
    "it": ("Mio fratello vive a Lisbona", "Il mio appartamento è a Lisbona", "Lisbona"),
    "pt": ("O meu irmão mora em Lisboa", "O meu apartamento fica em Lisboa", "Lisboa"),
    "ru": ("Мой брат живёт в Лиссабоне", "Моя квартира в Лиссабоне", "Лиссабоне"),
}


@pytest.mark.parametrize("relative,own,city", _by_lang(POSSESSIVE))
def test_possessive_with_a_relation(relative: str, own: str, city: str) -> None:
    assert _judge("city", city, relative) == "third_person"
    assert _judge("city", city, own) is None


CONJUNCTION = {
    "en": "I live in Oslo and my brother lives in Rome",
    "fr": "J'habite à Oslo et mon frère habite à Rome",
    "de": "Ich wohne in Oslo und mein Bruder wohnt in Rom",
    "es": "Vivo en Oslo y mi hermano vive en Roma",
    "it": "Vivo a Oslo e mio fratello vive a Roma",
    "pt": "Moro em Oslo e o meu irmão mora em Roma",
    "ru": "Я живу в Осло и мой брат живёт в Риме",
}


@pytest.mark.parametrize("lang", LANGS)
def test_conjunction_starts_a_clause(lang: str) -> None:
    message = CONJUNCTION[lang]
    other = re.findall(r"\w+", message)[-1]
    assert _judge("city", "Oslo", message) is None
    assert _judge("city", other, message) == "third_person"


ABOUT_USER = {
    "en": ("I like rainy days", "Rainy days are nice"),
    "fr": ("J'aime les jours de pluie", "Les jours de pluie sont beaux"),
    "de": ("Ich mag Regentage", "Regentage sind schön"),
    "es": ("Me gustan los días de lluvia", "Los días de lluvia son bonitos"),
    "it": ("Mi piacciono i giorni di pioggia", "La pioggia è bella"),
    "pt": ("Eu gosto de dias de chuva", "Dias de chuva são bonitos"),
    "ru": ("Я люблю дождливые дни", "Дождливые дни красивы"),
}


@pytest.mark.parametrize("personal,impersonal", _by_lang(ABOUT_USER))
def test_first_person_makes_a_message_about_the_user(personal: str, impersonal: str) -> None:
    assert skip_reason(personal) is None
    assert skip_reason(impersonal) == "impersonal"


OBJECT = {
    "en": ("The dog bit me", "The dog bit the postman"),
    "fr": ("Le chien m'a mordu", "Le chien a mordu le facteur"),
    "de": ("Der Hund hat mich gebissen", "Der Hund hat den Postboten gebissen"),
    "es": ("El perro me mordió", "El perro mordió al cartero"),
    "it": ("Il cane mi ha morso", "Il cane ha morso il postino"),
    "pt": ("O cão mordeu-me", "O cão mordeu o carteiro"),
    "ru": ("Собака укусила меня", "Собака укусила почтальона"),
}


@pytest.mark.parametrize("personal,impersonal", _by_lang(OBJECT))
def test_first_person_object(personal: str, impersonal: str) -> None:
    assert stance.about_user(personal)
    assert not stance.about_user(impersonal)


PRO_DROP = {
    "en": ("I am a nurse in Oslo", "A nurse in Oslo"),
    "fr": ("Suis infirmière à Oslo, moi", "Une infirmière à Oslo"),
    "de": ("Bin Krankenpfleger in Oslo", "Ein Krankenpfleger in Oslo"),
    "es": ("Soy enfermera en Oslo", "Una enfermera en Oslo"),
    "it": ("Sono infermiera a Oslo", "Un'infermiera a Oslo"),
    "pt": ("Sou enfermeira em Oslo", "Uma enfermeira em Oslo"),
    "ru": ("Работаю медсестрой в Осло", "Медсестра в Осло"),
}


@pytest.mark.parametrize("personal,impersonal", _by_lang(PRO_DROP))
def test_a_first_person_verb_without_its_pronoun(personal: str, impersonal: str) -> None:
    assert stance.about_user(personal)
    assert not stance.about_user(impersonal)


THIRD_PERSON_VERBS = {
    "en": ("Tomas lives in Prague", "Tomas, in Prague"),
    "fr": ("Tomas habite à Prague", "Tomas, à Prague"),
    "de": ("Tomas wohnt in Prag", "Tomas, in Prag"),
    "es": ("Tomas vive en Praga", "Tomas, en Praga"),
    "it": ("Tomas vive a Praga", "Tomas, a Praga"),
    "pt": ("Tomas mora em Praga", "Tomas, em Praga"),
    "ru": ("Томас живёт в Праге", "Томас, в Праге"),
}


@pytest.mark.parametrize("named,plain", _by_lang(THIRD_PERSON_VERBS))
def test_a_name_and_a_verb_make_the_subject(named: str, plain: str) -> None:
    assert stance.clauses(named)[0].subject == "other"
    assert stance.clauses(plain)[0].subject is None


# --- names: the user naming themself, and someone else's name -----------------------------

SELF_NAMING = {
    "en": ("My name is Camille and I live in Lyon", "I met Camille and I live in Lyon",
           "Lyon"),
    "fr": ("Je m'appelle Camille et j'habite à Lyon", "J'ai rencontré Camille et j'habite à Lyon",
           "Lyon"),
    "de": ("Ich heiße Camille und wohne in Lyon", "Ich habe Camille getroffen und wohne in Lyon",
           "Lyon"),
    "es": ("Me llamo Camille y vivo en Lyon", "Conocí a Camille y vivo en Lyon", "Lyon"),
    "it": ("Mi chiamo Camille e vivo a Lyon", "Ho conosciuto Camille e vivo a Lyon", "Lyon"),
    "pt": ("Meu nome é Camille e moro em Lyon", "Conheci a Camille e moro em Lyon", "Lyon"),
    "ru": ("Меня зовут Камилла, я живу в Москве", "Мы встретили Камиллу, я живу в Москве",
           "Москва"),
}


@pytest.mark.parametrize("named,met,city", _by_lang(SELF_NAMING))
def test_self_naming(named: str, met: str, city: str) -> None:
    name = "Камилла" if city == "Москва" else "Camille"
    assert _plan(named, ("name", name), ("city", city)) == {"name": name, "city": city}
    kept = _plan(met, ("name", name), ("city", city))
    assert "name" not in kept and kept["city"] == city


def test_french_self_introduction_keeps_name_and_city() -> None:
    message = "Je m'appelle Camille et j'habite à Lyon"
    assert skip_reason(message) is None
    assert _plan(message, ("name", "Camille"), ("city", "Lyon")) == {
        "name": "Camille", "city": "Lyon"}


SELF_INTRO = {
    "en": ("I'm Camille, I live in Lyon", "Camille and I live in Lyon"),
    "fr": ("Je suis Camille, j'habite à Lyon", "Camille et moi habitons à Lyon"),
    "de": ("Ich bin Camille und wohne in Lyon", "Camille und ich wohnen in Lyon"),
    "es": ("Soy Camille y vivo en Lyon", "Camille y yo vivimos en Lyon"),
    "it": ("Sono Camille e vivo a Lyon", "Camille e io viviamo a Lyon"),
    "pt": ("Sou Camille e moro em Lyon", "Camille e eu moramos em Lyon"),
    "ru": ("Я Камилла, живу в Лионе", "Камилла и я живём в Лионе"),
}


@pytest.mark.parametrize("intro,with_", _by_lang(SELF_INTRO))
def test_self_introduction(intro: str, with_: str) -> None:
    name = "Камилла" if "Лион" in intro else "Camille"
    fact = [ParsedFact(key="name", value=name)]
    assert filter_ungrounded(fact, [], intro).facts == fact
    assert [d.reason for d in filter_ungrounded(fact, [], with_).dropped] == [
        "ungrounded_identity"]


NAMING_LEAD = {
    "en": ("We have a dog named Biscuit", "My name is Biscuit"),
    "fr": ("Nous avons un chien qui s'appelle Biscuit", "Je m'appelle Biscuit"),
    "de": ("Wir haben einen Hund namens Biscuit", "Ich heiße Biscuit"),
    "es": ("Tenemos un perro que se llama Biscuit", "Me llamo Biscuit"),
    "it": ("Abbiamo un cane che si chiama Biscuit", "Mi chiamo Biscuit"),
    "pt": ("Temos um cão que se chama Biscuit", "Me chamo Biscuit"),
    "ru": ("У нас есть собака по кличке Biscuit", "Меня зовут Biscuit"),
}


@pytest.mark.parametrize("other,own", _by_lang(NAMING_LEAD))
def test_someone_elses_name(other: str, own: str) -> None:
    assert _judge("name", "Biscuit", other) == "third_person"
    assert _judge("name", "Biscuit", own) is None


NAMING_PHRASE = {
    "en": "The user's sister is called Zoe",
    "fr": "La sœur de l'utilisateur s'appelle Zoe",
    "de": "Die Schwester des Nutzers heißt Zoe",
    "es": "La hermana del usuario se llama Zoe",
    "it": "La sorella dell'utente si chiama Zoe",
    "pt": "A irmã do usuário se chama Zoe",
    "ru": "Сестру пользователя зовут Zoe",
}


@pytest.mark.parametrize("lang", LANGS)
def test_a_stored_item_naming_someone(lang: str) -> None:
    """A name after a naming phrase in an item must be one the user wrote."""
    note = NAMING_PHRASE[lang]
    from actors.policy.candidates import ParsedNote
    kept = filter_ungrounded([], [ParsedNote(body=note)], f"{note}.")
    assert kept.notes and not kept.dropped
    dropped = filter_ungrounded([], [ParsedNote(body=note)], note.replace("Zoe", "Mia"))
    assert [d.reason for d in dropped.dropped] == ["ungrounded_identity"]


USER_NAMING = {
    "en": "The user's name is Camille",
    "fr": "Le nom de l'utilisateur est Camille",
    "de": "Der Nutzer heißt Camille",
    "es": "El usuario se llama Camille",
    "it": "L'utente si chiama Camille",
    "pt": "O usuário se chama Camille",
    "ru": "Имя пользователя Camille",
}


@pytest.mark.parametrize("lang", LANGS)
def test_a_stored_item_naming_the_user(lang: str) -> None:
    from actors.policy.candidates import ParsedNote
    note = [ParsedNote(body=USER_NAMING[lang])]
    # German capitalises every noun: the user's words hold "Nutzer" so that the note
    # invents nothing but the name.
    lead = "Als Nutzer: " if lang == "de" else ""
    intro = lead + SELF_NAMING[lang][0].replace("Камилла", "Camille")
    assert filter_ungrounded([], note, intro).notes == note
    met = lead + SELF_NAMING[lang][1].replace("Камиллу", "Camille")
    assert [d.reason for d in filter_ungrounded([], note, met).dropped] == [
        "ungrounded_identity"]


# --- small talk, persistence markers, requests, questions, commitments --------------------

PROBE = {
    "en": ("Hi, thanks!", "Hi, I'm vegan"),
    "fr": ("Salut, merci !", "Salut, je suis végane"),
    "de": ("Hallo, danke!", "Hallo, ich bin Veganer"),
    "es": ("Hola, gracias", "Hola, soy vegana"),
    "it": ("Ciao, grazie!", "Ciao, sono vegana"),
    "pt": ("Olá, obrigado!", "Olá, sou vegana"),
    "ru": ("Привет, спасибо!", "Привет, я веганка"),
}


@pytest.mark.parametrize("small_talk,stated", _by_lang(PROBE))
def test_greetings_are_trivial(small_talk: str, stated: str) -> None:
    assert skip_reason(small_talk) == "trivial"
    assert skip_reason(stated) is None


GREETING_WORDS = {
    "en": "Good morning! Where is the station?",
    "fr": "Bonjour ! Où est la gare ?",
    "de": "Guten Morgen! Wo ist der Bahnhof?",
    "es": "Buenos días. ¿Dónde está la estación?",
    "it": "Buongiorno! Dov'è la stazione?",
    "pt": "Bom dia! Onde fica a estação?",
    "ru": "Привет! Где вокзал?",
}


@pytest.mark.parametrize("lang", LANGS)
def test_a_greeting_beside_a_question(lang: str) -> None:
    message = GREETING_WORDS[lang]
    assert stance.is_question_only(message)
    question = message.split("!")[-1].split(". ")[-1]
    assert not stance.is_question_only(f"{WONDERING[lang][1].split(',')[0]}. {question}")


PERSIST = {
    "en": ("From now on, the reports go to Oslo", "The reports go to Oslo"),
    "fr": ("Désormais, les rapports vont à Oslo", "Les rapports vont à Oslo"),
    "de": ("Ab jetzt gehen die Berichte nach Oslo", "Die Berichte gehen nach Oslo"),
    "es": ("De ahora en adelante, los informes van a Oslo", "Los informes van a Oslo"),
    "it": ("Da ora in poi le relazioni vanno a Oslo", "Le relazioni vanno a Oslo"),
    "pt": ("A partir de agora, os relatórios vão para Oslo", "Os relatórios vão para Oslo"),
    "ru": ("Отныне отчёты идут в Осло", "Отчёты идут в Осло"),
}


@pytest.mark.parametrize("kept,plain", _by_lang(PERSIST))
def test_persistence_marker(kept: str, plain: str) -> None:
    assert skip_reason(kept) is None and not is_trivial_window(kept)
    assert skip_reason(plain) == "impersonal"


REQUEST = {
    "en": ("Please tell me a joke", "Please tell me a joke about my cat"),
    "fr": ("Raconte-moi une blague", "Raconte-moi une blague sur mon chat"),
    "de": ("Bitte erzähl mir einen Witz", "Bitte erzähl mir einen Witz über meine Katze"),
    "es": ("Por favor cuéntame un chiste", "Por favor cuéntame un chiste sobre mi gato"),
    "it": ("Per favore raccontami una barzelletta",
           "Per favore raccontami una barzelletta sul mio gatto"),
    "pt": ("Por favor conte-me uma piada", "Por favor conte-me uma piada sobre o meu gato"),
    "ru": ("Пожалуйста расскажи анекдот", "Пожалуйста расскажи анекдот про моего кота"),
}


@pytest.mark.parametrize("request_,personal", _by_lang(REQUEST))
def test_a_request_to_the_assistant(request_: str, personal: str) -> None:
    assert skip_reason(request_) == "request"
    assert skip_reason(personal) is None


SELF_NAMING_REQUEST = {
    "en": "Call me Robin",
    "fr": "Appelle-moi Robin",
    "de": "Nenn mich Robin",
    "es": "Llámame Robin",
    "it": "Chiamami Robin",
    "pt": "Me chame Robin",
    "ru": "Зови меня Робин",
}


@pytest.mark.parametrize("lang", LANGS)
def test_naming_oneself_is_no_request(lang: str) -> None:
    assert not stance.is_request_only(SELF_NAMING_REQUEST[lang])
    assert stance.is_request_only(REQUEST[lang][0])


WONDERING = {
    "en": ("I wonder, where is the station?", "I live in Oslo, where is the station?"),
    "fr": ("Je me demande, où est la gare ?", "J'habite à Oslo, où est la gare ?"),
    "de": ("Ich frage mich, wo ist der Bahnhof?", "Ich wohne in Oslo, wo ist der Bahnhof?"),
    "es": ("Me pregunto, ¿dónde está la estación?", "Vivo en Oslo, ¿dónde está la estación?"),
    "it": ("Mi chiedo, dov'è la stazione?", "Vivo a Oslo, dov'è la stazione?"),
    "pt": ("Eu me pergunto, onde fica a estação?", "Eu moro em Oslo, onde fica a estação?"),
    "ru": ("Интересно, где вокзал?", "Я живу в Осло, где вокзал?"),
}


@pytest.mark.parametrize("wondering,stating", _by_lang(WONDERING))
def test_wondering_is_still_a_question(wondering: str, stating: str) -> None:
    assert skip_reason(wondering) == "question"
    assert skip_reason(stating) is None


COMPARISON = {
    "en": ("I live nine hours ahead of Berlin", "I live in Berlin", "Berlin"),
    "fr": ("J'habite à Paris plutôt que Berlin", "J'habite à Berlin", "Berlin"),
    "de": ("Ich wohne im Vergleich zu Berlin ruhig", "Ich wohne in Berlin", "Berlin"),
    "es": ("Vivo en un pueblo a diferencia de Berlín", "Vivo en Berlín", "Berlín"),
    "it": ("Vivo in campagna rispetto a Berlino", "Vivo a Berlino", "Berlino"),
    "pt": ("Moro no campo ao contrário de Berlim", "Moro em Berlim", "Berlim"),
    "ru": ("Я живу севернее, чем Берлин", "Я живу в Берлине", "Берлин"),
}


@pytest.mark.parametrize("compared,plain,city", _by_lang(COMPARISON))
def test_comparison(compared: str, plain: str, city: str) -> None:
    assert _judge("city", city, compared) == "comparison"
    assert _judge("city", city, plain) is None


COMMITMENT = {
    "en": ("The dentist appointment is on Friday", "The dentist appointment went well"),
    "fr": ("Le rendez-vous chez le dentiste est vendredi", "Le rendez-vous chez le dentiste "
           "s'est bien passé"),
    "de": ("Der Termin beim Zahnarzt ist am Freitag", "Der Termin beim Zahnarzt lief gut"),
    "es": ("La cita con el dentista es el viernes", "La cita con el dentista fue bien"),
    "it": ("L'appuntamento dal dentista è venerdì", "L'appuntamento dal dentista è andato bene"),
    "pt": ("A consulta no dentista é na sexta", "A consulta no dentista correu bem"),
    "ru": ("Встреча с врачом в пятницу", "Встреча с врачом прошла хорошо"),
}


@pytest.mark.parametrize("dated,undated", _by_lang(COMMITMENT))
def test_a_dated_commitment_is_about_the_user(dated: str, undated: str) -> None:
    assert stance.about_user(dated)
    assert not stance.about_user(undated)
