"""Lexical constraints on real text, evaluated as Post and Vilar (2018) and Hu et al. (2019) evaluate them: test2016
with 1-3 constraints a sentence drawn at random from its reference translation (phrases of 1-3 consecutive words of
the reference, its edge punctuation stripped), translated with and without them by the main job's model, as
vaswani-translate translates (`translate`, 2,000-token batches, one sentence a line). Reported for each beam:
the share of constraints the translations hold (their token ids, as the search is given them, in the translation's
ids), sacreBLEU and chrF2 with and without, and sentences/s with and without, measured in the same run. Then a
glossary of 20 frequent Multi30k words, made by hand (`GLOSSARY`): term accuracy, the share of (sentence, term) pairs
whose source holds the term where the translation holds its target term as a whole word (any case), without and with
the glossary.

The sample of constraints is drawn with a seed and kept with the benchmark
(benchmarks/data/terminology_test2016.jsonl); `--write_sample` draws it again.

python benchmarks/terminology.py --model runs/small/averaged                  # beams 4 and 8, about 10 minutes
python benchmarks/terminology.py --model runs/small/averaged --sentences 100 --beams 4
"""

import argparse
import json
import random
import re
import time
from pathlib import Path

import sacrebleu
from speed.report import machine

from modeling_vaswani.toolkit.data.corpora import multi30k_files, read_sentences
from modeling_vaswani.toolkit.evaluation.terminology import Glossary
from modeling_vaswani.toolkit.evaluation.translate import translate
from modeling_vaswani.toolkit.serving.engines import load_translator

SAMPLE = Path(__file__).resolve().parent / "data" / "terminology_test2016.jsonl"
SEED = 2017
# 20 frequent Multi30k source words and the German word a translator would require for each.
GLOSSARY = {
    "man": "Mann", "woman": "Frau", "men": "Männer", "women": "Frauen", "girl": "Mädchen", "boy": "Junge",
    "child": "Kind", "people": "Menschen", "dog": "Hund", "shirt": "Hemd", "street": "Straße", "water": "Wasser",
    "ball": "Ball", "bike": "Fahrrad", "crowd": "Menschenmenge", "building": "Gebäude", "hat": "Hut", "car": "Auto",
    "snow": "Schnee", "beach": "Strand",
}  # fmt: skip


def draw_constraints(references: list[str], seed: int = SEED) -> list[list[str]]:
    """1-3 phrases a sentence, each 1-3 consecutive words of its reference with edge punctuation stripped, not
    overlapping one another."""
    rng = random.Random(seed)
    drawn = []
    for reference in references:
        words = [word.strip(".,;:!?\"'()") for word in reference.split()]
        free = [i for i, word in enumerate(words) if word]
        phrases, used = [], set()
        for _ in range(rng.randint(1, 3)):
            length = rng.randint(1, 3)
            starts = [i for i in free if all(j in free and j not in used for j in range(i, i + length))]
            if not starts:
                continue
            start = rng.choice(starts)
            used.update(range(start, start + length))
            phrases.append(" ".join(words[start : start + length]))
        drawn.append(phrases)
    return drawn


def holds(tokens: list[int], phrase: list[int]) -> bool:
    return any(tokens[i : i + len(phrase)] == phrase for i in range(len(tokens) - len(phrase) + 1))


def satisfied(tokenizer, translations: list[str], constraints: list[list[str]]) -> tuple[int, int]:
    """(constraints held, constraints): a phrase is held where its ids, as the search was given them, stand in the
    translation's ids."""
    held = total = 0
    for translation, phrases in zip(translations, constraints, strict=True):
        ids = tokenizer(text_target=translation, add_special_tokens=False)["input_ids"]
        for phrase in phrases:
            total += 1
            held += holds(ids, tokenizer(text_target=phrase, add_special_tokens=False)["input_ids"])
    return held, total


