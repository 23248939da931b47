"""What the stock MarianMT export (vaswani-export-marian) changes on real text: the checkpoint and its export
(modeling_vaswani.toolkit.interop.marian_export.to_marian, the folder's model) translate a test set side by side.

MarianMT computes this network with LayerNorm's epsilon fixed at 1e-5 (transformers' MarianEncoderLayer), where the
configuration's is 1e-6, and its generation config says beam 4 and alpha 0.6 in transformers' beam search, which
divides by |Y|^alpha where Section 6.1 uses GNMT's ((5 + |Y|) / 6)^alpha. Printed, as JSON:
- the largest difference of the logits over the test set's sources and our beam translations as decoder input;
- how many lines differ between ours and the export under the same search: greedy, and transformers' beam search
  with the folder's generation config (max_new_tokens: the batch's longest source + 50, Section 6.1's rule for it);
- how many lines of the export's beam search differ from ours under the paper's decoding
  (generate(paper_decoding=True)), what a user of the stock folder gets against what this package translates;
- the machine (CPU flags).

python benchmarks/marian_export.py --model runs/small/averaged --lines 1000
"""

import argparse
import gzip
import json
import sys
import time
from pathlib import Path

import torch
from speed.report import machine
from transformers import AutoTokenizer

from modeling_vaswani import VaswaniForConditionalGeneration
from modeling_vaswani.search_vaswani import OUTPUT_MARGIN
from modeling_vaswani.toolkit.interop.marian_export import to_marian

TEST2016 = Path(__file__).resolve().parents[1] / "modeling_vaswani/toolkit/data/multi30k/test_2016_flickr.en.gz"


def read_lines(path: Path, lines: int) -> list[str]:
    opened = gzip.open(path, "rt", encoding="utf-8") if path.suffix == ".gz" else path.open(encoding="utf-8")
    with opened as text:
        return [line.rstrip("\n") for line in text][:lines]


def batches(sentences: list[str], size: int):
    for start in range(0, len(sentences), size):
        yield sentences[start : start + size]


def translate(model, tokenizer, sentences: list[str], batch_size: int, **settings) -> list[str]:
    """`model.generate(**settings)` over `sentences` in batches; the stock searches get Section 6.1's limit of the
    batch's longest source + 50 (a generation config can hold no limit per sentence)."""
    translations = []
    for batch in batches(sentences, batch_size):
        inputs = tokenizer(batch, padding=True, return_tensors="pt")
        limit = (
            {} if settings.get("paper_decoding") else {"max_new_tokens": inputs["input_ids"].shape[1] + OUTPUT_MARGIN}
        )
        with torch.no_grad():
            output = model.generate(**inputs, **limit, **settings)
        translations += tokenizer.batch_decode(output, skip_special_tokens=True)
    return translations


def largest_logit_difference(ours, marian, tokenizer, sources, targets, batch_size: int) -> float:
    largest = 0.0
    for source, target in zip(batches(sources, batch_size), batches(targets, batch_size), strict=True):
        inputs = tokenizer(source, text_target=target, padding=True, return_tensors="pt")
        labels = inputs.pop("labels")
        decoder_input_ids = ours.prepare_decoder_input_ids_from_labels(labels)
        with torch.no_grad():
            a = ours(**inputs, decoder_input_ids=decoder_input_ids).logits
            b = marian(**inputs, decoder_input_ids=decoder_input_ids).logits
        keep = labels.ne(tokenizer.pad_token_id)
        largest = max(largest, (a - b).abs()[keep].max().item())
    return largest


def differing(first: list[str], second: list[str]) -> list[int]:
    return [line for line, (a, b) in enumerate(zip(first, second, strict=True), start=1) if a != b]


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, help="a Vaswani checkpoint folder with its tokenizer")
    parser.add_argument("--source", type=Path, default=TEST2016, help="source lines (default: test2016's English)")
    parser.add_argument("--lines", type=int, default=1000)
    parser.add_argument("--batch_size", type=int, default=32)
    arguments = parser.parse_args(argv)

    ours = VaswaniForConditionalGeneration.from_pretrained(arguments.model).eval()
    tokenizer = AutoTokenizer.from_pretrained(arguments.model)
    marian = to_marian(ours)
    sources = read_lines(arguments.source, arguments.lines)
    started = time.perf_counter()
    runs = {}
    for name, model, settings in [
        ("ours greedy", ours, {"num_beams": 1}),
        ("marian greedy", marian, {"num_beams": 1}),
        ("ours beam", ours, {}),
        ("marian beam", marian, {}),
        ("ours paper", ours, {"paper_decoding": True}),
    ]:
        began = time.perf_counter()
        runs[name] = translate(model, tokenizer, sources, arguments.batch_size, **settings)
        print(f"{name}: {time.perf_counter() - began:.1f} s", file=sys.stderr, flush=True)
    report = {
        "model": arguments.model,
        "layer_norm_eps": ours.config.layer_norm_eps,
        "lines": len(sources),
        "largest_logit_difference": largest_logit_difference(
            ours, marian, tokenizer, sources, runs["ours beam"], arguments.batch_size
        ),
        "greedy_differing": differing(runs["ours greedy"], runs["marian greedy"]),
        "beam_differing": differing(runs["ours beam"], runs["marian beam"]),
        "paper_against_marian_beam_differing": len(differing(runs["ours paper"], runs["marian beam"])),
        "examples": [
            {"line": line, "ours": runs["ours beam"][line - 1], "marian": runs["marian beam"][line - 1]}
            for line in differing(runs["ours beam"], runs["marian beam"])[:5]
        ],
        "seconds": round(time.perf_counter() - started, 1),
        "machine": machine(),
    }
    print(json.dumps(report, indent=2, ensure_ascii=False))


if __name__ == "__main__":
    main()
