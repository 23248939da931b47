"""A translation pair, whatever it was read from: the two languages it is between, the Hub's schema for it (as `wmt14`
declares it: a single column `translation` holding `{source_lang: text, target_lang: text}`), and the one check every
row of every format passes (`checked_pair`)."""

from datasets import Features, Translation


def check_languages(source_lang: str, target_lang: str) -> None:
    for name, lang in (("source_lang", source_lang), ("target_lang", target_lang)):
        if not isinstance(lang, str) or not lang:
            raise ValueError(f"{name} must be a non-empty language code such as 'en', got {lang!r}")
    if source_lang == target_lang:
        raise ValueError(f"source_lang and target_lang are both {source_lang!r}; expected two different languages")


def translation_features(*languages: str) -> Features:
    # Sorted, as Translation orders its struct fields, so both directions of a pair get equal features.
    return Features({"translation": Translation(languages=sorted(languages))})


def checked_pair(pair: object, source_lang: str, target_lang: str, where: str) -> dict[str, str]:
    """The one check of a translation pair, whatever format it was read from: a dict holding a sentence (a string
    with more than white space, that UTF-8 can hold) for each language; refused naming `where` otherwise."""
    if not isinstance(pair, dict):
        raise ValueError(
            f"{where}: translation is {pair!r}; expected a dict with keys {source_lang!r} and {target_lang!r}"
        )
    for lang in (source_lang, target_lang):
        if lang not in pair:
            raise ValueError(f"{where}: no {lang!r} text (found keys {sorted(pair)}); expected {lang!r} in every row")
        text = pair[lang]
        if text is None:
            raise ValueError(f"{where}: the {lang!r} value is null; expected a string (a sentence)")
        if not isinstance(text, str):
            raise ValueError(f"{where}: {lang!r} is {text!r} ({type(text).__name__}); expected a string")
        if not text.strip():
            raise ValueError(f"{where}: {lang!r} text is empty; expected a sentence")
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as error:  # JSON's "\ud800": no character, and nothing Arrow can store
            raise ValueError(
                f"{where}: {lang!r} text holds a lone surrogate ({text[error.start]!r} at character {error.start}), "
                "which is no Unicode text; expected UTF-8 text"
            ) from None
    return {source_lang: pair[source_lang], target_lang: pair[target_lang]}
