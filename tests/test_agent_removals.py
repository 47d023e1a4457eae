"""The agent removes only what the user named: a forget request's words must name the
fact (its value, its key, or a key of the same meaning) or the note; a message that is
no request to forget ("days left", "I've given up on that puzzle", "I left the office
early") removes nothing, whatever the model calls."""

from __future__ import annotations

import pytest

from actors.policy.forget import names_fact, request_targets
from actors.policy.write_guard import may_remove, removal_refusal

PROFILE = {"city": "Graz", "job": "accountant", "employer": "a brewery",
           "author": "Ursula K. Le Guin", "phone": "+43 660 1234567", "diet": "vegetarian",
           "office_door_code": "4417"}


@pytest.mark.parametrize(("message", "removed"), [
    ("Please forget where I work.", {"job", "employer"}),
    ("Please forget what I told you about my job", {"job"}),
    ("Forget where I live, please.", {"city"}),
    ("Forget the door code I gave you, please.", {"office_door_code"}),
    ("Delete my phone number from your memory", {"phone"}),
    ("Forget that I'm vegetarian", {"diet"}),
    ("How many weeks are left until summer?", set()),
    ("How many days do I have left to buy it?", set()),
    ("I've given up on that puzzle, it's too hard.", set()),
    ("I left the office early today.", set()),
    ("Actually I moved to Linz.", set()),
    ("Please forget that.", set()),
])
def test_a_removal_goes_through_only_for_what_the_user_named(message, removed):
    allowed = {k for k, v in PROFILE.items() if removal_refusal(message, key=k, value=v) is None}
    assert allowed == removed


def test_a_note_is_removed_only_when_the_request_names_it():
    note = "The user said: my daughter Klara likes Lego and horses."
    assert removal_refusal("Forget that Klara likes Lego", note=note) is None
    assert removal_refusal("Forget my phone number", note=note) is not None
    assert removal_refusal("When is Klara's birthday?", note=note) is not None
    assert removal_refusal("I sold my Lego collection", note=note) is None  # let go of it
    assert removal_refusal("Forget that", note=None) is not None  # unknown target


def test_a_known_value_let_go_offers_removal_and_a_question_does_not():
    assert may_remove("I left Berlin for good", {"city": "Berlin"})
    assert not may_remove("I left early today", {"city": "Berlin"})
    assert not may_remove("How many weeks are left until summer?", PROFILE)
    assert may_remove("Forget my phone number")


def test_names_fact_reads_a_key_of_the_same_meaning():
    assert request_targets("Please forget where I work.") == [["work"]]
    assert names_fact(["work"], "employer", "a brewery")
    assert not names_fact(["work"], "city", "Graz")
    assert not names_fact([], "city", "Graz")
