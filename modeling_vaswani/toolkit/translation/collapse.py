"""A model that has collapsed: one that gives most of its inputs one and the same translation, whatever they say.

An undertrained model does this: the main job cut to 704 steps translated all 1,000 test2016 sentences as "Ein Mann in
einem blauen Hemd und einem weißen Hemd sitzt auf einer Bank." and scored 2.46 sacreBLEU, and nothing said so (issue
53). The rule, `collapse_warning`: of at least MIN_INPUTS different inputs, more than SHARE got one translation, as
far as its first PREFIX characters.
- Different inputs: the same sentence given twice rightly gets the same translation twice, and a blank line an empty
  one; each distinct non-blank input counts once, with its translation.
- MIN_INPUTS: among a few short inputs, half sharing a translation ("Ein Hund." for "A dog." and "One dog.") can be
  right; among 20 different sentences it is not.
- SHARE: translations of different sentences rarely repeat (test2016's 1,000 German references are 1,000 different
  lines; of Multi30k's 29,000 training targets, the most repeated line is 3 of them), and a collapsed model gives
  nearly all its inputs the one sentence: the half between them leaves both far from the line.
- PREFIX: a model that reads none of its input and never ends a sentence writes the same tokens for each, cut at each
  one's length limit (its source's length + 50 tokens, Section 6.1): one text's beginnings of different lengths (an
  untrained model's; a 30-step one's "Ein Mann mitenenenen...", for 24 of 24 test sentences). Different sentences'
  translations part sooner: of test2016's references, no two share their first 40 characters (German or French; 11
  share their first 20), of Multi30k's 29,000 German training targets at most 7.
"""

from collections import Counter
from collections.abc import Sequence

MIN_INPUTS = 20
SHARE = 0.5
PREFIX = 40


def collapse_warning(sources: Sequence[str], translations: Sequence[str]) -> str | None:
    """The warning to give where `translations` (one a source, in order) show a collapsed model, naming the sentence
    and what to do; None where they do not. The callers (vaswani-translate, vaswani-evaluate, the end of training)
    give it their own way."""
    if len(sources) != len(translations):
        raise ValueError(f"{len(sources)} sources and {len(translations)} translations; expected one a source")
    first = {}  # each distinct input once, with its first translation
    for source, translation in zip(sources, translations, strict=True):
        first.setdefault(source, translation)
    kept = [translation[:PREFIX] for source, translation in first.items() if source.strip()]
    if len(kept) < MIN_INPUTS:
        return None
    beginning, count = Counter(kept).most_common(1)[0]
    if count <= SHARE * len(kept):
        return None
    sentence = next(translation for translation in translations if translation.startswith(beginning))
    shown = sentence if len(sentence) <= 2 * PREFIX else f"{sentence[: 2 * PREFIX]}..."
    return (
        f"{count:,} of {len(kept):,} different inputs ({count / len(kept):.0%}) got one and the same translation, as "
        f"far as its first {PREFIX} characters: {shown!r}. The model has collapsed: it translates without reading "
        "its input, as an undertrained model does. Train it longer (more steps, or a larger --max_train_minutes), "
        "check the training data (source and target files aligned line by line, in the languages given) and the "
        "checkpoint (the run's final or averaged model, not an early checkpoint-N)"
    )


__all__ = ["MIN_INPUTS", "PREFIX", "SHARE", "collapse_warning"]
