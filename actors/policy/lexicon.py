"""Every word and phrase list the memory guards read, per language, in one place.

Languages (:data:`LANGUAGES`): English ``en``, French ``fr``, German ``de``, Spanish
``es``, Italian ``it``, Portuguese ``pt``, Russian ``ru``. Every rule of :data:`RULES`
has an entry for every one of them, so adding a language is one edit here: give each
rule its words, and every guard that reads the rule knows the language.

Shape: a rule is ``{language: (entry, …)}``; an entry is a word or a phrase, lower
case, read case-insensitively, in this notation:

* a space matches any run of white space (``"from now on"``);
* an apostrophe matches ``'`` and ``’`` (``"don't"``, ``"j'*"``);
* ``*`` at the start or the end matches any letters there (``"remember*"`` is
  remembering, remembered …; ``"*n't"`` is don't, isn't …);
* everything else is literal. A regex built from entries (:func:`pattern`) puts a word
  boundary on each side that starts or ends with a letter, so ``"no"`` never matches
  inside "note" (unless built with ``bound=False``, to match a word's start); the guards
  compile them once, at import.

Rules, and where each is read:

=====================  ==========================================================
``remember``           a request to remember — ``write_guard.EXPLICIT`` (only then
                       may the agent write memory itself)
``persist``            a request to keep something, or a rule for later (always,
                       never, from now on …) — ``grounding.PERSIST``: a window is not
                       trivial, a message is about the user, is not a bare question
                       or request
``standing``           a reply preference that stands (always, by default, I prefer
                       …) — ``standing.standing_preferences``
``negators``           the particles that turn such a preference into a prohibition
                       — ``standing.standing_preferences``
``forget_verbs``       "forget" — ``forget.forget_intent`` / ``request_targets``
``delete_verbs``       "delete", with a memory word — ``forget.forget_intent``
``memory_words``       memory, profile, fact … — ``forget.forget_intent``
``stop_remembering``   "stop remembering …" — ``forget.forget_intent``
``dont_forget``        "don't forget", "I forgot": never a forget request —
                       ``forget.forget_intent``
``claims_kept``        a reply saying it remembered, noted, saved or updated something
                       — ``claims.memory_claims``
``claims_forgot``      a reply saying it forgot, removed or deleted something —
                       ``claims.memory_claims``
``forget_filler``      words of a forget request that name nothing (please, that,
                       the …) — ``forget.target_words``
``change``             something changed (actually, now, no longer, moved …) —
                       ``forget.CHANGE``: a model ``FORGET`` may retire a fact, the
                       agent may remove one (``write_guard.may_remove``)
``let_go``             "I sold / quit / no longer …" before what was let go —
                       ``forget.dropped_values``, ``forget.let_go_objects``
``let_go_loose``       words that say so only sometimes ("I left Berlin" but "I left
                       early", "I stopped by") — ``forget.dropped_values`` only, where
                       a known fact's value must follow them
``negation``           every negating word — ``stance`` (``negated``) and the
                       negated-key prefixes of ``reflection.plan``
``negative_stance``    hate, dislike, avoid … — ``stance`` (``negated``), the
                       negated-key prefixes of ``reflection.plan``
``negation_determiners``  negations that come right before what they deny (no,
                       without, kein, sans …), where "don't" or "never" comes before a
                       verb — ``stance`` (``denied``)
``replacement``        instead of, rather than … — ``stance`` (``denied``): a note
                       that says it carries the denial
``hypothetical``       if, maybe, would, someday … — ``stance`` (``hypothetical``)
``wish``               "I'd like", "me gustaría": a wish is no hypothetical, though it
                       holds a conditional — ``stance``
``hypothetical_open``  a sentence starting with one of these is a hypothetical as a
                       whole (if, imagine, suppose …) — ``stance``
``daydream``           a sentence holding one of these is (daydream, in theory …) —
                       ``stance``
``intent``             an item that states a plan or a hope carries the hypothetical
                       stance itself — ``stance.judge``
``dismissal``          the user takes the sentence back ("just a dream", "in theory",
                       "just kidding"): nothing of it is kept, not even as a plan —
                       ``stance.judge``
``first_person``       the user as the subject: I, we, je, ich … — ``stance``
                       (clause subject, ``about_user``, requests), ``grounding``
                       (trivial windows), ``reflection.plan`` (first-person notes)
``first_person_verbs``  a verb that says "I" by itself where the pronoun is left out
                       (soy, vivo, sono, moro, живу …) — the same guards
``first_person_object``  me, us, moi, mich, меня … — the same guards
``first_person_possessive``  my, our, mon, mein, мой … — the same guards; after it a
                       relation word makes the clause someone else's
``articles``           an article before a possessive ("il mio", "o meu") —
                       ``stance`` (clause subject)
``third_person``       he, she, they, il, er, он … — ``stance`` (clause subject)
``third_person_verbs`` verbs after a capitalised name that make it the clause's
                       subject ("Tomas lives …") — ``stance``
``relations``          mother, partner, dog … — ``relations.RELATIONS``
``self_naming``        the user says what they are called (my name is, call me, je
                       m'appelle, me llamo, меня зовут …) — ``grounding`` (own name),
                       ``stance`` (not someone else's), ``stance`` requests ("call me
                       Robin" asks nothing)
``self_intro``         the user introduces themself before a name (I'm, this is, je
                       suis, soy, я …) — ``grounding``, ``stance``
``user_naming``        a stored item naming the user (the user's name is …) —
                       ``grounding``
``naming_phrase``      a stored item naming anyone (name is, is called, s'appelle,
                       heißt …) — ``grounding``
``naming_lead``        the user's words right before someone else's name (named,
                       called, se llama …) — ``stance``
``probe``              greetings, pings and thanks making a whole clause — ``grounding``
                       (trivial windows)
``greeting_words``     words of a greeting clause — ``stance`` (ignored beside a
                       question or a request)
``conjunctions``       words that start a new clause — ``stance``
``comparison``         ahead of, than, rather than … — ``stance`` (``comparison``)
``commitment``         deadline, appointment … — ``stance.about_user``
``dates``              days and months — ``stance.about_user``
``correction``         "correction", "I meant", "typo", "spelled" … — ``corrections``:
                       a spelling the user corrects
``passing``            today, tonight, right now … — ``coverage``: a clause that says
                       only how things are for now is not quoted into memory
``request_verbs``      imperatives asking the assistant for something (tell, write
                       …), as the first word of a clause — ``stance.is_request_only``
``request_openers``    please, can you … before such a verb — ``stance``
``show_verbs``         show, list, tell, explain … : a request to be shown or told,
                       not for a change — ``stance.asks_to_see`` (the agent then
                       offers the read-only tools)
``wondering``          "I wonder" before a question states nothing — ``stance``
``reply_verbs``        answer, write, speak, réponds, antworte, отвечай … (any ending)
                       — ``standing`` (a reply language)
``reply_fillers``      me, with us, always, only … between such a verb and the
                       language — ``standing``
``language_prepositions``  in, en, auf, em, на before the language — ``standing``

Rules of some languages (:data:`PARTIAL`): the same shape, but only for the languages
their guard was written in (English, some also Russian, French, German, Spanish,
Italian or Portuguese); a guard reading one knows no other language yet. Translating
one into every language moves it to :data:`RULES`.

=====================  ==========================================================
``fillers``            please, just, now … leading a clause — ``grounding``
                       (trivial windows)
``confirmations``      ok, okay: a bare confirmation — ``grounding``
``echo_verbs``         reply, say, print, ответь … opening a one-off echo command
                       ("reply exactly PONG"), matched as a word's start —
                       ``grounding``
``echo_particles``     with, back after such a verb — ``grounding``
``echo_adverbs``       exactly, only, just, только … before the payload — ``grounding``
``echo_tail``          and nothing else, verbatim … after the payload — ``grounding``
``style_words``        in, as, yaml, briefly, english … : a payload holding one is a
                       style rule, not an echo ("reply only in YAML") — ``grounding``
``tool_restriction``   don't use tools, no tools, без инструментов … — ``grounding``
                       (one-off commands, ``one_off_tool_restriction``)
``format_only``        no explanations, nothing else, keep it short … as a whole
                       clause — ``grounding`` (one-off commands)
``tool_words``         tool, tools, инструмент… — ``grounding``
                       (``one_off_tool_restriction``)
``avoidance``          no, not, avoid…, without, без … — ``grounding``
                       (``one_off_tool_restriction``)
``persona_addressed``  you are my/a/an/the/your … — ``grounding``
                       (``assistant_persona``), before one of
``persona_addressed_as``  assistant, ai, agent, bot, chatbot
``persona_self``       I am a/an/the/your … — ``grounding``, before one of
``persona_self_as``    ai, assistant, language model, llm … ending the clause
``persona_phrases``    as an AI, language model, memory extractor anywhere —
                       ``grounding``
``assistant_words``    assistant, ai, bot, chatbot, model: a key's first part, or
                       (with ``assistant_subject``: the assistant …) a note's first
                       words — ``grounding``
``assistant_titles``   professor…: "assistant professor" is no assistant —
                       ``grounding``
``self_intro_after``   "Anna here, …": the user named before it — ``grounding``
``name_particles``     the, user, de, van, von, mr, dr, name …: words of a naming
                       phrase that are no name — ``grounding``
``grounding_stopwords``  the, user, prefers, favorite … : no content word of an item
                       — ``grounding`` (``ungrounded_content``, ``invented_detail``)
``language_adverb``    "по-" of "по-русски", before the adverb's letters —
                       ``standing`` (a reply language)
``unit_systems``       metric, imperial — ``standing`` (``units``)
``units_lead``         use, prefer, in … before a unit system — ``standing``
``length_verbs``       keep, make (… your answers short) — ``standing``
``reply_determiners``  your, the, all, my before the replies — ``standing``
``reply_nouns``        answers, replies, responses — ``standing``
``length_short``       short, brief, concise … — ``standing`` (``answer_length``
                       short)
``length_detailed``    detailed, long, thorough — ``standing`` (``answer_length``
                       detailed)
``length_detailed_before``  in-depth: detailed only right before the replies
                       ("in-depth answers") — ``standing``
``opens_noted``        "Noted.", "Notiert.", "C'est noté." opening a reply —
                       ``claims``
``coverage_stopwords`` words that hold no fact here (live, work, like, always …) —
                       ``coverage``
``clause_joins``       and, but between a note's clauses — ``forget.without``
``list_joins``         and, or between list members — ``forget.without``
``not_names``          sorry, fine, vegan, from …: no name after "I'm" —
                       ``introduction``
``time_words``         morning, tonight, next, at … : a time, with the rule
                       ``dates`` — ``keys.not_a_place``
``clock_suffixes``     am, pm right after a clock time (7pm) — ``keys.not_a_place``
``diets``              vegetarian, vegan, halal … — ``keys.DIETS``
``flag_values``        true, yes, 1, always …: a value saying only "this key holds" —
                       ``keys.FLAG_VALUES``
``stance_stopwords``   the, of, user, my … : no content word, no name — ``stance``
``relation_adjectives``  little, older, best …: between "my" and a relation word —
                       ``stance`` (clause subject)
``greeting_fillers``   a, lot, so, much beside greeting words ("thanks a lot") —
                       ``stance.is_greeting``
=====================  ==========================================================

Two tables give words a value, in the same shape with the value in place of the rule:
:data:`LANGUAGE_NAMES` (a language's English name → its names per language; a language
the lexicon does not cover files its own name under its own code, "nederlands" under
``nl``) — ``standing`` (a reply language and its rule); :data:`NUMBER_WORDS` (a number →
its words, English) — ``grounding`` (``invented_detail``). :func:`meanings` reads them.

Pure data and a few pure builders; imports nothing of the policy.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

__all__ = ["LANGUAGES", "LANGUAGE_NAMES", "NUMBER_WORDS", "PARTIAL", "RULES", "WordSet",
           "compile_rules", "entries", "meanings", "pattern", "word_set"]

LANGUAGES: tuple[str, ...] = ("en", "fr", "de", "es", "it", "pt", "ru")
"""The languages every rule of :data:`RULES` covers."""


def _w(text: str) -> tuple[str, ...]:
    """Entries separated by ``|`` (phrases keep their spaces)."""
    return tuple(e.strip() for e in text.replace("\n", " ").split("|") if e.strip())


def _combine(firsts: str, seconds: str) -> tuple[str, ...]:
    return tuple(f"{a} {b}" for a in _w(firsts) for b in _w(seconds))


RULES: dict[str, dict[str, tuple[str, ...]]] = {
    "remember": {
        "en": _w("""remember | memorise | memorize | keep in mind | note that | note down |
                 note this | make a note | take a note | don't forget | do not forget |
                 for future reference | from now on""")
        + _combine("save | store", "this | that | it")
        + _combine("write", "this down | that down | it down")
        + _combine("add | add this | add that | add it", "to memory | to your memory"),
        "fr": _w("""souviens-toi | souvenez-vous | retiens | retenez | rappelle-toi |
                 n'oublie pas | n'oubliez pas | mémorise | mémorisez | garde en mémoire |
                 garde ça en tête | note bien | enregistre ça"""),
        "de": _w("""merk dir | merke dir | merken sie sich | vergiss nicht |
                 nicht vergessen | speichere das | speicher das | notier dir | behalte"""),
        "es": _w("""recuerda | recuérdalo | recuerde | no olvides | no te olvides | apunta |
                 anota | memoriza | ten en cuenta | guarda esto"""),
        "it": _w("""ricorda | ricordati | ricordalo | non dimenticare | annota | memorizza |
                 tieni a mente | tieni presente | salva questo"""),
        "pt": _w("""lembre | lembra | não esqueça | não se esqueça | anote | memorize |
                 memoriza | guarde isso | tenha em mente"""),
        "ru": _w("""запомни | запомните | запиши | запишите | не забудь | не забудьте |
                 учти | имей в виду"""),
    },
    "persist": {
        "en": _w("""remember | memorize | memorise | always | never | default | from now on |
                 next time | in future | in the future | going forward | every time |
                 from here on | keep in mind | note that | don't forget | do not forget"""),
        "fr": _w("""souviens | retiens | toujours | jamais | par défaut | désormais |
                 dorénavant | à partir de maintenant | la prochaine fois | à l'avenir |
                 n'oublie pas"""),
        "de": _w("""merk dir | merke dir | immer | niemals | standardmäßig | ab jetzt |
                 von nun an | nächstes mal | künftig | in zukunft | vergiss nicht"""),
        "es": _w("""recuerda | siempre | nunca | por defecto | de ahora en adelante |
                 a partir de ahora | la próxima vez | en el futuro | no olvides"""),
        "it": _w("""ricorda | sempre | di default | da ora in poi | d'ora in poi |
                 la prossima volta | in futuro | non dimenticare"""),
        "pt": _w("""lembre | lembra | sempre | nunca | por padrão | de agora em diante |
                 a partir de agora | da próxima vez | no futuro | não esqueça"""),
        "ru": _w("""запомни | всегда | никогда | отныне | впредь | по умолчанию |
                 в следующий раз | в будущем | не забудь"""),
    },
    "standing": {
        "en": _w("""always | from now on | from here on | going forward | in future |
                 in the future | by default | every time | each time | all the time |
                 in general | generally | i prefer | i'd prefer | i would prefer |
                 i'd like you to | i would like you to | i want you to | please always |
                 remember | keep in mind"""),
        "fr": _w("""toujours | désormais | dorénavant | à partir de maintenant |
                 par défaut | je préfère"""),
        "de": _w("immer | ab jetzt | von nun an | künftig | standardmäßig | ich bevorzuge"),
        "es": _w("""siempre | de ahora en adelante | a partir de ahora | por defecto |
                 prefiero"""),
        "it": _w("sempre | d'ora in poi | da ora in poi | di default | preferisco"),
        "pt": _w("sempre | de agora em diante | a partir de agora | por padrão | prefiro"),
        "ru": _w("всегда | отныне | впредь | с этого момента | по умолчанию | я предпочитаю"),
    },
    "negators": {
        "en": _w("don't | do not | never | not | no"),
        "fr": _w("pas | non | jamais"),
        "de": _w("nicht | nie | kein | keine"),
        "es": _w("no | nunca"),
        "it": _w("non | mai"),
        "pt": _w("não | nao | nunca"),
        "ru": _w("не | никогда"),
    },
    "forget_verbs": {
        "en": _w("forget | unlearn"),
        "fr": _w("oublie | oubliez"),
        "de": _w("vergiss | vergessen"),
        "es": _w("olvida | olvídate | olvidate"),
        "it": _w("dimentica | dimenticate"),
        "pt": _w("esquece | esqueça"),
        "ru": _w("забудь | забудьте"),
    },
    "delete_verbs": {
        "en": _w("delete | remove | erase | wipe | purge | scrub | clear | drop"),
        "fr": _w("efface | effacez | supprime | supprimez"),
        "de": _w("lösche | löschen | entferne"),
        "es": _w("borra | elimina"),
        "it": _w("cancella | elimina"),
        "pt": _w("apaga | apague | remova | exclua"),
        "ru": _w("удали | удалите | сотри"),
    },
    "memory_words": {
        "en": _w("""memory | memories | memorized | remember* | profile | fact | facts | note |
                 notes | record | records"""),
        "fr": _w("mémoire"),
        "de": _w("gedächtnis | erinnerung | speicher"),
        "es": _w("memoria"),
        "it": _w("memoria"),
        "pt": _w("memória"),
        "ru": _w("памяти | память"),
    },
    "stop_remembering": {
        "en": _combine("stop | no longer | don't | do not",
                       "remembering | remember | keeping | storing | knowing"),
        "fr": _w("ne retiens plus | arrête de retenir | arrête de mémoriser"),
        "de": _w("merk dir das nicht | nicht mehr merken | hör auf dir"),
        "es": _w("deja de recordar | no recuerdes | ya no recuerdes"),
        "it": _w("smetti di ricordare | non ricordare più"),
        "pt": _w("pare de lembrar | deixe de lembrar | não lembre mais"),
        "ru": _w("не запоминай | перестань запоминать | больше не помни"),
    },
    "dont_forget": {
        "en": _combine("don't | do not | never | not | won't | didn't | dont", "forget")
        + _w("forgot | forgetting | forgettable"),
        "fr": _w("""n'oublie pas | n'oubliez pas | n'oublie jamais | sans oublier |
                 ai oublié | avais oublié"""),
        "de": _w("""vergiss nicht | nicht vergessen | vergiss nie | nie vergessen |
                 habe vergessen | hab vergessen | vergaß"""),
        "es": _w("no olvides | no te olvides | nunca olvides | olvidé | se me olvidó"),
        "it": _w("non dimenticare | non dimenticarti | ho dimenticato | dimenticavo"),
        "pt": _w("não esqueça | não se esqueça | não esqueças | nunca esqueça | esqueci"),
        "ru": _w("не забудь | не забывай | не забудьте | забыл | забыла"),
    },
    "forget_filler": {
        "en": tuple("""please pls kindly just also now then that this those these the a an
about everything anything all what which i i'm i’m i've me my mine myself you your yours
we our us it its is are was were be been am do does did have has had can could would
should will shall from of in on at to for with and or but that's said told say tell
gave give given shared share sent send mentioned mention wrote write know knowing known
one ones
like likes liked love loves loved prefer
prefers preferred enjoy enjoys use uses used fan big really very much thing things stuff
part bit info information data detail details entry entries memory memories profile fact
facts note notes record records tool tools forget delete remove erase wipe purge
scrub clear drop unlearn remembering remember keeping storing stored store saved save
again anymore any more there here fully completely entirely permanently right away
where when how who why whom whose into onto around without by up out off
under through after before since until fond keen obsessed crazy interested huge
listening listen listened watching watch playing play eating eat drinking drink""".split()),
        "fr": tuple("""s'il te plaît vous mon ma mes de la le les oublie efface supprime que
qui quoi ce""".split()),
        "de": tuple("""bitte das die der den dem mein meine meinen meinem mir mich ich du dein
deine vergiss lösche aus deinem gedächtnis dass mag magst""".split()),
        "es": tuple("por favor mi mis tu de la el olvida borra donde dónde".split()),
        "it": tuple("per favore il lo mio mia dimentica cancella dove".split()),
        "pt": tuple("meu minha esquece apaga onde".split()),
        "ru": tuple("""пожалуйста мой моя моё мое мои мне меня что это про о об забудь удали
из памяти сотри где как кто""".split()),
    },
    "change": {
        "en": _w("""actually | now | no longer | not anymore | anymore | any more | moved |
                 move | sold | switched | changed | quit | left | stopped | gave up |
                 used to | former | ex | instead | new | no more | divorced | retired |
                 replaced"""),
        "fr": _w("""maintenant | en fait | désormais | ne plus | n'ai plus | ne suis plus |
                 déménagé | vendu | changé | arrêté | au lieu de"""),
        "de": _w("""umgezogen | jetzt | nicht mehr | inzwischen | verkauft | gewechselt |
                 aufgehört | stattdessen"""),
        "es": _w("""ahora | ya no | me mudé | vendí | cambié | dejé | en realidad |
                 en vez de"""),
        "it": _w("""adesso | non più | trasferito | trasferita | venduto | cambiato | smesso |
                 invece"""),
        "pt": _w("agora | não mais | já não | mudei | vendi | troquei | parei | em vez de"),
        "ru": _w("""теперь | больше не | переехал | переехала | продал | продала | сменил |
                 сменила | уже не | вместо"""),
    },
    "let_go": {
        "en": _w("""sold | quit | ditched | gave up | gave up on | got rid of | switched from |
                 switched away from | moved from | moved away from | moved out of |
                 moved away out of | no longer | no longer * | no longer * * | don't own |
                 do not own | broke up with | divorced | retired from"""),
        "fr": _w("vendu | abandonné"),
        "de": _w("verkauft | verkaufte | gekündigt | kündigte | aufgegeben"),
        "es": _w("vendí"),
        "it": _w("venduto"),
        "pt": _w("vendi"),
        "ru": _w("продал | продала | уволился | уволилась"),
    },
    "let_go_loose": {
        "en": _w("""left | dropped | stopped | stopped *ing | don't have | don't use |
                 don't drive | do not have | do not use | do not drive | replaced |
                 lost my"""),
        "fr": _w("quitté | arrêté"),
        "de": _w("aufgehört"),
        "es": _w("dejé"),
        "it": _w("lasciato | smesso"),
        "pt": _w("deixei | larguei"),
        "ru": _w("бросил | бросила"),
    },
    "negation": {
        "en": _w("""not | no | never | none | nothing | neither | nor | without | don't |
                 doesn't | didn't | do not | does not | did not | *n't"""),
        "fr": _w("ne | pas | jamais | non | rien | sans"),
        "de": _w("nicht | kein | keine | keinen | nie | niemals | nichts | ohne"),
        "es": _w("no | nunca | nada | ni | jamás | sin"),
        "it": _w("non | mai | niente | senza"),
        "pt": _w("não | nao | nunca | nada | nem | sem"),
        "ru": _w("не | нет | никогда | ни | без"),
    },
    "negation_determiners": {
        "en": _w("no | without | none | nor | neither | nothing"),
        "fr": _w("sans | aucun | aucune"),
        "de": _w("kein | keine | keinen | keiner | keinem | ohne"),
        "es": _w("sin | ningún | ninguna"),
        "it": _w("senza | nessun | nessuna"),
        "pt": _w("sem | nenhum | nenhuma"),
        "ru": _w("без | никакой | никаких"),
    },
    "negative_stance": {
        "en": _w("""hate | hates | hated | dislike | dislikes | can't stand | cannot stand |
                 avoid | avoids"""),
        "fr": _w("déteste | évite"),
        "de": _w("hasse | vermeide"),
        "es": _w("odio | detesto | evito"),
        "it": _w("odio | detesto | evito"),
        "pt": _w("odeio | detesto | evito"),
        "ru": _w("ненавижу | терпеть не могу | избегаю"),
    },
    "hypothetical": {
        "en": _w("""if | would | 'd | might | maybe | perhaps | someday | some day | one day |
                 daydream* | wish | wishes | hypothetical | hypothetically | imagine |
                 suppose""")
        + _combine("dream | dreams | dreaming", "of | about"),
        "fr": _w("si | peut-être | un jour | imagine | supposons | rêve de"),
        "de": _w("wenn | falls | vielleicht | würde | eines tages | träume von"),
        "es": _w("si | quizás | quizas | tal vez | algún día | ojalá | sueño con"),
        "it": _w("se | forse | magari | un giorno | sogno di"),
        "pt": _w("se | talvez | um dia | quem sabe | sonho com"),
        "ru": _w("если | бы | может быть | мечтаю | когда-нибудь"),
    },
    "wish": {
        "en": _combine("would | 'd", "like* | love* | prefer*"),
        "fr": _w("j'aimerais | je voudrais | je préférerais"),
        "de": _w("würde gern | würde gerne | würde lieber | hätte gern | hätte gerne"),
        "es": _w("me gustaría | quisiera | preferiría"),
        "it": _w("vorrei | mi piacerebbe | preferirei"),
        "pt": _w("gostaria | queria | preferiria"),
        "ru": _w("я бы хотел | я бы хотела | хотелось бы | я бы предпочёл"),
    },
    "hypothetical_open": {
        "en": _w("if | imagine | suppose | hypothetically"),
        "fr": _w("si | imagine | imaginons | supposons"),
        "de": _w("wenn | falls | stell dir vor"),
        "es": _w("si | imagina | supongamos"),
        "it": _w("se | immagina | supponiamo"),
        "pt": _w("se | imagine | suponha"),
        "ru": _w("если | представь | допустим"),
    },
    "daydream": {
        "en": _w("daydream* | just a dream | hypothetical | hypothetically | in theory"),
        "fr": _w("en théorie | juste un rêve | rêverie"),
        "de": _w("theoretisch | nur ein traum | tagtraum*"),
        "es": _w("en teoría | solo un sueño"),
        "it": _w("in teoria | solo un sogno"),
        "pt": _w("em teoria | só um sonho"),
        "ru": _w("теоретически | в теории | просто мечта"),
    },
    "dismissal": {  # the user takes back what the sentence said: keep nothing of it
        "en": _w("just a daydream | only a daydream | just daydreaming | just a dream | "
                 "only a dream | hypothetically | in theory | just kidding | only joking | "
                 "just joking"),
        "fr": _w("juste un rêve | simple rêverie | en théorie | je plaisante | c'est une blague"),
        "de": _w("nur ein traum | nur ein tagtraum | theoretisch | nur spaß | war ein scherz"),
        "es": _w("solo un sueño | en teoría | es broma | solo bromeo"),
        "it": _w("solo un sogno | in teoria | scherzo | sto scherzando"),
        "pt": _w("só um sonho | apenas um sonho | em teoria | brincadeira | estou brincando"),
        "ru": _w("просто мечта | теоретически | в теории | шучу | это шутка"),
    },
    "intent": {
        "en": _w("plan | plans | planning | dream | dreams | want to | wants to | hope | hopes | "
                 "considering"),
        "fr": _w("prévoit | projette | espère | envisage | rêve"),
        "de": _w("plant | hofft | möchte | träumt"),
        "es": _w("planea | espera | quiere | sueña"),
        "it": _w("pianifica | spera | vuole | sogna"),
        "pt": _w("planeja | espera | quer | sonha"),
        "ru": _w("планирует | надеется | хочет | мечтает"),
    },
    "first_person": {
        "en": _w("""i | i'm | im | i've | i'd | i'll | we | we're | we've | we'd | we'll |
                 myself | ourselves"""),
        "fr": _w("je | j'*"),
        "de": _w("ich | wir"),
        "es": _w("yo | nosotros | nosotras"),
        "it": _w("io | noi"),
        "pt": _w("eu | nós"),
        "ru": _w("я | мы"),
    },
    "first_person_verbs": {
        "en": _w("i am | i'm"),
        "fr": _w("suis"),
        "de": _w("bin"),
        "es": _w("soy | estoy | tengo | vivo | trabajo | estudio | prefiero | quiero | necesito"),
        "it": _w("sono | sto | ho | vivo | abito | lavoro | preferisco | voglio"),
        "pt": _w("sou | estou | tenho | moro | vivo | trabalho | estudo | prefiro | quero"),
        "ru": _w("живу | работаю | учусь | люблю | предпочитаю | хочу"),
    },
    "first_person_object": {
        "en": _w("me | us"),
        "fr": _w("moi | me | m'* | nous"),
        "de": _w("mich | mir | uns"),
        "es": _w("me | mí | nos | conmigo"),
        "it": _w("mi | me"),
        "pt": _w("me | mim | nos | comigo"),
        "ru": _w("меня | мне | нас | нам | мной"),
    },
    "first_person_possessive": {
        "en": _w("my | our | mine | ours"),
        "fr": _w("mon | ma | mes | notre | nos"),
        "de": _w("""mein | meine | meinen | meinem | meiner | meines | unser | unsere |
                 unseren | unserem | unserer"""),
        "es": _w("mi | mis | nuestro | nuestra | nuestros | nuestras"),
        "it": _w("mio | mia | miei | mie | nostro | nostra | nostri | nostre"),
        "pt": _w("meu | minha | meus | minhas | nosso | nossa | nossos | nossas"),
        "ru": _w("мой | моя | моё | мое | мои | моего | моей | наш | наша | наши"),
    },
    "articles": {
        "en": _w("the | a | an"),
        "fr": _w("le | la | les"),
        "de": _w("der | die | das"),
        "es": _w("el | la | los | las"),
        "it": _w("il | lo | la | gli | le"),
        "pt": _w("o | a | os | as"),
        "ru": _w("этот | эта | эти"),
    },
    "third_person": {
        "en": _w("he | she | they | he's | she's | they're | his | her | their | it's"),
        "fr": _w("il | elle | ils | elles"),
        "de": _w("er | sie"),
        "es": _w("él | ella | ellos | ellas"),
        "it": _w("lui | lei | loro"),
        "pt": _w("ele | ela | eles | elas"),
        "ru": _w("он | она | они | его | её | ее | их"),
    },
    "third_person_verbs": {
        "en": _w("""is | was | has | lives | lived | works | worked | likes | loves | owns |
                 turns | studies | plays | goes | went | moved | got | became | teaches |
                 runs | said | says | 's"""),
        "fr": _w("habite | vit | travaille | étudie"),
        "de": _w("wohnt | arbeitet | lebt | studiert"),
        "es": _w("vive | trabaja | estudia"),
        "it": _w("vive | abita | lavora | studia"),
        "pt": _w("mora | vive | trabalha | estuda"),
        "ru": _w("живёт | живет | работает | учится"),
    },
    "relations": {
        "en": tuple("""brother brothers sister sisters mother mom mum mommy mummy mama father
dad daddy papa parents parent wife husband partner spouse boyfriend girlfriend fiance fiancé
fiancee fiancée son sons daughter daughters kid kids child children baby babies toddler twin
twins friend friends buddy bestie boss manager colleague colleagues coworker coworkers
co-worker teammate teammates neighbour neighbor neighbours neighbors roommate flatmate
housemate cousin cousins uncle aunt auntie nephew niece grandma grandmother granny grandpa
grandfather grandson granddaughter grandparents grandkids stepmother stepfather stepson
stepdaughter in-laws mother-in-law father-in-law sister-in-law brother-in-law ex
cat cats dog dogs puppy kitten pet pets parrot bird horse rabbit bunny hamster guinea pig
fish turtle tortoise snake lizard retriever terrier spaniel labrador poodle shepherd
doctor dentist therapist teacher student students client clients customer tenant
landlord""".split()),
        "fr": tuple("""frère sœur soeur mère père femme mari fils fille enfant enfants ami
amie chat chien copain copine""".split()),
        "de": tuple("""bruder schwester mutter vater mama papa frau mann ehemann ehefrau sohn
tochter kind kinder freund freundin chef chefin kollege kollegin katze hund""".split()),
        "es": tuple("""hermano hermana madre padre esposa esposo marido hijo hija amigo amiga
novio novia gato perro""".split()),
        "it": tuple("""fratello sorella madre padre moglie marito figlio figlia amico amica
gatto cane""".split()),
        "pt": tuple("""irmão irmã mãe pai esposa marido filho filha amigo amiga gato cachorro
cão""".split()),
        "ru": tuple("""брат сестра мама мать папа отец жена муж сын дочь дочка ребёнок ребенок
дети друг подруга начальник коллега кот кошка собака пёс пес""".split()),
    },
    "self_naming": {
        "en": _w("""my name is | my name's | call me | i am called | i'm called |
                 i am named | i'm named"""),
        "fr": _w("""je m'appelle | mon nom est | mon prénom est | moi c'est | appelle-moi |
                 appelez-moi"""),
        "de": _w("ich heiße | ich heisse | mein name ist | nenn mich | nennen sie mich"),
        "es": _w("me llamo | mi nombre es | llámame | llamame"),
        "it": _w("mi chiamo | il mio nome è | chiamami"),
        "pt": _w("me chamo | meu nome é | o meu nome é | me chame | chama-me"),
        "ru": _w("меня зовут | зови меня | зовите меня | моё имя | мое имя"),
    },
    "self_intro": {
        "en": _w("i am | i'm | im | this is | it's | name's"),
        "fr": _w("je suis | c'est"),
        "de": _w("ich bin"),
        "es": _w("soy"),
        "it": _w("sono"),
        "pt": _w("sou"),
        "ru": _w("я | это"),
    },
    "user_naming": {
        "en": _w("""user's name is | user name is | user is named | user is called |
                 user goes by | user's names is | call the user"""),
        "fr": _w("le nom de l'utilisateur est | le prénom de l'utilisateur est"),
        "de": _w("der nutzer heißt | der benutzer heißt | name des nutzers ist"),
        "es": _w("el usuario se llama | el nombre del usuario es"),
        "it": _w("l'utente si chiama | il nome dell'utente è"),
        "pt": _w("o usuário se chama | o nome do usuário é"),
        "ru": _w("имя пользователя"),
    },
    "naming_phrase": {
        "en": _w("name is | call them | call him | call her | goes by | is named | is called"),
        "fr": _w("s'appelle | se nomme"),
        "de": _w("heißt | heisst"),
        "es": _w("se llama"),
        "it": _w("si chiama"),
        "pt": _w("se chama"),
        "ru": _w("зовут"),
    },
    "naming_lead": {
        "en": _w("named | called | name is | name's | names are"),
        "fr": _w("s'appelle | nommé | nommée"),
        "de": _w("heißt | namens"),
        "es": _w("se llama | llamado | llamada"),
        "it": _w("si chiama | chiamato | chiamata"),
        "pt": _w("se chama | chamado | chamada"),
        "ru": _w("зовут | по имени | по кличке"),
    },
    "probe": {
        "en": _w("""hi | hello | hey | yo | ping | pong | test | testing | thanks | thank you |
                 thx | ty | good morning | good evening | good night | good afternoon | bye"""),
        "fr": _w("salut | bonjour | bonsoir | merci | au revoir | coucou"),
        "de": _w("hallo | guten morgen | guten tag | guten abend | danke | tschüss"),
        "es": _w("hola | buenos días | buenas noches | buenas tardes | gracias | adiós"),
        "it": _w("ciao | buongiorno | buonasera | grazie | arrivederci"),
        "pt": _w("oi | olá | bom dia | boa noite | boa tarde | obrigado | obrigada | tchau"),
        "ru": _w("привет | здравствуй | здравствуйте | спасибо | пока | тест"),
    },
    "greeting_words": {
        "en": tuple("""hi hello hey heya hiya there yo good morning evening afternoon night day
thanks thank you cheers bye goodbye ok okay lol haha""".split()),
        "fr": tuple("salut bonjour bonsoir merci coucou".split()),
        "de": tuple("hallo guten morgen tag abend danke".split()),
        "es": tuple("hola buenos buenas días noches tardes gracias".split()),
        "it": tuple("ciao buongiorno buonasera grazie".split()),
        "pt": tuple("oi olá bom boa dia noite tarde obrigado obrigada".split()),
        "ru": tuple("привет здравствуйте спасибо пока".split()),
    },
    "conjunctions": {
        "en": _w("and | but | so | because | while | although | though | whereas"),
        "fr": _w("et | mais"),
        "de": _w("und | aber"),
        "es": _w("y | pero"),
        "it": _w("e | ma"),
        "pt": _w("e | mas"),
        "ru": _w("и | а | но"),
    },
    "comparison": {
        "en": _w("""ahead of | behind | than | compared to | compared with | unlike |
                 similar to | same as | different from | just like | like in | vs | vs. |
                 versus | rather than | instead of"""),
        "fr": _w("plutôt que | comparé à | par rapport à | contrairement à"),
        "de": _w("im vergleich zu | verglichen mit | anders als"),
        "es": _w("comparado con | a diferencia de | en lugar de"),
        "it": _w("rispetto a | a differenza di | invece di"),
        "pt": _w("comparado com | comparado a | ao contrário de"),
        "ru": _w("чем | в отличие от | по сравнению с"),
    },
    "replacement": {
        "en": _w("instead of | rather than | in place of"),
        "fr": _w("au lieu de | au lieu du | plutôt que"),
        "de": _w("statt | anstatt | anstelle"),
        "es": _w("en lugar de | en vez de"),
        "it": _w("invece di | invece del | anziché"),
        "pt": _w("em vez de | ao invés de | em lugar de"),
        "ru": _w("вместо"),
    },
    "commitment": {
        "en": _w("""due | deadline | appointment | meeting | exam | interview | flight | booked |
                 reservation | expire | expires | renewal | check-up | checkup | surgery |
                 court | hearing"""),
        "fr": _w("échéance | rendez-vous | examen | réunion | vol"),
        "de": _w("fällig | termin | prüfung | frist | flug"),
        "es": _w("plazo | cita | examen | reunión | vuelo"),
        "it": _w("scadenza | appuntamento | esame | riunione | volo"),
        "pt": _w("prazo | consulta | exame | reunião | voo"),
        "ru": _w("срок | встреча | экзамен | приём | рейс"),
    },
    "correction": {
        "en": _w("""correction | correct | corrected | i meant | i mean | typo | misspelled |
                 misspelt | spelled | spelt | spelling | with two * | with one * |
                 not * but"""),
        "fr": _w("correction | je voulais dire | faute de frappe | s'écrit | orthographe"),
        "de": _w("korrektur | ich meinte | tippfehler | schreibt sich | geschrieben"),
        "es": _w("corrección | quise decir | errata | se escribe | escrito"),
        "it": _w("correzione | intendevo | refuso | si scrive | scritto"),
        "pt": _w("correção | correcção | quis dizer | erro de digitação | escreve-se"),
        "ru": _w("поправка | исправление | я имел в виду | опечатка | пишется"),
    },
    "passing": {
        "en": _w("""today | tonight | right now | this morning | this afternoon | this evening |
                 at the moment"""),
        "fr": _w("aujourd'hui | ce soir | ce matin | cet après-midi | en ce moment"),
        "de": _w("heute | heute abend | heute morgen | gerade | im moment"),
        "es": _w("hoy | esta noche | esta mañana | esta tarde | ahora mismo"),
        "it": _w("oggi | stasera | stamattina | stanotte | in questo momento"),
        "pt": _w("hoje | esta noite | hoje à noite | esta manhã | agora mesmo"),
        "ru": _w("сегодня | сейчас | вечером | утром"),
    },
    "dates": {
        "en": _w("""jan* | feb* | mar* | apr* | may | jun* | jul* | aug* | sep* | oct* | nov* |
                 dec* | monday | tuesday | wednesday | thursday | friday | saturday | sunday |
                 today | tonight | tomorrow | next * | this week | this month | this weekend |
                 this *day"""),
        "fr": _w("""lundi | mardi | mercredi | jeudi | vendredi | samedi | dimanche |
                 aujourd'hui | demain | janvier | février | avril | juin | juillet | août |
                 septembre | octobre | novembre | décembre"""),
        "de": _w("""montag | dienstag | mittwoch | donnerstag | freitag | samstag | sonntag |
                 heute | morgen | januar | februar | märz | mai | juni | juli | august |
                 september | oktober | november | dezember"""),
        "es": _w("""lunes | martes | miércoles | jueves | viernes | sábado | domingo | hoy |
                 mañana | enero | febrero | marzo | abril | mayo | junio | julio | agosto |
                 septiembre | octubre | noviembre | diciembre"""),
        "it": _w("""lunedì | martedì | mercoledì | giovedì | venerdì | sabato | domenica | oggi |
                 domani | gennaio | febbraio | marzo | aprile | maggio | giugno | luglio |
                 agosto | settembre | ottobre | novembre | dicembre"""),
        "pt": _w("""segunda | terça | quarta | quinta | sexta | sábado | domingo | hoje | amanhã |
                 janeiro | fevereiro | março | abril | maio | junho | julho | agosto |
                 setembro | outubro | novembro | dezembro"""),
        "ru": _w("""понедельник* | вторник* | среда | среду | четверг* | пятниц* | суббот* |
                 воскресень* | сегодня | завтра | январ* | феврал* | март* | апрел* | май | мая |
                 июн* | июл* | август* | сентябр* | октябр* | ноябр* | декабр*"""),
    },
    "claims_kept": {
        "en": _w("""i'll remember | i will remember | i'll keep * in mind | i will keep * in mind |
                 i'll make a note | i've made a note | i've noted | i have noted | duly noted |
                 noted! | i've saved | i have saved | i've stored |
                 i have stored | i've added * to * memory | i've updated | i have updated |
                 i've recorded | i have recorded | saved to memory | stored in memory"""),
        "fr": _w("""je m'en souviendrai | je vais m'en souvenir | je retiens | c'est noté |
                 j'ai noté | je l'ai noté | j'ai enregistré | je l'ai enregistré |
                 j'ai mis à jour | je garde ça en tête"""),
        "de": _w("""ich werde mir * merken | ich merke mir | gemerkt | ich habe * notiert | notiert! |
                 ich habe * gespeichert | gespeichert! | ich habe * aktualisiert"""),
        "es": _w("""lo recordaré | recordaré | lo tendré en cuenta | he anotado | anotado! |
                 lo he anotado | he guardado | lo he guardado | he actualizado"""),
        "it": _w("""lo ricorderò | ricorderò | ho preso nota | ho annotato | ho salvato |
                 l'ho salvato | ho aggiornato | terrò a mente"""),
        "pt": _w("""vou lembrar | vou me lembrar | vou-me lembrar | anotei | anotado! | salvei |
                 guardei | atualizei | vou ter em mente"""),
        "ru": _w("""я запомню | запомню | я запомнил* | запомнил* | я записал* | записал* |
                 я сохранил* | сохранил* | я обновил* | обновил*"""),
    },
    "claims_forgot": {
        "en": _w("""i've forgotten | i have forgotten | i'll forget | i will forget |
                 forgotten that | i've removed | i have removed | i've deleted |
                 i have deleted | i've erased | i have erased | removed from * memory |
                 deleted from * memory"""),
        "fr": _w("""j'ai oublié | je l'ai oublié | je vais oublier | c'est oublié | j'ai supprimé |
                 je l'ai supprimé | j'ai effacé | je l'ai effacé"""),
        "de": _w("""ich habe * vergessen | habe ich vergessen | ich werde * vergessen |
                 ich habe * gelöscht | gelöscht! | vergessen!"""),
        "es": _w("""he olvidado | lo he olvidado | lo olvidaré | olvidaré | he borrado |
                 lo he borrado | he eliminado | lo he eliminado"""),
        "it": _w("""ho dimenticato | l'ho dimenticato | dimenticherò | ho cancellato |
                 l'ho cancellato | ho eliminato | l'ho eliminato"""),
        "pt": _w("""esqueci | vou esquecer | apaguei | removi | eliminei"""),
        "ru": _w("""я забыл* | забыл* | я забуду | забуду | я удалил* | удалил* | стёр | стер"""),
    },
    "request_verbs": {
        "en": tuple("""tell give write show explain list make create draft compose generate
describe summarise summarize translate suggest recommend find help teach send sing play read
rewrite fix convert calculate compute name plan pick""".split()),
        "fr": _w("""raconte* | écris* | donne* | montre* | explique* | traduis* | résume* |
                 propose* | aide* | dis | fais | calcule*"""),
        "de": _w("""erzähl | erzähle | schreib | schreibe | gib | zeig | zeige | erkläre |
                 übersetze | fasse | hilf | nenne | berechne"""),
        "es": _w("""cuéntame | cuenta | escribe* | dame | dime | muéstrame | explica* |
                 traduce* | resume* | sugiere* | ayúdame | calcula*"""),
        "it": _w("""racconta* | scrivi* | dammi | dimmi | mostra* | spiega* | traduci* |
                 riassumi | suggerisci* | aiutami | calcola*"""),
        "pt": _w("""conta | conte* | escreve* | escreva* | dá | dê | diga* | mostra* |
                 explica* | traduz* | resume* | sugere* | ajuda* | calcula*"""),
        "ru": _w("""расскажи | напиши | дай | покажи | объясни | переведи | перечисли | помоги |
                 придумай | посчитай"""),
    },
    "show_verbs": {  # a request to be shown or told something, not for a change
        "en": _w("show | tell | list | display | explain | describe | give | summarise | "
                 "summarize | check"),
        "fr": _w("montre* | dis | dites | explique* | liste* | affiche* | donne*"),
        "de": _w("zeig | zeige | sag | sage | erkläre | liste | nenne | gib"),
        "es": _w("muéstrame | muestra | dime | explica* | lista | enumera | dame"),
        "it": _w("mostra* | dimmi | spiega* | elenca | dammi"),
        "pt": _w("mostra* | diga* | diz | explica* | lista | dá | dê"),
        "ru": _w("покажи | скажи | объясни | перечисли | дай"),
    },
    "request_openers": {
        "en": _w("please | pls | now | ok | okay | so | can you | could you | would you | "
                 "will you"),
        "fr": _w("s'il te plaît | s'il vous plaît | stp | peux-tu | pourrais-tu"),
        "de": _w("bitte | kannst du | könntest du"),
        "es": _w("por favor | puedes | podrías"),
        "it": _w("per favore | puoi | potresti"),
        "pt": _w("por favor | podes | pode | poderia"),
        "ru": _w("пожалуйста | можешь | можете"),
    },
    "wondering": {
        "en": _combine("i | we", "wonder | was wondering | want to know | need to know"),
        "fr": _w("je me demande | je voudrais savoir"),
        "de": _w("ich frage mich | ich möchte wissen"),
        "es": _w("me pregunto | quiero saber"),
        "it": _w("mi chiedo | vorrei sapere"),
        "pt": _w("me pergunto | eu me pergunto | quero saber"),
        "ru": _w("интересно | хочу знать"),
    },
    "reply_verbs": {
        "en": _w("""answer* | reply* | respond* | talk* | speak* | write* | chat* |
                 communicate*"""),
        "fr": _w("réponds* | repondez* | répondez* | écris* | parle*"),
        "de": _w("antworte* | schreib* | sprich*"),
        "es": _w("responde* | contesta* | escribe* | háblame* | hablame*"),
        "it": _w("rispondi* | rispondimi* | scrivi* | parla*"),
        "pt": _w("responda* | escreva* | fala*"),
        "ru": _w("отвечай* | пиши* | говори*"),
    },
    "reply_fillers": {
        "en": _w("to | me | with | us | only | just"),
        "fr": _w("moi | toujours | seulement"),
        "de": _w("mir | immer | nur"),
        "es": _w("me | siempre | solo"),
        "it": _w("mi | me | sempre | solo"),
        "pt": _w("sempre"),
        "ru": _w("мне | со мной | всегда | только"),
    },
    "language_prepositions": {
        "en": _w("in"),
        "fr": _w("en"),
        "de": _w("auf"),
        "es": _w("en"),
        "it": _w("in"),
        "pt": _w("em"),
        "ru": _w("на"),
    },
}
"""Each rule's entries per language (module docstring: the notation and the readers)."""

