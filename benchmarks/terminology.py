"""Lexical constraints on real text, evaluated as Post and Vilar (2018) and Hu et al. (2019) evaluate them: test2016
with 1-3 constraints a sentence drawn at random from its reference translation (phrases of 1-3 consecutive words of
the reference, its edge punctuation stripped), translated with and without them by the main job's model, as
vaswani-translate translates (`translate`, 2,000-token batches, one sentence a line). Reported for each beam:
the share of constraints the translations hold (a phrase's text beginning a word of the translation, as the search
holds its tokens; and as whole words), sacreBLEU and chrF2 with and without, and sentences/s with and without
(median of 3 alternating runs, measured in the same run). Then a glossary of 20 frequent Multi30k words, made by hand
(`GLOSSARY`): term accuracy, the share of (sentence, term) pairs whose source holds the term where the translation
holds its target term as a whole word (any case), without and with the glossary.

The sample of constraints is drawn with a seed and kept with the benchmark
(benchmarks/data/terminology_test2016.jsonl); `--write_sample` draws it again.

python benchmarks/terminology.py --model runs/small/averaged                  # beams 4 and 8, about 20 minutes
python benchmarks/terminology.py --model runs/small/averaged --sentences 100 --beams 4
"""

import argparse
import json
import random
import re
import statistics
import time
from pathlib import Path

import sacrebleu
from speed.report import machine

from modeling_vaswani.toolkit.data.corpora import multi30k_files, read_sentences
from modeling_vaswani.toolkit.translation.engines import load_translator
from modeling_vaswani.toolkit.translation.terminology import Glossary
from modeling_vaswani.toolkit.translation.translate import translate

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


def satisfied(translations: list[str], constraints: list[list[str]]) -> tuple[int, int, int]:
    """(phrases held, phrases held as whole words, phrases). The search holds a phrase's tokens, in their leading-space
    form: in the text, the phrase beginning a word. Its last token may be followed by more of the same word
    ("Schlagzeuger" in "Schlagzeugers"), so whole words are counted apart."""
    held = whole = total = 0
    for translation, phrases in zip(translations, constraints, strict=True):
        for phrase in phrases:
            total += 1
            held += bool(re.search(rf"(?<!\w){re.escape(phrase)}", translation))
            whole += bool(re.search(rf"(?<!\w){re.escape(phrase)}(?!\w)", translation))
    return held, whole, total


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
    parser.add_argument("--repeats", type=int, default=3, help="timed runs of each, alternating; the median is kept")
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
        free_times, bound_times = [], []
        for _ in range(arguments.repeats):  # alternating, so that a busier minute of a shared host weighs on both
            free, seconds = timed(model, tokenizer, sources, num_beams=beams)
            free_times.append(seconds)
            bound, seconds = timed(model, tokenizer, sources, num_beams=beams, constraints=constraints)
            bound_times.append(seconds)
        free_seconds, bound_seconds = statistics.median(free_times), statistics.median(bound_times)
        held, whole, total = satisfied(bound, constraints)
        row = {
            "constraints held": f"{held} of {total} ({100 * held / total:.1f}%)",
            "held as whole words": f"{whole} of {total} ({100 * whole / total:.1f}%)",
            "sacreBLEU without": round(sacrebleu.corpus_bleu(free, [references]).score, 2),
            "sacreBLEU with": round(sacrebleu.corpus_bleu(bound, [references]).score, 2),
            "chrF2 without": round(sacrebleu.corpus_chrf(free, [references]).score, 2),
            "chrF2 with": round(sacrebleu.corpus_chrf(bound, [references]).score, 2),
            "sentences/s without": round(len(sources) / free_seconds, 1),
            "sentences/s with": round(len(sources) / bound_seconds, 1),
            "speed with / without": round(free_seconds / bound_seconds, 2),
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
