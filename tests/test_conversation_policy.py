"""The pure rules behind a conversation that goes right: what a dense message states
(``actors.policy.coverage``), who introduces themselves (``actors.policy.introduction``),
memory spoken of as "you" (``actors.store.person``) and a yearly day counted to its next
occurrence (``actors.store.dates.day_note``)."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from actors.policy.coverage import statement_count, uncovered_sentences
from actors.policy.introduction import greeting, introduced_name
from actors.reflection.parser import parse_reflection
from actors.reflection.plan import plan_reflection
from actors.policy.claims import memory_claims, unmet_claims
from actors.store.dates import day_note
from actors.store.focus import care_items, someone_else
from actors.store.records import Note
from actors.store.staleness import states_old_value
from actors.store.person import second_person

SOFIA = ("Hi! I'm Sofia, 29, a vet in Valencia. I walk to work, I'm learning Korean, "
         "I can't stand olives, and my partner Luis is a chef.")


def test_a_dense_introduction_counts_its_statements():
    assert statement_count(SOFIA) >= 6
    assert statement_count("I'm cooking dinner tonight for the family") == 0  # passing
    assert statement_count("I'm tired today.") == 0
    assert statement_count("I'm making waffles on Saturday, anything to watch out for?") == 0
    assert statement_count("Hi there!") == 0


def test_what_nothing_kept_holds_is_found_sentence_by_sentence():
    kept = ["name Sofia", "job veterinarian", "city Valencia", "age 29"]
    assert uncovered_sentences(SOFIA, kept) == [
        "I walk to work, I'm learning Korean, I can't stand olives, and my partner Luis is "
        "a chef."]
    everything = kept + ["The user walks to work.", "The user is learning Korean.",
                         "The user can't stand olives.", "The user's partner Luis is a chef."]
    assert uncovered_sentences(SOFIA, everything) == []
    # "I live in Graz" is held by city=Graz; a dislike must be held as a dislike
    assert uncovered_sentences("I live in Graz, I work at a brewery, I love jazz.",
                               ["city Graz", "employer brewery", "likes jazz"]) == []
    assert uncovered_sentences("I can't stand olives", ["likes olives"]) != []


def test_in_a_short_message_only_numbers_and_names_count():
    rent = "My rent is 1,200 a month and I take home 3,000 after tax."
    assert uncovered_sentences(rent, ["income 3000"], specifics=True) == [rent]
    assert uncovered_sentences(rent, ["income 3,000", "rent 1200"], specifics=True) == []
    assert uncovered_sentences("I mostly write Go, and my editor is Emacs.",
                               ["language Go", "editor Emacs"], specifics=True) == []


def plan(lines: str, message: str, known: dict[str, str] | None = None):
    return plan_reflection(parse_reflection(lines, max_facts=10, max_notes=10), message,
                           known or {}, max_facts=10, max_notes=10)


def test_a_dense_introduction_loses_nothing_the_model_left_out():
    p = plan("SET name=Sofia\nSET job=vet\nSET city=Valencia\n", SOFIA)
    assert [(f.key, f.value) for f in p.facts] == [
        ("name", "Sofia"), ("job", "vet"), ("city", "Valencia")]
    bodies = [n.body for n in p.notes]
    assert any("can't stand olives" in b and "Luis is a chef" in b for b in bodies)


def test_a_one_off_or_a_question_is_never_quoted():
    assert not plan("SET meal=dinner\n", "I'm cooking dinner tonight for the family").notes
    p = plan("SET city=Saturday\nSET meal=waffles\n",
             "I'm making waffles on Saturday, anything to watch out for?")
    assert not p.notes


@pytest.mark.parametrize(("message", "expected"), [
    ("Hi, I'm Oskar. I just moved to Tallinn and I work as a carpenter.", ("Oskar", "en")),
    ("Je m'appelle Élodie, j'habite à Lyon.", ("Élodie", "fr")),
    ("Меня зовут Иван, я живу в Казани.", ("Иван", "ru")),
    ("Ich heiße Jonas und wohne in Wien.", ("Jonas", "de")),
    ("Ich bin Lehrer in Wien.", None),  # German nouns are capitalised
    ("I'm Oskar, what's the weather like?", None),  # a question
    ("I'm allergic to shellfish.", None),
    ("I'm sorry, that was rude.", None),
])
def test_an_introduction_gives_the_name_and_its_language(message, expected):
    assert introduced_name(message) == expected


def test_the_greeting_follows_the_language():
    assert greeting("Oskar", "en") == "Nice to meet you, Oskar! You"
    assert greeting("Élodie", "fr") == "Enchanté, Élodie ! Vous"
    assert greeting("Li", "xx") == "Nice to meet you, Li! You"


@pytest.mark.parametrize(("stored", "shown"), [
    ("The user is allergic to shellfish.", "You are allergic to shellfish."),
    ("The user never eats mushrooms.", "You never eat mushrooms."),
    ("The user does not drink coffee.", "You do not drink coffee."),
    ("The user's daughter Klara likes Lego.", "Your daughter Klara likes Lego."),
    ("The user said: My wife Mei's birthday is on 9 November, and we're expecting our "
     "first child.", "You said: Your wife Mei's birthday is on 9 November, and you're "
     "expecting your first child."),
    ("The user said: I moved to the US with my kids.", "You said: You moved to the US "
     "with your kids."),
    ("The user said: Je m'appelle Élodie.", "You said: Je m'appelle Élodie."),
    ("Buy milk on the way home.", "Buy milk on the way home."),
])
def test_memory_is_shown_to_the_agent_about_you(stored, shown):
    assert second_person(stored) == shown


def test_a_yearly_day_is_counted_to_its_next_occurrence():
    now = int(datetime(2026, 12, 6, 12, tzinfo=timezone.utc).timestamp() * 1000)
    assert day_note("My wife Mei's birthday is on 9 November", now, now, "UTC") == \
        "9 Nov 2027, in 338 days"
    assert day_note("my son Yusuf turns five on 22 August", now, now, "UTC") == \
        "22 Aug 2027, in 259 days"
    assert day_note("the thesis was due on 9 November", now, now, "UTC") == \
        "9 Nov 2026, 27 days ago"
    assert day_note("born on 9 November 1990, my birthday", now, now, "UTC") == "9 Nov 1990"


def test_an_age_still_to_come_keeps_the_sentence_not_the_number():
    message = "My daughter Klara turns 9 on 14 March."
    p = plan("SET daughter_age=9\nSET daughter_birthday=14 March\n", message)
    assert ("daughter_age", "9") not in [(f.key, f.value) for f in p.facts]
    assert [n.body for n in p.notes] == [f"The user said: {message}"]
    assert [(f.key, f.value) for f in plan("SET age=29\n", "I'm 29.").facts] == [("age", "29")]


def test_a_corrected_spelling_replaces_the_fact_whatever_the_model_wrote():
    from actors.policy.corrections import corrections

    message = "Small correction: it's Anna, with two n's."
    assert corrections(message, {"name": "Ana", "city": "Graz"}) == [("name", "Anna")]
    assert corrections("It's Anna.", {"name": "Ana"}) == []  # no word of correcting
    assert corrections("Correction: my sister is Mia.", {"name": "Ana"}) == []
    for lines in ("NONE\n", "SET name=Anna\n", "SET nickname=Anna\n"):
        p = plan_reflection(parse_reflection(lines, max_facts=10, max_notes=10), message,
                            {"name": "Ana"}, max_facts=10, max_notes=10)
        assert ("name", "Anna") in [(f.key, f.value) for f in p.facts], lines


def test_the_users_own_name_is_left_out_of_what_the_agent_reads():
    from actors.store.person import without_name

    quote = second_person("The user said: Hey, I'm Tariq. I'm pescatarian, I live in "
                          "Rotterdam.")
    assert "Tariq" not in without_name(quote, "Tariq")
    assert without_name(second_person("The user said: Hi! I'm Sofia, 29, a vet."),
                        "Sofia") == "You said: Hi! You're 29, a vet."
    assert without_name("Tariq's son Yusuf likes Lego.", "Tariq") == "your son Yusuf likes Lego."
    assert without_name("Anna likes jazz.", "Tariq") == "Anna likes jazz."


@pytest.mark.parametrize(("content", "words", "left"), [
    ("The user's daughter Klara likes Lego and horses.", ["klara", "lego"],
     "The user's daughter Klara likes horses."),
    ("The user said: I live in Graz and I work as an accountant at a brewery.", ["work"],
     "The user said: I live in Graz."),
    ("The user said: I live in Graz and I work as an accountant at a brewery.", ["graz"],
     "The user said: I work as an accountant at a brewery."),
    ("The user said: I walk to work, I'm learning Korean, I can't stand olives, and my "
     "partner Luis is a chef.", ["can't", "stand", "olives"],
     "The user said: I walk to work, I'm learning Korean, and my partner Luis is a chef."),
    ("The user works at a brewery.", ["work"], None),
    ("Lives at 12 Rue Victor Hugo, Lyon", ["address", "12", "rue", "victor", "hugo"], None),
    ("The user likes jazz.", ["rock"], "The user likes jazz."),
])
def test_a_note_keeps_what_the_user_did_not_ask_to_forget(content, words, left):
    from actors.policy.forget import without

    assert without(content, words) == left


def test_forgetting_rewrites_a_note_that_holds_other_facts(conn):
    from actors.store.forgetting import apply_forget
    from actors.store.notes import MemoryStore
    from actors.store.profile import ProfileStore
    from actors.store.schema import write_txn

    notes, profiles = MemoryStore(conn), ProfileStore(conn)
    quote = notes.store("The user said: I live in Graz and I work as an accountant at a "
                        "brewery.", session_id="s1", turn_id="t-1")
    profiles.set("city", "Graz", session_id="s1", turn_id="t-1")
    profiles.set("job", "accountant", session_id="s1", turn_id="t-1")
    profiles.set("employer", "a brewery", session_id="s1", turn_id="t-1")
    profiles.set("cafe_name", "Bean There", session_id="s2", turn_id="t-2")
    with write_txn(conn):
        out = apply_forget(conn, retire_keys=[], purge_keys=[], targets=[["work"]], now_ms=5)
    assert sorted(out.purged_keys) == ["employer", "job"]
    assert out.rewritten_note_ids == [quote.id] and out.note_ids == []
    assert notes.get(quote.id).content == "The user said: I live in Graz."
    assert {f.key for f in profiles.list()} == {"city", "cafe_name"}
    assert notes.recall("brewery") == [] and [n.id for n in notes.recall("Graz")] == [quote.id]
    with write_txn(conn):  # "name" alone names no cafe_name
        assert apply_forget(conn, retire_keys=[], purge_keys=[], targets=[["name"]],
                            now_ms=6).purged_keys == []


def test_a_forgotten_fact_leaves_the_notes_that_word_it_otherwise(conn):
    """"Forget what I told you about my job" purges ``job = bridge designer``; the notes
    reflection wrote in its own words ("designs bridges", "I design bridges") lose that
    clause and keep the rest; a note on a bridge club, which is not the job, stays."""
    from actors.store.forgetting import apply_forget
    from actors.store.notes import MemoryStore
    from actors.store.profile import ProfileStore
    from actors.store.schema import write_txn

    notes, profiles = MemoryStore(conn), ProfileStore(conn)
    profiles.set("job", "bridge designer")
    quote = notes.store("The user said: I'm Tomas, I live in Brno, I design bridges, my "
                        "daughter Klara turns 9 on 14 March.")
    summary = notes.store("The user lives in Brno, designs bridges, has a daughter named "
                          "Klara, and is vegetarian.")
    club = notes.store("The user's bridge club meets on Fridays.")
    with write_txn(conn):
        out = apply_forget(conn, retire_keys=[], purge_keys=[], targets=[["job"]], now_ms=5)
    assert out.purged_keys == ["job"] and sorted(out.rewritten_note_ids) == [quote.id,
                                                                          summary.id]
    assert notes.get(quote.id).content == ("The user said: I'm Tomas, I live in Brno, my "
                                           "daughter Klara turns 9 on 14 March.")
    assert notes.get(summary.id).content == ("The user lives in Brno, has a daughter named "
                                             "Klara, and is vegetarian.")
    assert notes.get(club.id).content == "The user's bridge club meets on Fridays."


RACE = ["Melanie: I ran a charity race for mental health last Saturday; I realized "
        "self-care is important.",
        "Caroline: I went to a support group yesterday and it was so powerful.",
        "Caroline: Melanie, that's awesome about the race!"]


@pytest.mark.parametrize(("question", "items", "expected"), [
    # what memory holds on it was said by someone else
    ("What did Caroline realize after her charity race?", RACE,
     [("Caroline", "realize charity race")]),
    ("What is Tom's job?", ["Your sister Ana works as a nurse (job)",
                            "Your brother Tom lives in Oslo"], [("Tom", "job")]),
    # the person's own words, a request, the user's own item beside one in other words
    ("What did Melanie realize after her charity race?", RACE, []),
    ("When did Caroline go to the support group?", RACE, []),
    ("Can you suggest a gift for Klara?", ["Your wife Mei would like a gift"], []),
    # a holiday, a place: no one asked about
    ("What could I get my son for Christmas?", ["Your son Leo is 4 and loves dinosaurs."],
     []),
    ("Where should I eat in Lisbon?", ["Your sister Ana loves eating fish"], []),
    ("When is Klara's birthday?", ["Your daughter Klara turns 9 on 14 March",
                                   "Your birthday is 3 May"], []),
    ("Which city does Luis like?", ["Your partner Luis loves the city of Seville",
                                    "Your city: Valencia"], []),
])
def test_a_question_about_someone_is_not_answered_with_another_persons_memory(
        question, items, expected):
    assert someone_else(question, items) == expected


@pytest.mark.parametrize(("reply", "claims"), [
    ("Got it! I'll remember that you use VS Code.", {"kept"}),
    ("Noted, Tomas.", {"kept"}),
    ("C'est noté !", {"kept"}),
    ("Lo recordaré.", {"kept"}),
    ("Done, I've forgotten your phone number.", {"forgot"}),
    ("Ich habe deine Telefonnummer gelöscht!", {"forgot"}),
    ("You live in Brno.", set()),
    ("As you noted, the bridge is long.", set()),
])
def test_what_a_reply_says_it_did_to_memory(reply, claims):
    assert memory_claims(reply) == claims


def test_a_claim_is_unmet_only_where_the_turn_did_not_do_it():
    reply = "Noted! And I've forgotten your old address."
    assert unmet_claims(reply, kept=True, forgot=True) == []
    assert unmet_claims(reply, kept=False, forgot=True) == ["kept"]
    assert unmet_claims(reply, kept=False, forgot=False) == ["kept", "forgot"]
    assert unmet_claims("Sure, here is the plan.", kept=False, forgot=False) == []


def test_a_dislike_in_a_long_note_is_said_beside_a_food_question():
    intro = Note(id=1, content="You said: Hi! You're Sofia, 29, a vet in Valencia. You walk "
                               "to work, you're learning Korean, you can't stand olives, and "
                               "your partner Luis is a chef.", tags=[], source="agent",
                 scope="all", working_dir=None, created_at=0, updated_at=0)
    assert care_items("Suggest pizza toppings I'd enjoy.", [], [intro], []) == [
        "… you can't stand olives"]
    assert care_items("How do I get to work?", [], [intro], []) == []  # not about food


@pytest.mark.parametrize(("content", "old", "new", "stale"), [
    ("The user's name is Ana.", "Ana", "Anna", True),  # the user's own attribute
    ("The user said: My name is Ana.", "Ana", "Anna", True),
    ("The user's favourite colour is blue.", "blue", "green", True),
    ("The user's sister lives in Linz.", "Linz", "Graz", False),  # hers, not the user's
    ("The user's older sister lives in Linz.", "Linz", "Graz", False),
    ("The user moved from Linz to Graz.", "Linz", "Graz", False),  # holds the new value
])
def test_a_corrected_value_stales_the_notes_that_still_state_it(content, old, new, stale):
    assert states_old_value(content, old, new) is stale


@pytest.mark.parametrize(("key", "value", "time"), [
    ("city", "Saturday night", True), ("destination", "Sunday morning", True),
    ("city", "tonight at 8pm", True), ("city", "New York", False),
    ("home_city", "Paris", False), ("job", "night shift", False),
])
def test_a_time_is_no_place(key, value, time):
    from actors.policy.keys import not_a_place

    assert not_a_place(key, value) is time


def test_staying_in_on_saturday_night_stores_no_city():
    message = "I'm running a half marathon on Sunday morning, so I'm staying in on Saturday night."
    got = plan_reflection(parse_reflection("SET city=Saturday night\n", max_facts=10,
                                           max_notes=10, keep_duplicates=True),
                          message, {}, max_facts=6, max_notes=6)
    assert [f.key for f in got.facts] == []
    assert [d.reason for d in got.dropped] == ["not_a_place"]