_ASSISTANT = "assistant | ai | bot | chatbot | model"

PARTIAL: dict[str, dict[str, tuple[str, ...]]] = {
    # grounding: trivial windows and one-off commands
    "fillers": {"en": _w("please | pls | just | now | kindly | then | so")},
    "confirmations": {"en": _w("ok | okay")},
    "echo_verbs": {
        "en": _w("reply | respond | answer | say | print | output | write | type | return | echo"),
        "ru": _w("ответь | скажи | напиши | выведи"),
    },
    "echo_particles": {"en": _w("with | back")},
    "echo_adverbs": {
        "en": _w("exactly | only | just | literally"),
        "ru": _w("только | ровно | просто"),
    },
    "echo_tail": {
        "en": _w("and nothing else | only | exactly | verbatim"),
        "ru": _w("и больше ничего"),
    },
    "style_words": {
        "en": tuple("""in as with using briefly concisely shortly politely formally yaml json
markdown xml csv html english russian french german spanish italian chinese japanese korean
portuguese""".split()),
        "ru": _w("по-русски | по-английски"),
    },
    "tool_restriction": {
        "en": _combine("do not | don't | dont | never | no | without",
                       "tool | tools | use tool | use tools | any tool | any tools | "
                       "use any tool | use any tools"),
        "ru": _w("без инструментов* | не используй инструменты*"),
    },
    "format_only": {
        "en": _w("""no explanation | no explanations | nothing else | no comment | no comments |
                 no details | only the answer | just the answer | keep it short"""),
        "ru": _w("без объяснений | ничего больше"),
    },
    "tool_words": {"en": _w("tool | tools"), "ru": _w("инструмент*")},
    "avoidance": {
        "en": _w("no | not | don't | dont | avoid* | without | never"),
        "ru": _w("без | не"),
    },
    # grounding: the assistant's persona
    "persona_addressed": {"en": _combine("you are", "my | a | an | the | your")},
    "persona_addressed_as": {"en": _w("assistant | ai | agent | bot | chatbot")},
    "persona_self": {"en": _combine("i am | iam | i'm | i 'm", "an | a | the | your")},
    "persona_self_as": {
        "en": _w("ai | assistant | language model | llm | chatbot | memory extractor"),
    },
    "persona_phrases": {"en": _w("as an ai | memory extractor | language model")},
    "assistant_words": {"en": _w(_ASSISTANT)},
    "assistant_subject": {"en": _combine("the", _ASSISTANT)},
    "assistant_titles": {"en": _w("professor*")},
    # grounding: names and content words
    "self_intro_after": {"en": _w("here")},
    "name_particles": {
        "en": _w("the | user | is | a | an | and | mr | mrs | ms | dr | name"),
        "fr": _w("de | le | la"),
        "de": _w("von | der | den | van"),  # van: Dutch names, read alike
        "es": _w("de | la"),
        "it": _w("di | da | la"),
        "pt": _w("da | de"),
    },
    "grounding_stopwords": {
        "en": tuple("""the a an and or but of to in on at for with by from is are was were be
been being has have had does did do that this these those it its as about user users user's
prefers prefer likes like wants want their they them he she his her who which what when where
there than then also very really usually often favorite favourite preferred preference name
uses use using every each some any all not no yes into over only true false none""".split()),
    },
    # standing: reply language, units, answer length
    "language_adverb": {"ru": _w("по-")},
    "unit_systems": {"en": _w("metric | imperial")},
    "units_lead": {"en": _w("use | using | prefer | want | like | give | show | in | with")},
    "length_verbs": {"en": _w("keep | make")},
    "reply_determiners": {"en": _w("your | the | all | my")},
    "reply_nouns": {"en": _w("answers | replies | responses")},
    "length_short": {"en": _w("short | brief | concise | shorter | succinct")},
    "length_detailed": {"en": _w("detailed | long | thorough")},
    "length_detailed_before": {"en": _w("in-depth")},
    # claims, coverage, forget, introduction, keys, stance
    "opens_noted": {
        "en": _w("noted"), "fr": _w("c'est noté"), "de": _w("notiert"), "es": _w("anotado"),
    },
    "coverage_stopwords": {
        "en": tuple("""the and but for with from into about that this these those its are was
were been being has have had does did not can't cannot don't also very really just only
some any all every each over than then too who which what when where there here now
always usually mostly these days lot lots bit one two live lives living work works
working use uses using get got make makes like likes love loves enjoy enjoys prefer
prefers""".split()),
    },
    "clause_joins": {"en": _w("and | but")},
    "list_joins": {"en": _w("and | or")},
    "not_names": {
        "en": tuple("""sorry afraid fine good okay ok here back new not just also still really
very so the a an and but going trying looking working living moving learning allergic
vegetarian vegan pescatarian married single retired busy tired happy glad sure from in at on
with""".split()),
    },
    "time_words": {
        "en": _w("""morning | afternoon | evening | night | nights | weekend | weekends | noon |
                 midnight | tonight | today | tomorrow | yesterday | on | at | in | the | this |
                 next | last | every | a | an"""),
    },
    "clock_suffixes": {"en": _w("am | pm")},
    "diets": {
        "en": tuple("""vegetarian vegan pescatarian pescetarian halal kosher keto paleo
flexitarian omnivore carnivore lacto-vegetarian ovo-vegetarian plant-based""".split()),
    },
    "flag_values": {"en": _w("true | yes | y | 1 | on | always")},
    "stance_stopwords": {
        "en": tuple("""the a an and or but of to in on at for with by from is are was were be
been being has have had do does did that this these those it its as about user users
user's their they them he she his her who which what when where there than then also very
really just only all any some every each into over not no yes i me my mine we our you
your""".split()),
    },
    "relation_adjectives": {
        "en": _w("little | big | older | younger | new | old | best | dear"),
    },
    "greeting_fillers": {"en": _w("a | lot | so | much")},
}
"""Rules of some languages (module docstring): ``{rule: {language: (entry, …)}}`` for the
languages their guard was written in, a subset of :data:`LANGUAGES`."""

