"""Word alignments from a model's attention (modeling_vaswani/toolkit/translation/alignment.py) against an independent
aligner, eflomal (Östling and Tiedemann 2016; `pip install eflomal`, GPLv3, run here as a tool, never imported by
the package), on the shipped Multi30k En-De (modeling_vaswani/toolkit/data/multi30k/). The findings are in
docs/documents.md#word-alignments.

What is compared with what: the model aligns a source with its OWN translation, so eflomal aligns the same pairs.
1. The model translates validation and test2016 (Section 6.1's beam search, one sentence a line).
2. eflomal, trained on Multi30k train + (validation source, model translation) + (test2016 source, model
   translation), aligns every pair of that corpus in both directions; grow-diag-final-and symmetrizes them (by hand,
   below: eflomal has no symmetrization of its own, its README sends you to fast_align's atools). Its links for the
   model's translations are the reference.
3. The model's attention alignments of the same pairs, for every decoder layer (and all layers averaged), heads
   averaged or each head alone, and each way of scoring a word pair from its subword pairs (mean, max, sum), are
   scored against that reference: precision, recall, F1, and AER with eflomal's links as sure links (AER = 1 - F1
   then). Chosen on validation, reported on test2016.
As a second view, the same with the human references: eflomal trained on train + validation + test2016 as shipped
(the issue's reference), against the attention of the reference translations forced through the decoder.

Words are the whitespace-separated words of the detokenized texts, on both sides and for both aligners: eflomal sees
the same words lowercased with punctuation stripped from their edges (a word of punctuation alone kept), so its
links index the same word positions. eflomal seeds itself from /dev/urandom: its links, and so the figures, move a
little from run to run.

python benchmarks/alignment.py --model runs/small/averaged        # about 17 minutes on 2 cores, 10 of them translating
python benchmarks/alignment.py --model runs/small/averaged --work alignment_work --reuse   # keep and reuse outputs
python benchmarks/alignment.py --model runs/small/averaged \
    --write_sample tests/toolkit/translation/data/alignment_test2016_sample.jsonl   # the slow test's sample
"""

import argparse
import datetime
import importlib.metadata
import json
import platform
import re
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from speed.report import machine

DIRECTIONS = ("en", "de")
NEIGHBOURS = ((-1, 0), (0, -1), (1, 0), (0, 1), (-1, -1), (-1, 1), (1, -1), (1, 1))


# ---- symmetrization -----------------------------------------------------------------------------------------------


def grow_diag_final_and(forward: set[tuple[int, int]], reverse: set[tuple[int, int]]) -> set[tuple[int, int]]:
    """Koehn et al. (2005)'s grow-diag-final-and of two directional alignments of one sentence pair, (source,
    target) links each, as Moses' and fast_align's atools compute it: start from the intersection; grow it by
    neighbouring links (diagonals included) of the union that align a word not aligned yet, until none is added;
    then add the links of each direction (forward first) whose source and target words are both unaligned."""
    union = forward | reverse
    links = set(forward & reverse)
    sources = {s for s, _ in links}
    targets = {t for _, t in links}
    added = True
    while added:
        added = False
        for source in range(max((s for s, _ in union), default=-1) + 1):
            for target in range(max((t for _, t in union), default=-1) + 1):
                if (source, target) not in links:
                    continue
                for ds, dt in NEIGHBOURS:
                    new = (source + ds, target + dt)
                    if new in union and new not in links and (new[0] not in sources or new[1] not in targets):
                        links.add(new)
                        sources.add(new[0])
                        targets.add(new[1])
                        added = True
    for direction in (forward, reverse):
        for source, target in sorted(direction, key=lambda link: (link[1], link[0])):
            if source not in sources and target not in targets:
                links.add((source, target))
                sources.add(source)
                targets.add(target)
    return links


# ---- eflomal ------------------------------------------------------------------------------------------------------


