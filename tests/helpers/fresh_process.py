"""A saved folder reloaded in a fresh Python process, through transformers' Auto classes and the folder's own
remote code (no import of this package), as a user who downloaded it would load it."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import torch

PROGRAM = textwrap.dedent(
    """
    import json, sys
    import torch
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    folder, inputs, max_new_tokens = sys.argv[1], torch.load(sys.argv[2]), int(sys.argv[3])
    model = AutoModelForSeq2SeqLM.from_pretrained(folder, trust_remote_code=True).eval()
    tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=True)
    with torch.no_grad():
        torch.save(model(**inputs).logits, "logits.pt")
    source = tokenizer(sys.argv[4:], padding=True, return_tensors="pt")
    text = []
    if max_new_tokens:
        generated = model.generate(**source, max_new_tokens=max_new_tokens)
        text = tokenizer.batch_decode(generated, skip_special_tokens=True)
    print(json.dumps({"model": type(model).__module__, "ids": source["input_ids"].tolist(), "text": text}))
    """
)


def reload_in_fresh_process(
    folder: Path, batch: dict, sources: list[str], work: Path, max_new_tokens: int = 0
) -> tuple[dict, torch.Tensor]:
    """What the fresh process reports (the model's module, the ids of `sources`, their translations when
    `max_new_tokens` is given) and the logits it computed for `batch`."""
    torch.save(dict(batch), work / "inputs.pt")
    env = {**os.environ, "HF_MODULES_CACHE": str(work / "modules"), "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-c", PROGRAM, str(folder), "inputs.pt", str(max_new_tokens), *sources]
    result = subprocess.run(command, capture_output=True, text=True, env=env, cwd=work)
    assert result.returncode == 0, result.stderr
    reported = json.loads(result.stdout.strip().splitlines()[-1])
    assert reported["model"].startswith("transformers_modules.")  # the checkpoint's own code, not the package
    return reported, torch.load(work / "logits.pt")