LANGUAGE_NAMES: dict[str, dict[str, tuple[str, ...]]] = {
    "English": {"en": _w("english"), "fr": _w("anglais"), "de": _w("englisch"),
                "es": _w("inglés | ingles"), "it": _w("inglese"), "pt": _w("inglês"),
                "ru": _w("английском | английский | по-английски")},
    "Italian": {"en": _w("italian"), "fr": _w("italien"), "de": _w("italienisch"),
                "es": _w("italiano"), "it": _w("italiano | italiana"), "pt": _w("italiano"),
                "ru": _w("итальянском | итальянский")},
    "French": {"en": _w("french"), "fr": _w("français | francais"), "de": _w("französisch"),
               "es": _w("francés | frances"), "it": _w("francese"), "pt": _w("francês"),
               "ru": _w("французском | французский | по-французски")},
    "German": {"en": _w("german"), "fr": _w("allemand"), "de": _w("deutsch"),
               "es": _w("alemán | aleman"), "it": _w("tedesco"), "pt": _w("alemão"),
               "ru": _w("немецком | немецкий | по-немецки")},
    "Spanish": {"en": _w("spanish"), "fr": _w("espagnol"), "de": _w("spanisch"),
                "es": _w("español | espanol | castellano"), "it": _w("spagnolo"),
                "pt": _w("espanhol"), "ru": _w("испанском | испанский")},
    "Portuguese": {"en": _w("portuguese"), "fr": _w("portugais"), "de": _w("portugiesisch"),
                   "es": _w("portugués"), "it": _w("portoghese"),
                   "pt": _w("português | portugues"), "ru": _w("португальском")},
    "Russian": {"en": _w("russian"), "fr": _w("russe"), "de": _w("russisch"), "es": _w("ruso"),
                "it": _w("russo"), "pt": _w("russo"),
                "ru": _w("русском | русский | по-русски")},
    "Dutch": {"en": _w("dutch"), "fr": _w("néerlandais"), "de": _w("niederländisch"),
              "nl": _w("nederlands")},
    "Polish": {"en": _w("polish"), "fr": _w("polonais"), "de": _w("polnisch"),
               "pl": _w("polski")},
    "Ukrainian": {"en": _w("ukrainian"), "ru": _w("украинском"), "uk": _w("українською")},
    "Turkish": {"en": _w("turkish"), "fr": _w("turc"), "de": _w("türkisch"), "tr": _w("türkçe")},
    "Greek": {"en": _w("greek"), "fr": _w("grec"), "de": _w("griechisch"), "el": _w("ελληνικά")},
    "Swedish": {"en": _w("swedish"), "fr": _w("suédois"), "de": _w("schwedisch"),
                "sv": _w("svenska")},
    "Japanese": {"en": _w("japanese"), "fr": _w("japonais"), "de": _w("japanisch"),
                 "ja": _w("日本語")},
    "Chinese": {"en": _w("chinese | mandarin"), "fr": _w("chinois"), "de": _w("chinesisch"),
                "zh": _w("中文")},
    "Korean": {"en": _w("korean"), "fr": _w("coréen"), "de": _w("koreanisch"),
               "ko": _w("한국어")},
    "Hindi": {"en": _w("hindi")},
    "Arabic": {"en": _w("arabic"), "fr": _w("arabe"), "de": _w("arabisch"), "es": _w("árabe"),
               "pt": _w("árabe")},
}
"""A language's English name (what a reply rule says) → its names per language."""

