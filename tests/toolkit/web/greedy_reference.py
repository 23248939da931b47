"""The reference the page and Node are held to: a second, plain greedy decoder over the exported ONNX files with
onnxruntime in Python, written here without the package's ONNX engine, with transformers.js's settings: one sentence
at a time, the decoder's start token first, the arg-max each step, at most the input's length + 50 new tokens,
stopping at the end-of-sentence token, the generation config's single-token bad words suppressed."""

import json
from pathlib import Path

import numpy as np
import onnxruntime
from transformers import AutoTokenizer

# transformers.js applies these logits processors when the generation config sets them; the reference does not, so
# a config that sets one is refused rather than compared wrongly.
UNHANDLED = {
    "repetition_penalty": 1.0,
    "no_repeat_ngram_size": 0,
    "min_length": 0,
    "min_new_tokens": None,
    "forced_bos_token_id": None,
    "forced_eos_token_id": None,
    "begin_suppress_tokens": None,
    "suppress_tokens": None,
}


class GreedyOnnx:
    def __init__(self, folder: Path):
        self.tokenizer = AutoTokenizer.from_pretrained(folder)
        config = {
            **json.loads((folder / "config.json").read_text()),
            **json.loads((folder / "generation_config.json").read_text()),
        }
        for field, neutral in UNHANDLED.items():
            assert config.get(field, neutral) == neutral, f"the reference does not apply {field}={config[field]}"
        self.start, self.end = config["decoder_start_token_id"], config["eos_token_id"]
        self.banned = [ids[0] for ids in config.get("bad_words_ids") or [] if len(ids) == 1]
        self.encoder = onnxruntime.InferenceSession(folder / "onnx/encoder_model.onnx")
        self.decoder = onnxruntime.InferenceSession(folder / "onnx/decoder_model_merged.onnx")
        self.outputs = [output.name for output in self.decoder.get_outputs()]

    def translate(self, line: str) -> dict:
        source = np.array([self.tokenizer(line)["input_ids"]], dtype=np.int64)
        mask = np.ones_like(source)
        hidden = self.encoder.run(None, {"input_ids": source, "attention_mask": mask})[0]
        past = {
            node.name: np.zeros((1, node.shape[1], 0, node.shape[3]), dtype=np.float32)
            for node in self.decoder.get_inputs()
            if node.name.startswith("past_key_values.")
        }
        tokens = [self.start]
        for step in range(source.shape[1] + 50):
            feeds = {
                "input_ids": np.array([[tokens[-1]]], dtype=np.int64),
                "encoder_attention_mask": mask,
                "encoder_hidden_states": hidden,
                "use_cache_branch": np.array([step > 0]),
                **past,
            }
            feeds = {node.name: feeds[node.name] for node in self.decoder.get_inputs()}
            out = dict(zip(self.outputs, self.decoder.run(None, feeds), strict=True))
            logits = out["logits"][0, -1]
            logits[self.banned] = -np.inf
            tokens.append(int(logits.argmax()))
            for name in past:
                present = name.replace("past_key_values", "present")
                if step == 0 or ".decoder." in name:  # the encoder's keys and values are computed at the first step
                    past[name] = out[present]
            if tokens[-1] == self.end:
                break
        return {"text": self.tokenizer.decode(tokens, skip_special_tokens=True), "ids": tokens}