def eflomal_words(sentence: str) -> str:
    """The sentence's whitespace words as eflomal reads them: punctuation stripped from their edges (a word of
    punctuation alone kept), so that "Schnee." and "Schnee" are one word type; eflomal lowercases them itself."""
    words = []
    for word in sentence.split():
        stripped = re.sub(r"^\W+|\W+$", "", word)
        words.append(stripped or word)
    return " ".join(words)


def eflomal_links(sources: Sequence[str], targets: Sequence[str], folder: Path, name: str) -> list[set]:
    """eflomal's symmetrized (grow-diag-final-and) links for every pair, one set of (source, target) word positions a
    pair, from one run over all of them (eflomal is unsupervised: the pairs are its training data)."""
    import eflomal

    forward, reverse = folder / f"{name}.fwd", folder / f"{name}.rev"
    started = time.perf_counter()
    eflomal.Aligner().align(
        [eflomal_words(s) for s in sources],
        [eflomal_words(t) for t in targets],
        links_filename_fwd=str(forward),
        links_filename_rev=str(reverse),
    )
    print(f"eflomal {name}: {len(sources)} pairs in {time.perf_counter() - started:.0f} s")
    from modeling_vaswani.toolkit.translation.alignment import parse_pharaoh

    forward_lines = forward.read_text(encoding="utf-8").split("\n")[: len(sources)]
    reverse_lines = reverse.read_text(encoding="utf-8").split("\n")[: len(sources)]
    return [
        grow_diag_final_and(set(parse_pharaoh(f)), set(parse_pharaoh(r)))
        for f, r in zip(forward_lines, reverse_lines, strict=True)
    ]


# ---- scoring ------------------------------------------------------------------------------------------------------


def counts(predicted: Sequence[Sequence[tuple[int, int]]], reference: Sequence[set]) -> tuple[int, int, int]:
    """(links predicted, reference links, links in both), summed over the sentences."""
    hits = sum(len(set(p) & r) for p, r in zip(predicted, reference, strict=True))
    return sum(len(set(p)) for p in predicted), sum(len(r) for r in reference), hits


def scores(predicted, reference) -> dict:
    """Precision, recall, F1 and AER (the reference's links all sure: AER = 1 - 2|A&S| / (|A| + |S|) = 1 - F1), over
    all links of all sentences (micro), in %."""
    found, wanted, hits = counts(predicted, reference)
    precision = hits / found if found else 0.0
    recall = hits / wanted if wanted else 0.0
    f1 = 2 * hits / (found + wanted) if found + wanted else 0.0
    return {"P": 100 * precision, "R": 100 * recall, "F1": 100 * f1, "AER": 100 * (1 - f1)}


def diagonal(source: str, target: str) -> list[tuple[int, int]]:
    """The trivial baseline: target word j of J linked to source word floor((j + 0.5) * I / J) of I."""
    sources, targets = len(source.split()), len(target.split())
    return [(min(sources - 1, int((j + 0.5) * sources / targets)), j) for j in range(targets)] if sources else []


# ---- the model ----------------------------------------------------------------------------------------------------


def configurations(layers: int, heads: int) -> list[tuple]:
    """(layer, heads, aggregation) for every layer and all layers averaged (None): heads averaged (None) with each
    aggregation, and each head alone with the mean."""
    from modeling_vaswani.toolkit.translation.alignment import AGGREGATIONS

    layer_choices = [*range(layers), None]
    averaged = [(layer, None, aggregation) for layer in layer_choices for aggregation in AGGREGATIONS]
    return averaged + [(layer, (head,), "mean") for layer in layer_choices for head in range(heads)]