NUMBER_WORDS: dict[str, dict[str, tuple[str, ...]]] = {
    "0": {"en": _w("zero")},
    "1": {"en": _w("one | a | an | first | once")},
    "2": {"en": _w("two | second | twice | both | couple")},
    "3": {"en": _w("three | third")},
    "4": {"en": _w("four | fourth")},
    "5": {"en": _w("five | fifth")},
    "6": {"en": _w("six | sixth")},
    "7": {"en": _w("seven | seventh")},
    "8": {"en": _w("eight | eighth")},
    "9": {"en": _w("nine | ninth")},
    "10": {"en": _w("ten | tenth")},
    "11": {"en": _w("eleven | eleventh")},
    "12": {"en": _w("twelve | twelfth | dozen | noon | midnight")},
    "13": {"en": _w("thirteen")},
    "14": {"en": _w("fourteen")},
    "15": {"en": _w("fifteen")},
    "16": {"en": _w("sixteen")},
    "17": {"en": _w("seventeen")},
    "18": {"en": _w("eighteen")},
    "19": {"en": _w("nineteen")},
    "20": {"en": _w("twenty | twentieth")},
    "30": {"en": _w("thirty")},
    "40": {"en": _w("forty")},
    "50": {"en": _w("fifty")},
    "60": {"en": _w("sixty")},
    "100": {"en": _w("hundred")},
    "1000": {"en": _w("thousand")},
}
"""A number (its digits) → its words per language."""


