"""A pushed repository loaded as a user loads it, in a fresh process where the package cannot be imported (everything
from the repository's remote code), and the local model's outputs to compare it with; for the Hub tests."""

import hashlib

from transformers import AutoModelForSeq2SeqLM, AutoTokenizer, pipeline

import modeling_vaswani  # noqa: F401  (registers the model and the pipeline in this process)

SENTENCES = ["A man in a blue shirt is riding a bike.", "Two dogs play.", "A girl in a red dress sings on a stage."]

# Loads a repository where the package cannot be imported: everything must come from the repository's remote code.
PULL_WITHOUT_PACKAGE = """
import hashlib, json, sys
sys.modules["modeling_vaswani"] = None
from huggingface_hub import HfApi, hf_hub_download
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer, pipeline

repo, sentences, with_pipeline = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3] == "pipeline"
model = AutoModelForSeq2SeqLM.from_pretrained(repo, trust_remote_code=True).eval()
tokenizer = AutoTokenizer.from_pretrained(repo, trust_remote_code=True)
batch = tokenizer(sentences, return_tensors="pt", padding=True)
translator = pipeline("vaswani-translation", model=repo, trust_remote_code=True) if with_pipeline else None
print(json.dumps({
    "files": HfApi().list_repo_files(repo),
    "config": json.load(open(hf_hub_download(repo, "config.json"))),
    "card": open(hf_hub_download(repo, "README.md"), encoding="utf-8").read(),
    "modules": [type(model).__module__, type(translator).__module__],
    "weights": {k: hashlib.sha256(v.numpy().tobytes()).hexdigest() for k, v in model.state_dict().items()},
    "generated": model.generate(**batch, paper_decoding=True).tolist(),
    "translations": translator(sentences, batch_size=2) if with_pipeline else None,
}))
"""


def weight_digests(model) -> dict:
    return {name: hashlib.sha256(tensor.numpy().tobytes()).hexdigest() for name, tensor in model.state_dict().items()}


def local_generate(folder) -> list:
    model = AutoModelForSeq2SeqLM.from_pretrained(folder).eval()
    batch = AutoTokenizer.from_pretrained(folder)(SENTENCES, return_tensors="pt", padding=True)
    return model.generate(**batch, paper_decoding=True).tolist()


def local_translations(folder) -> list:
    return pipeline("vaswani-translation", model=str(folder))(SENTENCES, batch_size=2)
