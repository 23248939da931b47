"""Checkpoint validation, model card rendering and the staging folder of the toolkit's hub module, offline."""

import json
import shutil

import pytest
import yaml
from helpers.training_setup import RESULTS, checkpoint_with_results
from huggingface_hub import ModelCard, metadata_eval_result
from transformers import AutoModelForSeq2SeqLM

from modeling_vaswani import VaswaniConfig
from modeling_vaswani.toolkit.checkpoints import CheckpointError, validate_checkpoint
from modeling_vaswani.toolkit.hub.push import (
    AUTO_MAP,
    CUSTOM_PIPELINES,
    TEMPLATE,
    EvaluationSet,
    files_to_push,
    render_model_card,
    render_template,
    stage,
    template_for,
)
from modeling_vaswani.toolkit.training.recipe import DataArguments, describe_test_set


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    return checkpoint_with_results(tmp_path_factory.mktemp("tiny") / "averaged")


@pytest.fixture
def checkpoint(saved, tmp_path):
    """A copy of the saved checkpoint, free to break."""
    return shutil.copytree(saved, tmp_path / "averaged")


def edit_json(path, **values):
    path.write_text(json.dumps({**json.loads(path.read_text()), **values}))


def front_matter(card: str) -> dict:
    return yaml.safe_load(card.split("---\n")[1])


# --- validation ---


def test_a_valid_checkpoint_counts_the_models_parameters(checkpoint):
    valid = validate_checkpoint(checkpoint)
    assert valid.parameters == AutoModelForSeq2SeqLM.from_pretrained(checkpoint).num_parameters()
    assert valid.config.d_model == 32 and valid.results == RESULTS


def test_sharded_weights_count_the_same_and_need_every_shard(checkpoint):
    unsharded = validate_checkpoint(checkpoint).parameters
    AutoModelForSeq2SeqLM.from_pretrained(checkpoint).save_pretrained(checkpoint, max_shard_size="100KB")
    (checkpoint / "model.safetensors").unlink()
    shards = sorted(checkpoint.glob("model-*.safetensors"))
    assert len(shards) > 1 and validate_checkpoint(checkpoint).parameters == unsharded
    shards[0].unlink()
    with pytest.raises(CheckpointError, match=rf"lacks 1 of the {len(shards)} shards .*{shards[0].name}"):
        validate_checkpoint(checkpoint)


@pytest.mark.parametrize(
    "fault, message",
    [
        (lambda f: shutil.rmtree(f), "is not a folder"),
        (lambda f: (f / "config.json").unlink(), "has no config.json"),
        (lambda f: (f / "config.json").write_text("{"), "config.json is not valid JSON"),
        (lambda f: edit_json(f / "config.json", model_type="marian"), "model_type is 'marian', expected 'vaswani'"),
        (
            lambda f: edit_json(f / "config.json", num_heads=5),
            r"tensor 'model.decoder.layers.0.cross_attn.w_k.weight' is \(32, 32\) but config.json .* \(40, 32\)",
        ),
        (lambda f: (f / "model.safetensors").rename(f / "weights.bin"), "has no weights: expected model.safetensors"),
        (lambda f: [(f / n).unlink() for n in ("tokenizer.json", "tokenizer_config.json")], "has no tokenizer"),
        (
            lambda f: edit_json(f / "config.json", vocab_size=500),
            "the tokenizer has 400 tokens but config.json's vocab_size is 500",
        ),
        (
            lambda f: edit_json(f / "config.json", pad_token_id=3),
            "the tokenizer's pad_token_id is 1 but config.json's is 3",
        ),
        (
            lambda f: edit_json(f / "config.json", eos_token_id=0),
            "the tokenizer's eos_token_id is 2 but config.json's is 0",
        ),
        (lambda f: (f / "results.json").write_text("[]"), "results.json holds a list; expected a JSON object"),
    ],
)
def test_invalid_checkpoints_are_refused_naming_the_fault(checkpoint, fault, message):
    fault(checkpoint)
    with pytest.raises(CheckpointError, match=message) as error:
        validate_checkpoint(checkpoint)
    assert str(checkpoint) in str(error.value)


# --- the card ---