def entries(*rules: str, languages: Iterable[str] = LANGUAGES) -> tuple[str, ...]:
    """The entries of ``rules`` (of :data:`RULES` or :data:`PARTIAL`) in every language
    (or those of ``languages``) the rule has, lower case, de-duplicated, in order."""
    seen: dict[str, None] = {}
    for rule in rules:
        table = RULES[rule] if rule in RULES else PARTIAL[rule]
        for lang in languages:
            for e in table.get(lang, ()):
                seen.setdefault(e.lower().replace("’", "'"), None)
    return tuple(seen)


def meanings(table: dict[str, dict[str, tuple[str, ...]]]) -> dict[str, str]:
    """Each entry of a value table (:data:`LANGUAGE_NAMES`, :data:`NUMBER_WORDS`), lower
    case, → the value it stands for."""
    return {e.lower().replace("’", "'"): value for value, by_language in table.items()
            for words in by_language.values() for e in words}


def _entry_re(entry: str, bound: bool = True) -> str:
    core = entry.strip("*")
    start = "(?<!\\w)" if bound and core[:1].isalnum() else ""
    out = [r"\w*" if entry.startswith("*") else start]
    for ch in core:
        if ch == " ":
            out.append(r"\s+")
        elif ch in "'’":
            out.append("['’]")
        elif ch == "*":
            out.append(r"\w+")  # "next *": one word there
        else:
            out.append(re.escape(ch))
    if entry.endswith(" *"):  # "next *": one more word
        out.append(r"\w+(?!\w)" if bound else r"\w+")
    else:
        end = "(?!\\w)" if bound and core[-1:].isalnum() else ""
        out.append(r"\w*" if entry.endswith("*") else end)
    return "".join(out)