def attention_links(attention, configuration, shift: bool = False) -> list[list[tuple[int, int]]]:
    """Every sentence's links under one configuration. `shift`: target token t takes the attention of the step that
    READ it (row t + 1, Chen et al. 2020's shift-att) instead of the step that predicted it (row t, the library's)."""
    from modeling_vaswani.toolkit.translation.alignment import SentenceAttention

    links = []
    for sentence in attention:
        if sentence is None:
            links.append([])
            continue
        if shift:  # rows 1..T-1 (the last is </s>'s prediction step) for tokens 0..T-2
            sentence = SentenceAttention(
                sentence.attention[:, :, 1:], sentence.target_words[:-1], sentence.source_words
            )
        links.append(sentence.links(*configuration))
    return links


def name(configuration) -> str:
    layer, heads, aggregation = configuration
    layer_name = "all layers" if layer is None else f"layer {layer}"
    head_name = "heads averaged" if heads is None else f"head {heads[0]}"
    return f"{layer_name}, {head_name}, {aggregation}"


def cpu_line() -> str:
    facts = machine()
    return f"{facts['cpu']}, {facts['cpu_count']} logical CPUs, {' '.join(facts['cpu_flags']) or 'no AVX2'}"


def row(label: str, validation: dict, test: dict) -> str:
    cells = [f"{s[k]:.1f}" for s in (validation, test) for k in ("P", "R", "F1", "AER")]
    return f"| {label} | " + " | ".join(cells) + " |"


HEADER = (
    "| alignment | val P | val R | val F1 | val AER | test P | test R | test F1 | test AER |\n"
    "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
)


def report(title: str, attention: dict, reference: dict, pairs: dict, layers: int, heads: int) -> tuple:
    """One table: the diagonal, each head-averaged configuration, the best head of each layer (chosen on
    validation), and shift-att for the best head-averaged configuration. Returns the best head-averaged one."""
    print(f"\n## {title}\n")
    print(HEADER)
    baseline = {split: [diagonal(s, t) for s, t in pairs[split]] for split in pairs}
    print(row("diagonal baseline", *(scores(baseline[s], reference[s]) for s in ("validation", "test"))))
    measured = {}
    for configuration in configurations(layers, heads):
        measured[configuration] = {
            split: scores(attention_links(attention[split], configuration), reference[split])
            for split in ("validation", "test")
        }
    averaged = [c for c in measured if c[1] is None]
    for configuration in averaged:
        print(row(name(configuration), measured[configuration]["validation"], measured[configuration]["test"]))
    for layer in [*range(layers), None]:
        candidates = [c for c in measured if c[0] == layer and c[1] is not None]
        best = max(candidates, key=lambda c: measured[c]["validation"]["F1"])
        print(row(f"{name(best)} (best head on val)", measured[best]["validation"], measured[best]["test"]))
    chosen = max(averaged, key=lambda c: measured[c]["validation"]["F1"])
    shifted = {
        split: scores(attention_links(attention[split], chosen, shift=True), reference[split])
        for split in ("validation", "test")
    }
    print(row(f"{name(chosen)}, shift-att (row t + 1)", shifted["validation"], shifted["test"]))
    print(f"\nBest on validation, heads averaged: {name(chosen)} (F1 {measured[chosen]['validation']['F1']:.1f}).")
    return chosen, measured


# ---- the run ------------------------------------------------------------------------------------------------------