def test_the_card_has_the_checkpoints_numbers_and_valid_metadata(checkpoint):
    card = render_model_card(validate_checkpoint(checkpoint), "user/vaswani-base-wmt14-en-de")
    assert "{{" not in card
    for row in (
        "| d_model | 32 | 512 |",
        "| d_ff | 64 | 2048 |",
        "| h (heads) | 4 | 8 |",
        "| d_k, d_v | 8, 8 | 64, 64 |",
        "| P_drop | 0.0 | 0.1 |",  # the tiny checkpoint is the small preset's, which trains without dropout
        "| shared BPE vocabulary | 400 | about 37000 |",
        f"| parameters | {validate_checkpoint(checkpoint).parameters:,} | 65M |",
        "| tokenized, compound split (the paper's measure) | 27.32 | 27.3 |",
        "| sacreBLEU (detokenized) | 26.6 | not reported; about 0.7 below the tokenized score |",
        "| chrF2, character n-gram F-score (higher is better) | 57.31 |",
        "| TER, word edits per reference word (lower is better) | 61.2 |",
    ):
        assert row in card, row
    assert "trained for 100000 steps" in card and RESULTS["test"]["tokenized_bleu_signature"] in card
    for signature in ("chrf_signature", "ter_signature"):
        assert f"`{RESULTS['test'][signature]}`" in card, signature
    assert 'pipeline("vaswani-translation", model="user/vaswani-base-wmt14-en-de", trust_remote_code=True)' in card

    metadata = ModelCard(card).data.to_dict()  # huggingface_hub's parser: raises on a malformed model-index
    assert metadata["pipeline_tag"] == "translation" and metadata["license"] == "apache-2.0"
    assert metadata["language"] == ["en", "de"] and metadata["datasets"] == ["wmt14"]
    assert metadata["tags"] == ["translation", "transformer", "vaswani"] and metadata["library_name"] == "transformers"
    sacrebleu = metadata_eval_result(
        model_pretty_name="vaswani-base-wmt14-en-de",
        task_pretty_name="Translation",
        task_id="translation",
        metrics_pretty_name="sacreBLEU",
        metrics_id="bleu",
        metrics_value=26.6,
        dataset_pretty_name="WMT14 English-German, newstest2014",
        dataset_id="wmt14",
        dataset_config="de-en",
        dataset_split="test",
    )["model-index"][0]
    index = metadata["model-index"][0]
    assert index["name"] == sacrebleu["name"] and index["results"][0]["task"] == sacrebleu["results"][0]["task"]
    assert index["results"][0]["dataset"] == sacrebleu["results"][0]["dataset"]
    first, second, chrf, ter = index["results"][0]["metrics"]
    assert first == {**sacrebleu["results"][0]["metrics"][0], "args": {"signature": RESULTS["test"]["signature"]}}
    assert second["value"] == 27.32 and second["args"] == {"signature": RESULTS["test"]["tokenized_bleu_signature"]}
    # chrF and TER as huggingface_hub itself writes a metric of those types, plus the signature.
    for entry, metric_id, name, value in ((chrf, "chrf", "chrF2", 57.31), (ter, "ter", "TER", 61.2)):
        expected = metadata_eval_result(
            model_pretty_name="vaswani-base-wmt14-en-de",
            task_pretty_name="Translation",
            task_id="translation",
            metrics_pretty_name=name,
            metrics_id=metric_id,
            metrics_value=value,
            dataset_pretty_name="WMT14 English-German, newstest2014",
            dataset_id="wmt14",
        )["model-index"][0]["results"][0]["metrics"][0]
        assert entry == {**expected, "args": {"signature": RESULTS["test"][f"{metric_id}_signature"]}}
    scores = {result.metric_name: result.metric_value for result in ModelCard(card).data.eval_results}
    assert scores == {
        "sacreBLEU": 26.6,
        "tokenized BLEU (compound split, as in the paper)": 27.32,
        "chrF2": 57.31,
        "TER": 61.2,
    }


def test_results_from_before_chrf_and_ter_give_a_card_with_bleu_alone(checkpoint):
    """A results.json written before chrF and TER joined it (BLEU only) still pushes; its card shows BLEU only."""
    results = json.loads((checkpoint / "results.json").read_text())
    for key in ("chrf", "chrf_signature", "ter", "ter_signature"):
        del results["test"][key]
    (checkpoint / "results.json").write_text(json.dumps(results))
    card = render_model_card(validate_checkpoint(checkpoint), "user/x")
    assert "{{" not in card and "| sacreBLEU (detokenized) | 26.6 |" in card
    assert "chrF" not in card and "TER" not in card
    metrics = front_matter(card)["model-index"][0]["results"][0]["metrics"]
    assert [metric["type"] for metric in metrics] == ["bleu", "bleu"]