def pattern(*rules: str, languages: Iterable[str] = LANGUAGES, bound: bool = True) -> str:
    """One regex alternation (a group) of the entries of ``rules`` (in ``languages``,
    default all), longest first, each bounded as a word where it starts or ends with a
    letter; ``bound=False`` leaves the bounds out, so that an entry also matches a
    word's start ("reply" in "replying")."""
    return "(?:" + "|".join(_entry_re(e, bound) for e in sorted(
        entries(*rules, languages=languages), key=len, reverse=True)) + ")"


def compile_rules(*rules: str) -> re.Pattern[str]:
    """:func:`pattern` compiled, case-insensitive."""
    return re.compile(pattern(*rules), re.I)


class WordSet:
    """Single words of some rules, for a word already split off and lower-cased (``’``
    read as ``'``): ``word in ws``. An entry ``"j'*"`` holds every word it starts;
    phrases count only with ``split=True`` (their words then count one by one)."""

    def __init__(self, *rules: str, split: bool = False) -> None:
        words = [w for e in entries(*rules) for w in (e.split() if split else [e])
                 if " " not in w]
        self.exact = frozenset(w for w in words if "*" not in w)
        self.prefixes = tuple(w[:-1] for w in words if w.endswith("*") and w.count("*") == 1)

    def __contains__(self, word: object) -> bool:
        if not isinstance(word, str):
            return False
        w = word.lower().replace("’", "'")
        return w in self.exact or bool(self.prefixes) and w.startswith(self.prefixes)


def word_set(*rules: str, split: bool = False) -> WordSet:
    """A :class:`WordSet` of ``rules``."""
    return WordSet(*rules, split=split)
