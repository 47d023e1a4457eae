"""Words for the people, pets and roles in a user's life: one list for every module that
asks "is this about someone else?" (reflection's stance guards) or "does memory know
anything about the user's brother?" (the focus line). English first, then the common
forms of German, French, Spanish, Italian, Portuguese and Russian."""

from __future__ import annotations

__all__ = ["RELATIONS"]

RELATIONS = frozenset("""
brother brothers sister sisters mother mom mum mommy mummy mama father dad daddy papa
parents parent wife husband partner spouse boyfriend girlfriend fiance fiancé fiancee
fiancée son sons daughter daughters kid kids child children baby babies toddler twin twins
friend friends buddy bestie boss manager colleague colleagues coworker coworkers co-worker
teammate teammates neighbour neighbor neighbours neighbors roommate flatmate housemate
cousin cousins uncle aunt auntie nephew niece grandma grandmother granny grandpa
grandfather grandson granddaughter grandparents grandkids stepmother stepfather stepson
stepdaughter in-laws mother-in-law father-in-law sister-in-law brother-in-law ex
cat cats dog dogs puppy kitten pet pets parrot bird horse rabbit bunny hamster guinea pig
fish turtle tortoise snake lizard retriever terrier spaniel labrador poodle shepherd
doctor dentist therapist teacher student students client clients customer tenant landlord
bruder schwester mutter vater mama papa frau mann ehemann ehefrau sohn tochter kind kinder
freund freundin chef chefin kollege kollegin katze hund
frère sœur soeur mère père femme mari fils fille enfant enfants ami amie chat chien
hermano hermana madre padre esposa esposo marido hijo hija amigo amiga novio novia gato
perro fratello sorella madre padre moglie marito figlio figlia amico amica gatto cane
irmão irmã mãe pai esposa marido filho filha amigo amiga gato cachorro cão
брат сестра мама мать папа отец жена муж сын дочь дочка ребёнок ребенок дети друг подруга
начальник коллега кот кошка собака пёс пес
""".split())
"""Nouns after "my"/"our" that make a clause about someone (or something) else."""