def test_chrf_without_its_signature_or_ter_is_refused(checkpoint):
    """One of the four chrF and TER fields asks for all four: no score reaches the card without its signature."""
    results = json.loads((checkpoint / "results.json").read_text())
    del results["test"]["chrf_signature"], results["test"]["ter"]
    (checkpoint / "results.json").write_text(json.dumps(results))
    with pytest.raises(CheckpointError, match=r"results.json lacks test.chrf_signature, test.ter; expected"):
        render_model_card(validate_checkpoint(checkpoint), "user/x")


def test_without_results_the_card_is_refused_unless_asked_for_without_evaluation(checkpoint):
    (checkpoint / "results.json").unlink()
    valid = validate_checkpoint(checkpoint)
    with pytest.raises(CheckpointError, match=r"has no results.json, .* \(--no_results\)"):
        render_model_card(valid, "user/x")
    card = render_model_card(valid, "user/x", with_results=False)
    assert "{{" not in card and "## Evaluation" not in card and "BLEU" not in card.split("## Training")[0]
    assert "chrF" not in card
    assert "model-index" not in front_matter(card) and ModelCard(card).data.eval_results is None


def test_results_without_a_score_are_refused(checkpoint):
    edit_json(checkpoint / "results.json", test={"sacrebleu": 1.0})
    with pytest.raises(CheckpointError, match="results.json lacks test.signature, test.tokenized_bleu, .*"):
        render_model_card(validate_checkpoint(checkpoint), "user/x")


def test_the_card_names_the_test_set_results_json_records(checkpoint):
    def card_dataset(test_set=None):
        card = render_model_card(validate_checkpoint(checkpoint), "user/x", test_set=test_set)
        return front_matter(card)["datasets"], front_matter(card)["model-index"][0]["results"][0]["dataset"]

    files = DataArguments(
        source_lang="de", target_lang="en", test_source_file="/d/nt13.de", test_target_file="nt13.en"
    )
    edit_json(checkpoint / "results.json", test_set=describe_test_set(files))
    expected = {"type": "nt13", "name": "nt13.de + nt13.en", "config": "default", "split": "test"}
    assert card_dataset() == (["nt13"], expected)
    assert front_matter(render_model_card(validate_checkpoint(checkpoint), "user/x"))["language"] == ["de", "en"]
    edit_json(checkpoint / "results.json", test_set=describe_test_set(DataArguments()))  # the shipped Multi30k
    expected = {
        "type": "multi30k",
        "name": "Multi30k, test2016 (flickr)",
        "config": "task1",
        "split": "test_2016_flickr",
    }
    assert card_dataset() == (["multi30k"], expected)
    hub = DataArguments(dataset_name="wmt14", dataset_config_name="de-en")
    edit_json(checkpoint / "results.json", test_set=describe_test_set(hub))
    assert card_dataset() == (
        ["wmt14"],
        {"type": "wmt14", "name": "wmt14 de-en, test", "config": "de-en", "split": "test"},
    )
    given = EvaluationSet(dataset_id="other", dataset_name="Other")  # given explicitly: wins over results.json
    assert card_dataset(given)[1] == {"type": "other", "name": "Other", "config": "de-en", "split": "test"}
    edit_json(checkpoint / "results.json", test_set=describe_test_set(DataArguments()))
    # Fields named alone (vaswani-push's --dataset* flags) replace those of the recorded set, and only those.
    expected = {"type": "multi30k", "name": "Flickr test", "config": "task1", "split": "test_2016_flickr"}
    assert card_dataset({"dataset_name": "Flickr test"}) == (["multi30k"], expected)


def test_results_that_do_not_name_their_test_set_are_refused(checkpoint):
    results = json.loads((checkpoint / "results.json").read_text())
    del results["test_set"]
    (checkpoint / "results.json").write_text(json.dumps(results))
    with pytest.raises(
        CheckpointError, match=r"does not say which test set .* \(no test_set\); name it with --dataset"
    ):
        render_model_card(validate_checkpoint(checkpoint), "user/x")
    card = render_model_card(validate_checkpoint(checkpoint), "user/x", test_set=EvaluationSet())
    assert front_matter(card)["datasets"] == ["wmt14"]
    card = render_model_card(validate_checkpoint(checkpoint), "user/x", test_set={"dataset_name": "WMT14 en-de"})
    dataset = front_matter(card)["model-index"][0]["results"][0]["dataset"]  # the other fields: the paper's test set
    assert dataset == {"type": "wmt14", "name": "WMT14 en-de", "config": "de-en", "split": "test"}
    edit_json(checkpoint / "results.json", test_set={"dataset": "wmt14"})
    with pytest.raises(CheckpointError, match="test_set is not a test set's description: .*'dataset'"):
        render_model_card(validate_checkpoint(checkpoint), "user/x")


