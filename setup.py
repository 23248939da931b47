from pathlib import Path

from setuptools import find_packages, setup

COMMANDS = {
    "vaswani-train": "train",
    "vaswani-train-tokenizer": "train_tokenizer",
    "vaswani-translate": "translate",
    "vaswani-evaluate": "evaluate",
    "vaswani-average": "average",
    "vaswani-plot-attention": "plot_attention",
    "vaswani-push": "push",
    "vaswani-ablate": "ablate",
    "vaswani-convert": "convert",
    "vaswani-export-ctranslate2": "export_ctranslate2",
}

setup(
    name="modeling_vaswani",
    version="0.1.0",
    description='The original Transformer ("Attention Is All You Need", Vaswani et al. 2017) as a Hugging Face model',
    long_description=Path(__file__).with_name("README.md").read_text(encoding="utf-8"),
    long_description_content_type="text/markdown",
    license="Apache-2.0",
    packages=find_packages(include=["modeling_vaswani", "modeling_vaswani.*"]),
    package_data={
        "modeling_vaswani.toolkit": ["corpora/multi30k/*", "model_cards/*.md", "metrics/*/*.py"],
    },
    entry_points={
        "console_scripts": [
            f"{name} = modeling_vaswani.toolkit.commands.{module}:main" for name, module in COMMANDS.items()
        ]
    },
    python_requires=">=3.10",
    install_requires=[
        "torch>=2.4",
        # The range CI tests: 5.23 is both the lower bound and the newest release. The paper's decoding hooks into
        # transformers' beam search and refuses to run if a release stops calling those hooks (generation_vaswani.py).
        "transformers>=5.23,<5.24",
        "huggingface-hub>=1.0",
        "safetensors>=0.4",
    ],
    extras_require={
        "train": [
            "datasets>=3.0",
            "evaluate>=0.4.3",
            "sacrebleu>=2.4",
            "accelerate>=1.0",
            "tokenizers>=0.21",
            "tqdm>=4.60",  # progress bars over translation (toolkit/translation.py)
            "tensorboard>=2.15",
            "matplotlib>=3.8",
        ],
        "dev": ["pytest>=8.0", "ruff>=0.6", "tox>=4.0", "build>=1.0"],
        "ctranslate2": ["ctranslate2>=4.0"],  # vaswani-export-ctranslate2 and --engine ctranslate2
        "bench": ["ctranslate2>=4.0"],  # benchmarks/benchmark.py's third implementation, and the export
        "deepspeed": ["deepspeed>=0.15"],  # scripts/accelerate/deepspeed_zero2.yaml
        "convert": ["sentencepiece>=0.2"],  # MarianTokenizer, for vaswani-convert marian (toolkit/convert_marian.py)
    },
)
