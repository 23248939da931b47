"""save_pretrained / from_pretrained: identical weights and outputs, ties and buffers restored, remote code."""

import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch
from helpers.tiny_models import padded_batch, tiny_model
from safetensors import safe_open
from test_reference import paper_positional_encoding
from transformers import AutoModel, AutoModelForSeq2SeqLM

from modeling_vaswani import VaswaniForConditionalGeneration, VaswaniModel


def saved_tensor_names(folder) -> set[str]:
    names = set()
    for file in folder.glob("*.safetensors"):
        with safe_open(file, "pt") as handle:
            names.update(handle.keys())
    return names


def assert_tied(model):
    shared = model.model.shared.weight
    assert model.lm_head.weight is shared
    assert model.model.encoder.embed_tokens.weight is shared
    assert model.model.decoder.embed_tokens.weight is shared


def generate(model):
    input_ids, attention_mask = padded_batch([6, 4])
    return model.generate(input_ids=input_ids, attention_mask=attention_mask, max_new_tokens=8)


@pytest.mark.parametrize("shard", [None, "20KB"])
def test_round_trip_identical(tmp_path, shard):
    model = tiny_model(seed=21)
    model.save_pretrained(tmp_path, **({"max_shard_size": shard} if shard else {}))
    if shard:
        assert (tmp_path / "model.safetensors.index.json").exists()
        assert len(list(tmp_path.glob("model-*.safetensors"))) > 1
    names = saved_tensor_names(tmp_path)
    assert not any("positional_encoding" in name for name in names)  # a fixed table, not a parameter
    embedding_copies = [n for n in names if n.endswith(("shared.weight", "embed_tokens.weight", "lm_head.weight"))]
    assert len(embedding_copies) == 1  # Section 3.4: one shared matrix, saved once

    loaded = AutoModelForSeq2SeqLM.from_pretrained(tmp_path).eval()
    assert type(loaded) is VaswaniForConditionalGeneration
    assert_tied(loaded)
    original = model.state_dict()
    for name, tensor in loaded.state_dict().items():
        assert torch.equal(tensor, original[name]), name
    assert torch.equal(generate(loaded), generate(model))


def test_buffers_are_rebuilt_after_from_pretrained(tmp_path):
    tiny_model(max_position_embeddings=40).save_pretrained(tmp_path)
    loaded = VaswaniForConditionalGeneration.from_pretrained(tmp_path)
    expected = paper_positional_encoding(40, loaded.config.d_model).float()
    for stack in (loaded.model.encoder, loaded.model.decoder):
        assert torch.allclose(stack.positional_encoding.table, expected, atol=1e-6)


def test_bfloat16_round_trip(tmp_path):
    model = tiny_model(seed=22).to(torch.bfloat16)
    model.save_pretrained(tmp_path)
    loaded = AutoModelForSeq2SeqLM.from_pretrained(tmp_path, dtype=torch.bfloat16).eval()
    assert loaded.dtype == torch.bfloat16
    assert_tied(loaded)
    assert all(
        torch.equal(a, b) for a, b in zip(loaded.state_dict().values(), model.state_dict().values(), strict=True)
    )
    assert torch.equal(generate(loaded), generate(model))


def test_base_model_loads_from_the_generation_checkpoint(tmp_path):
    model = tiny_model(seed=23)
    model.save_pretrained(tmp_path)
    base = AutoModel.from_pretrained(tmp_path)
    assert type(base) is VaswaniModel
    assert torch.equal(base.shared.weight, model.model.shared.weight)
    assert base.encoder.embed_tokens.weight is base.shared.weight


REMOTE_SCRIPT = textwrap.dedent(
    """
    import json, sys
    sys.modules["modeling_vaswani"] = None  # the package is not importable in this process
    import torch
    from transformers import AutoConfig, AutoModel, AutoModelForSeq2SeqLM

    folder = sys.argv[1]
    config = AutoConfig.from_pretrained(folder, trust_remote_code=True)
    base = AutoModel.from_pretrained(folder, trust_remote_code=True)
    model = AutoModelForSeq2SeqLM.from_pretrained(folder, trust_remote_code=True).eval()
    input_ids = torch.tensor([[5, 6, 7, 8, 9, 2], [10, 11, 12, 2, 1, 1]])
    generated = model.generate(input_ids=input_ids, attention_mask=input_ids.ne(1), max_new_tokens=8)
    print(json.dumps({
        "config": type(config).__module__ + "." + type(config).__name__,
        "base": type(base).__module__ + "." + type(base).__name__,
        "model": type(model).__module__ + "." + type(model).__name__,
        "tied": model.lm_head.weight is model.model.shared.weight,
        "weights": {k: v.sum().item() for k, v in model.state_dict().items()},
        "generated": generated.tolist(),
    }))
    """
)


@pytest.mark.slow  # over 5 s on 2 busy cores (2026-11-26)
def test_remote_code_loads_without_the_package(tmp_path):
    model = tiny_model(seed=24)
    model.save_pretrained(tmp_path / "checkpoint")
    folder = tmp_path / "checkpoint"
    assert {"configuration_vaswani.py", "modeling_vaswani.py"} <= {p.name for p in folder.iterdir()}
    auto_map = json.loads((folder / "config.json").read_text())["auto_map"]
    assert auto_map == {
        "AutoConfig": "configuration_vaswani.VaswaniConfig",
        "AutoModel": "modeling_vaswani.VaswaniModel",
        "AutoModelForSeq2SeqLM": "modeling_vaswani.VaswaniForConditionalGeneration",
    }
    env = {**os.environ, "HF_MODULES_CACHE": str(tmp_path / "modules"), "HF_HUB_OFFLINE": "1"}
    result = subprocess.run(
        [sys.executable, "-c", REMOTE_SCRIPT, str(folder)], capture_output=True, text=True, env=env, cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr
    remote = json.loads(result.stdout.strip().splitlines()[-1])
    for key in ("config", "base", "model"):
        assert remote[key].startswith("transformers_modules."), remote[key]  # the copied code, not the package
    assert remote["tied"]
    assert remote["weights"] == {k: v.sum().item() for k, v in model.state_dict().items()}
    input_ids = torch.tensor([[5, 6, 7, 8, 9, 2], [10, 11, 12, 2, 1, 1]])
    expected = model.generate(input_ids=input_ids, attention_mask=input_ids.ne(1), max_new_tokens=8)
    assert remote["generated"] == expected.tolist()