def read(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").rstrip("\n").split("\n")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, help="a checkpoint folder (vaswani-train's averaged model)")
    parser.add_argument("--work", help="folder for translations and eflomal's output (default: a temporary one)")
    parser.add_argument("--reuse", action="store_true", help="reuse translations and eflomal links found in --work")
    parser.add_argument("--batch_size", type=int, default=64)
    parser.add_argument("--write_sample", help="write the test's sample (JSON Lines) here: every 10th test2016 pair")
    args = parser.parse_args(argv)

    from transformers import AutoTokenizer

    from modeling_vaswani import VaswaniForConditionalGeneration
    from modeling_vaswani.toolkit.data.corpora import multi30k_files, read_sentences
    from modeling_vaswani.toolkit.translation.alignment import pharaoh, sentence_attention
    from modeling_vaswani.toolkit.translation.translate import translate

    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="alignment-"))
    work.mkdir(parents=True, exist_ok=True)
    data = {
        split: [read_sentences(multi30k_files(split)[lang]) for lang in DIRECTIONS]
        for split in ("train", "validation", "test")
    }
    model = VaswaniForConditionalGeneration.from_pretrained(args.model).eval()
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    layers, heads = model.config.decoder_layers, model.config.num_heads

    translations = {}
    for split in ("validation", "test"):
        path = work / f"{split}.hyp.de"
        if args.reuse and path.exists():
            translations[split] = read(path)
            continue
        started = time.perf_counter()
        translations[split] = translate(
            model, tokenizer, data[split][0], batch_size=args.batch_size, split_sentences=False
        )
        path.write_text("\n".join(translations[split]) + "\n", encoding="utf-8")
        print(f"translated {split}: {len(translations[split])} sentences in {time.perf_counter() - started:.0f} s")

    references = {}
    for kind, targets in (("model", translations), ("human", {s: data[s][1] for s in ("validation", "test")})):
        path = work / f"eflomal.{kind}.json"
        if args.reuse and path.exists():
            links = json.loads(path.read_text())
        else:
            sources = data["train"][0] + data["validation"][0] + data["test"][0]
            target_lines = data["train"][1] + targets["validation"] + targets["test"]
            every = eflomal_links(sources, target_lines, work, kind)
            train, val = len(data["train"][0]), len(data["validation"][0])
            links = {
                "validation": [sorted(x) for x in every[train : train + val]],
                "test": [sorted(x) for x in every[train + val :]],
            }
            path.write_text(json.dumps(links))
        references[kind] = {split: [set(map(tuple, x)) for x in links[split]] for split in links}

    pairs, attention = {}, {}
    for kind, targets in (("model", translations), ("human", {s: data[s][1] for s in ("validation", "test")})):
        pairs[kind] = {s: list(zip(data[s][0], targets[s], strict=True)) for s in ("validation", "test")}
        started = time.perf_counter()
        attention[kind] = {
            s: sentence_attention(model, tokenizer, data[s][0], targets[s], batch_size=args.batch_size)
            for s in ("validation", "test")
        }
        print(f"attention of the {kind} translations: {time.perf_counter() - started:.0f} s")

    print(f"\n# Word alignments against eflomal, {datetime.date.today().isoformat()}\n")
    print(f"CPU: {cpu_line()}; Python {platform.python_version()}; eflomal {importlib.metadata.version('eflomal')}.")
    print(f"Model: {args.model} ({layers} decoder layers, {heads} heads).")
    print("Multi30k En-De, validation (1,014 pairs) to choose, test2016 (1,000) to report. P, R, F1, AER in %.")
    chosen, _ = report(
        "The model's translations (eflomal trained on train + the model's validation and test2016 pairs)",
        attention["model"], references["model"], pairs["model"], layers, heads,
    )  # fmt: skip
    report(
        "The human references forced through the decoder (eflomal trained on train + validation + test2016)",
        attention["human"], references["human"], pairs["human"], layers, heads,
    )  # fmt: skip

    if args.write_sample:
        sample = Path(args.write_sample)
        sample.parent.mkdir(parents=True, exist_ok=True)
        lines = [
            json.dumps(
                {
                    "line": index + 1,
                    "source": data["test"][0][index],
                    "translation": translations["test"][index],
                    "eflomal": pharaoh(
                        sorted(references["model"]["test"][index], key=lambda link: (link[1], link[0]))
                    ),
                },
                ensure_ascii=False,
            )
            for index in range(0, len(translations["test"]), 10)
        ]
        sample.write_text("\n".join(lines) + "\n", encoding="utf-8")
        print(f"\nwrote {len(lines)} pairs to {sample}")
    print(f"\noutputs in {work}; chosen: {name(chosen)}")


if __name__ == "__main__":
    main()