def test_values_that_need_quoting_in_yaml_come_back_unchanged(checkpoint):
    test_set = EvaluationSet(dataset_name='Multi30k: test2016 "flickr" #1', dataset_config="true")
    card = render_model_card(validate_checkpoint(checkpoint), "user/x", test_set=test_set)
    dataset = front_matter(card)["model-index"][0]["results"][0]["dataset"]
    assert dataset["name"] == test_set.dataset_name and dataset["config"] == "true"


def test_the_renderer_refuses_fields_without_a_value():
    template = "---\nlicense: {{license}}\n---\n{{#results}}\nBLEU {{bleu}}\n{{/results}}\n{{name}} and {{ other }}\n"
    with pytest.raises(CheckpointError, match=r"fields without a value: \['bleu', 'other'\]"):
        render_template(template, {"license": "mit", "name": "x", "other": None}, {"results": True})
    without = render_template(template, {"license": "mit", "name": "x", "other": 1}, {"results": False})
    assert without == '---\nlicense: "mit"\n---\nx and 1\n'
    with pytest.raises(CheckpointError, match="known sections"):
        render_template(template, {}, {})
    with pytest.raises(CheckpointError, match="template syntax left"):
        render_template("---\na: 1\n---\n{{ not a field }}\n", {}, {})


@pytest.mark.parametrize(
    "outer, inner, expected",
    [(True, True, "a\nb\nc\n"), (True, False, "a\nc\n"), (False, True, ""), (False, False, "")],
)
def test_a_block_inside_a_block_is_kept_only_when_both_conditions_hold(outer, inner, expected):
    template = "---\nx: 1\n---\n{{#outer}}\na\n{{#inner}}\nb\n{{/inner}}\nc\n{{/outer}}\n"
    card = render_template(template, {}, {"outer": outer, "inner": inner})
    assert card == "---\nx: 1\n---\n" + expected


def test_the_template_follows_the_model_size():
    assert template_for(VaswaniConfig.base()) == (TEMPLATE, "base")
    assert template_for(VaswaniConfig.big()) == (TEMPLATE, "big")
    assert template_for(VaswaniConfig.big(), "base") == (TEMPLATE, "base")
    with pytest.raises(FileNotFoundError, match="no-such-template"):
        template_for(VaswaniConfig.base(), "no-such-template")


def test_both_templates_render_with_the_papers_numbers(checkpoint):
    valid = validate_checkpoint(checkpoint)
    base, big = (render_model_card(valid, "user/x", template=name) for name in ("base", "big"))
    # The paper's column, typed here from the paper (Tables 2 and 3, Sections 5.2 and 6.1), not from the code.
    assert "| 27.3 |" in base and "| 28.4 |" in big and "| d_model | 32 | 1024 |" in big
    assert "| d_model | 32 | 512 |" in base and "| h (heads) | 4 | 16 |" in big and "| P_drop | 0.0 | 0.3 |" in big
    assert "| parameters |" in base and " | 65M |" in base and " | 213M |" in big
    assert "100k steps (12 hours" in base and "300k steps (3.5 days" in big
    assert (
        "last 5 checkpoints" in base and "last 20 checkpoints" in big and "@inproceedings{vaswani2017attention," in big
    )


# --- staging ---


def test_staging_adds_the_code_and_config_and_leaves_the_checkpoint_alone(checkpoint, tmp_path):
    (checkpoint / "checkpoint-10").mkdir()
    (checkpoint / "README.md").write_text("the Trainer's card")
    before = {path.name: path.read_bytes() for path in checkpoint.iterdir() if path.is_file()}
    staging = tmp_path / "staging"
    staging.mkdir()
    valid = validate_checkpoint(checkpoint)
    stage(valid, files_to_push(valid)[0], "the card", staging)

    assert {path.name: path.read_bytes() for path in checkpoint.iterdir() if path.is_file()} == before
    names = {path.name for path in staging.iterdir()}
    assert "checkpoint-10" not in names and (staging / "README.md").read_text() == "the card"
    assert {"configuration_vaswani.py", "modeling_vaswani.py", "pipeline_vaswani.py", "model.safetensors"} <= names
    assert (staging / "model.safetensors").read_bytes() == before["model.safetensors"]
    config = json.loads((staging / "config.json").read_text())
    assert config["auto_map"] == AUTO_MAP and config["custom_pipelines"] == CUSTOM_PIPELINES
    assert {k: v for k, v in config.items() if k not in ("auto_map", "custom_pipelines")} == {
        k: v for k, v in json.loads(before["config.json"]).items() if k not in ("auto_map", "custom_pipelines")
    }
