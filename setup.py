from pathlib import Path

from setuptools import find_packages, setup

setup(
    name="modeling_vaswani",
    version="0.1.0",
    description='The original Transformer ("Attention Is All You Need", Vaswani et al. 2017) as a Hugging Face model',
    long_description=Path(__file__).with_name("README.md").read_text(encoding="utf-8"),
    long_description_content_type="text/markdown",
    license="Apache-2.0",
    packages=find_packages(include=["modeling_vaswani", "modeling_vaswani.*"]),
    package_data={"modeling_vaswani": ["metrics/*/*.py"]},
    python_requires=">=3.10",
    install_requires=[
        "torch>=2.4",
        "transformers>=5.23",
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
            "tensorboard>=2.15",
            "matplotlib>=3.8",
        ],
        "dev": ["pytest>=8.0", "ruff>=0.6", "tox>=4.0"],
        "bench": ["ctranslate2>=4.0"],  # scripts/benchmark.py's third implementation
    },
)