def term_accuracy(sources: list[str], translations: list[str], glossary: dict[str, str]) -> tuple[int, int]:
    """(pairs whose translation holds the target term, pairs): a pair is a sentence and a glossary term its source
    holds as a whole word (any case)."""
    hits = pairs = 0
    for source, translation in zip(sources, translations, strict=True):
        for term, target in glossary.items():
            if re.search(rf"(?<!\w){re.escape(term)}(?!\w)", source, re.IGNORECASE):
                pairs += 1
                hits += bool(re.search(rf"(?<!\w){re.escape(target)}(?!\w)", translation, re.IGNORECASE))
    return hits, pairs


def timed(model, tokenizer, sources, **options) -> tuple[list[str], float]:
    start = time.perf_counter()
    translations = translate(
        model, tokenizer, sources, max_tokens=2000, split_sentences=False, progress=False, **options
    )
    return translations, time.perf_counter() - start


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, help="a trained checkpoint folder (the main job's)")
    parser.add_argument("--beams", type=int, nargs="+", default=[4, 8])
    parser.add_argument("--sentences", type=int, help="the first N sentences of test2016 (default: all)")
    parser.add_argument("--write_sample", action="store_true", help="draw the constraints again, into SAMPLE")
    parser.add_argument("--json", help="also write the report here")
    arguments = parser.parse_args(argv)
    files = multi30k_files("test", languages=("en", "de"))
    sources, references = read_sentences(files["en"]), read_sentences(files["de"])
    if arguments.write_sample:
        rows = [{"line": i + 1, "constraints": c} for i, c in enumerate(draw_constraints(references))]
        SAMPLE.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows), encoding="utf-8")
    constraints = [json.loads(line)["constraints"] for line in SAMPLE.read_text(encoding="utf-8").splitlines()]
    if arguments.sentences:
        sources, references, constraints = (x[: arguments.sentences] for x in (sources, references, constraints))
    model, tokenizer = load_translator(arguments.model)
    translate(model, tokenizer, sources[:8], max_tokens=2000, split_sentences=False, progress=False)  # warm up
    report = {"machine": machine(), "model": arguments.model, "sentences": len(sources), "beams": {}}
    for beams in arguments.beams:
        free, free_seconds = timed(model, tokenizer, sources, num_beams=beams)
        bound, bound_seconds = timed(model, tokenizer, sources, num_beams=beams, constraints=constraints)
        held, total = satisfied(tokenizer, bound, constraints)
        row = {
            "constraints held": f"{held} of {total} ({100 * held / total:.1f}%)",
            "sacreBLEU without": round(sacrebleu.corpus_bleu(free, [references]).score, 2),
            "sacreBLEU with": round(sacrebleu.corpus_bleu(bound, [references]).score, 2),
            "chrF2 without": round(sacrebleu.corpus_chrf(free, [references]).score, 2),
            "chrF2 with": round(sacrebleu.corpus_chrf(bound, [references]).score, 2),
            "sentences/s without": round(len(sources) / free_seconds, 1),
            "sentences/s with": round(len(sources) / bound_seconds, 1),
        }
        report["beams"][beams] = row
        print(f"beam {beams}: " + json.dumps(row, ensure_ascii=False), flush=True)
    free, _ = timed(model, tokenizer, sources)
    glossed, _ = timed(model, tokenizer, sources, glossary=Glossary.of(GLOSSARY))
    before, after = term_accuracy(sources, free, GLOSSARY), term_accuracy(sources, glossed, GLOSSARY)
    report["glossary"] = {
        "terms": len(GLOSSARY),
        "term accuracy without": f"{before[0]} of {before[1]} ({100 * before[0] / before[1]:.1f}%)",
        "term accuracy with": f"{after[0]} of {after[1]} ({100 * after[0] / after[1]:.1f}%)",
        "sacreBLEU without": round(sacrebleu.corpus_bleu(free, [references]).score, 2),
        "sacreBLEU with": round(sacrebleu.corpus_bleu(glossed, [references]).score, 2),
    }
    print("glossary: " + json.dumps(report["glossary"], ensure_ascii=False), flush=True)
    if arguments.json:
        Path(arguments.json).write_text(json.dumps(report, indent=1, ensure_ascii=False), encoding="utf-8")
    return report


if __name__ == "__main__":
    main()
