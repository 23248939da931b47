"""vaswani-serve for real: the server started on 127.0.0.1 (a free port) in its own process with a tiny model;
translations equal vaswani-translate's library, concurrent clients all answered and batched, bad requests 4xx."""

import json
import re
import threading
import urllib.error
import urllib.request

import pytest
import torch
from helpers.training_setup import TINY_PAIRS

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

from modeling_vaswani.toolkit.translation.alignment import translate_aligned  # noqa: E402
from modeling_vaswani.toolkit.translation.engines import load_translator  # noqa: E402
from modeling_vaswani.toolkit.translation.translate import translate, translate_nbest  # noqa: E402

SENTENCES = [source for source, _ in TINY_PAIRS]
REFERENCES = [target for _, target in TINY_PAIRS]  # what the served model learned


def post(url: str, body) -> tuple[int, dict]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def test_translations_are_the_librarys(server, checkpoint):
    model, tokenizer = load_translator(str(checkpoint))
    expected = translate(model, tokenizer, SENTENCES, progress=False)
    assert expected == REFERENCES  # the model learned them: an expectation known in advance
    status, body = post(f"{server}/translate", {"text": SENTENCES})
    assert status == 200 and body["translations"] == expected
    status, body = post(f"{server}/translate", {"text": SENTENCES[0]})
    assert status == 200 and body["translations"] == expected[0]


def get(url: str) -> tuple[int, bytes]:
    with urllib.request.urlopen(url, timeout=60) as response:
        return response.status, response.read()


def get_json(url: str) -> tuple[int, dict]:
    status, body = get(url)
    return status, json.loads(body)


OPTIONS = {  # each request's options, as the library's keyword arguments
    "stock beam search": {"num_beams": 2, "paper_decoding": False},
    "greedy": {"num_beams": 1},
    "n-best": {"num_beams": 3, "nbest": 3},
    "prefixes": {"target_prefix": ["Ein", "", "Ein Mädchen"]},
}


@pytest.mark.parametrize("engine", ["pytorch", "ctranslate2"])
@pytest.mark.parametrize("options", OPTIONS.values(), ids=OPTIONS.keys())
def test_options_give_the_librarys_translations(server, checkpoint, exported, engine, options):
    if engine == "ctranslate2" and exported is None:
        pytest.skip("CTranslate2 is not installed (pip install modeling_vaswani[ctranslate2])")
    name = str(checkpoint if engine == "pytorch" else exported)
    model, tokenizer = load_translator(name)
    settings = {k: v for k, v in options.items() if k not in ("nbest", "target_prefix")}
    prefixes = options.get("target_prefix")
    if "nbest" in options:
        lists = translate_nbest(
            model, tokenizer, SENTENCES, options["nbest"], max_new_tokens=8, progress=False, **settings
        )
        expected = [[(h.text, pytest.approx(h.score, abs=1e-4)) for h in hypotheses] for hypotheses in lists]
    else:
        expected = translate(
            model, tokenizer, SENTENCES, target_prefixes=prefixes, max_new_tokens=8, progress=False, **settings
        )
    status, body = post(f"{server}/translate", {"text": SENTENCES, "model": name, "max_new_tokens": 8, **options})
    assert status == 200, body
    got = body["translations"]
    if "nbest" in options:
        got = [[(h["translation"], h["score"]) for h in hypotheses] for hypotheses in got]
    assert got == expected
    if prefixes:
        assert all(text.startswith(prefix) for text, prefix in zip(got, prefixes, strict=True))


def forward_log_probs(model, tokenizer, source: str, target: str) -> float:
    """log P(target | source): one forward pass, written here apart from scoring.score."""
    batch = tokenizer(source, text_target=target, return_tensors="pt")
    with torch.no_grad():
        logits = model(input_ids=batch["input_ids"], labels=batch["labels"]).logits
    return logits.log_softmax(-1)[0].gather(-1, batch["labels"][0][:, None]).sum().item()


@pytest.mark.parametrize("engine", ["pytorch", "ctranslate2"])
def test_scores_are_a_forward_pass(server, checkpoint, exported, engine):
    if engine == "ctranslate2" and exported is None:
        pytest.skip("CTranslate2 is not installed (pip install modeling_vaswani[ctranslate2])")
    model, tokenizer = load_translator(str(checkpoint))
    model.eval()
    targets = ["Ein Mann singt.", *REFERENCES[1:]]  # a translation it would not give, and two it would
    name = str(checkpoint if engine == "pytorch" else exported)
    status, body = post(f"{server}/score", {"source": SENTENCES, "target": targets, "model": name})
    assert status == 200, body
    for scored, source, target in zip(body["scores"], SENTENCES, targets, strict=True):
        assert scored["total"] == pytest.approx(forward_log_probs(model, tokenizer, source, target), abs=1e-3)
        assert len(scored["log_probs"]) == len(scored["tokens"]) == len(tokenizer(text_target=target)["input_ids"])


def test_attention_is_equation_1(server, checkpoint):
    """Every head of every layer against softmax(QK^T / sqrt(d_k)) computed here from the layer's inputs."""
    model, tokenizer = load_translator(str(checkpoint))
    model.eval()
    status, body = post(f"{server}/attention", {"text": SENTENCES[0]})
    assert status == 200, body
    source = tokenizer(SENTENCES[0], return_tensors="pt")
    with torch.no_grad():
        target = model.generate(**source, paper_decoding=True)[:, :-1]
    assert len(body["source_tokens"]) == source["input_ids"].shape[1]
    assert len(body["target_tokens"]) == target.shape[1]
    inputs = {}  # each attention module's query and key inputs, caught on their way in
    hooks = [
        module.register_forward_pre_hook(
            lambda module, args, kwargs, name=name: inputs.__setitem__(
                name, (args[0] if args else kwargs["hidden_states"], kwargs.get("key_value_states"))
            ),
            with_kwargs=True,
        )
        for name, module in model.named_modules()
        if name.endswith(("self_attn", "cross_attn"))
    ]
    with torch.no_grad():
        model(**source, decoder_input_ids=target)
    for hook in hooks:
        hook.remove()
    stacks = {
        "encoder": ("encoder", "self_attn"),
        "decoder": ("decoder", "self_attn"),
        "cross": ("decoder", "cross_attn"),
    }
    config = model.config
    for kind, (stack, attention) in stacks.items():
        assert len(body[kind]) == config.num_layers if hasattr(config, "num_layers") else True
        for layer, maps in enumerate(body[kind]):
            module = model.get_submodule(f"model.{stack}.layers.{layer}.{attention}")
            queries, keys = inputs[f"model.{stack}.layers.{layer}.{attention}"]
            keys = queries if keys is None else keys
            with torch.no_grad():
                q = module.w_q(queries)[0].view(queries.shape[1], config.num_heads, -1).transpose(0, 1)
                k = module.w_k(keys)[0].view(keys.shape[1], config.num_heads, -1).transpose(0, 1)
                logits = q @ k.transpose(1, 2) / config.d_k**0.5
                if kind == "decoder":  # Section 3.2.3: no position attends to later ones
                    logits = logits.masked_fill(torch.ones_like(logits[0]).triu(1).bool(), float("-inf"))
            expected = logits.softmax(-1)
            assert torch.allclose(torch.tensor(maps), expected, atol=1e-5), (kind, layer)


def test_a_ctranslate2_export_has_no_attention_to_show(server, exported):
    if exported is None:
        pytest.skip("CTranslate2 is not installed (pip install modeling_vaswani[ctranslate2])")
    status, body = post(f"{server}/attention", {"text": SENTENCES[0], "model": str(exported)})
    assert (status, body["error"]["field"]) == (422, "model"), body
    assert f"{exported} runs on CTranslate2, which does not give them" in body["error"]["message"], body


def test_docs_are_served_without_a_cdn(server):
    """/docs's Swagger UI takes its script and style from this server: nothing downloaded, offline as users are."""
    status, page = get(f"{server}/docs")
    assert status == 200
    sources = re.findall(r"(?:src|href)=[\"']([^\"']+)", page.decode())
    assert any(source.endswith("swagger-ui-bundle.js") for source in sources), sources
    for source in sources:
        assert source.startswith("/"), f"/docs loads {source} from elsewhere"
        assert get(server + source)[0] == 200
    status, schema = get(f"{server}/openapi.json")
    assert {"/translate", "/score", "/attention", "/health"} <= set(json.loads(schema)["paths"])


@pytest.mark.slow  # over 5 s on 2 busy cores (2026-11-26)
def test_concurrent_clients_are_answered_and_batched(server, checkpoint):
    model, tokenizer = load_translator(str(checkpoint))
    sentences = [f"A man number {i} rides a bike." for i in range(50)]
    expected = translate(model, tokenizer, sentences, batch_size=1, max_new_tokens=6, progress=False)
    with urllib.request.urlopen(f"{server}/health") as response:
        before = json.loads(response.read())["batches"]
    answers = [None] * len(sentences)

    def ask(i):
        answers[i] = post(f"{server}/translate", {"text": sentences[i], "max_new_tokens": 6})

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(len(sentences))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert [answer[1]["translations"] for answer in answers] == expected
    with urllib.request.urlopen(f"{server}/health") as response:
        batches = json.loads(response.read())["batches"] - before
    assert batches < len(sentences) // 2, batches  # requests shared batches


@pytest.mark.parametrize(
    ("body", "status", "field_name"),
    [
        (b"{not json", 400, "body"),
        ({"text": "", "split_sentences": False}, 422, "text"),  # one sentence a text: an empty one is refused
        ({"text": [" "], "split_sentences": False}, 422, "text"),
        ({"text": "A dog.", "split_sentences": "no"}, 422, "split_sentences"),
        ({"text": ["A dog. A cat."], "num_beams": 2, "nbest": 2}, 422, "text"),  # n-best of a paragraph
        ({"text": ["A dog.", " "], "target_prefix": ["", "Ein"]}, 422, "target_prefix"),  # for a blank text
        ({"text": ["A dog."], "num_beams": "four"}, 422, "num_beams"),
        ({"text": ["A dog."], "nbest": 0}, 422, "nbest"),
        ({"text": ["A dog."], "unknown": 1}, 422, "unknown"),
        ({"text": "A dog.", "model": "nowhere"}, 404, "model"),
        ({"text": "dog " * 5000}, 422, "text"),
        ({"text": ["A dog.", "A cat."], "target_prefix": ["Ein"]}, 422, "target_prefix"),
        ({"text": "A dog.", "target_prefix": "Ein " * 300}, 422, "target_prefix"),  # no room left to translate
        ({"text": "A dog.", "num_beams": 2, "nbest": 3}, 422, "nbest"),
        ({"text": "A dog.", "max_new_tokens": 10**9, "paper_decoding": False}, 422, "max_new_tokens"),
        ({"text": "A dog.", "paper_decoding": "yes"}, 422, "paper_decoding"),
        ({"text": "A dog.", "num_beams": "4"}, 422, "num_beams"),
        ({"text": None}, 422, "text"),
        ({"text": ["A dog."] * 300}, 422, "text"),
        ([1, 2], 422, "body"),
    ],
)
def test_bad_requests_get_a_4xx_naming_the_field(server, body, status, field_name):
    got, answer = post(f"{server}/translate", body)
    assert (got, answer["error"]["field"]) == (status, field_name), answer


@pytest.mark.parametrize(
    ("path", "body", "status", "field_name"),
    [
        ("score", {"source": ["A dog."], "target": ["Ein Hund.", "Eine Katze."]}, 422, "target"),
        ("score", {"source": ["A dog."], "target": [" "]}, 422, "target"),
        ("score", {"source": [""], "target": ["Ein Hund."]}, 422, "source"),
        ("score", {"source": ["A dog."], "target": ["Ein Hund."], "model": "nowhere"}, 404, "model"),
        ("score", {"source": "A dog.", "target": ["Ein Hund."]}, 422, "source"),
        ("attention", {"text": ""}, 422, "text"),
        ("attention", {"text": "dog " * 5000}, 422, "text"),
        ("attention", {"text": ["A dog."]}, 422, "text"),
    ],
)
def test_bad_score_and_attention_requests_get_a_4xx(server, path, body, status, field_name):
    got, answer = post(f"{server}/{path}", body)
    assert (got, answer["error"]["field"]) == (status, field_name), answer


def test_texts_over_max_input_tokens_are_refused_not_cut(server, checkpoint, max_input_tokens):
    """The server's --max_input_tokens, for every endpoint."""
    _, tokenizer = load_translator(str(checkpoint))
    text = " ".join(["a dog runs"] * 40)  # one sentence (split into sentences, "A dog runs." * 40 would be 40)
    assert len(tokenizer(text)["input_ids"]) > max_input_tokens
    for path, body, field_name in (
        ("translate", {"text": text}, "text"),
        ("score", {"source": [text], "target": ["Ein Hund."]}, "source"),
        ("score", {"source": ["A dog."], "target": [text]}, "target"),
        ("attention", {"text": text}, "text"),
    ):
        status, answer = post(f"{server}/{path}", body)
        assert (status, answer["error"]["field"]) == (422, field_name), answer
        assert f"limit of {max_input_tokens}" in answer["error"]["message"]


# ---------------------------------------------------------------------------------------------------------------------
# Paragraphs: each text split into sentences, translated, and joined with its own spacing
# ---------------------------------------------------------------------------------------------------------------------

# Texts made of the sentences the served model learned, as templates: filled with the sentences they are the text,
# filled with those sentences' translations (each translated alone) they are what must come back.
TEMPLATES = ["{0}  {1}", "", "\t{2} {0} ", "   ", "{1}\n\n{2}"]  # a blank line inside the last text


def paragraph_texts(parts: list[str]) -> list[str]:
    return [template.format(*parts) if template.strip() else template for template in TEMPLATES]


@pytest.mark.parametrize("engine", ["pytorch", "ctranslate2"])
def test_a_paragraph_comes_back_as_its_sentences_translations_joined(server, checkpoint, exported, engine):
    if engine == "ctranslate2" and exported is None:
        pytest.skip("CTranslate2 is not installed (pip install modeling_vaswani[ctranslate2])")
    name = str(checkpoint if engine == "pytorch" else exported)
    model, tokenizer = load_translator(name)
    alone = translate(model, tokenizer, SENTENCES, batch_size=1, split_sentences=False, progress=False)
    if engine == "pytorch":
        assert alone == REFERENCES  # what the model learned: the references known in advance
    texts = paragraph_texts(SENTENCES)
    expected = [text if text.strip() else "" for text in paragraph_texts(alone)]
    status, body = post(f"{server}/translate", {"text": texts, "model": name})
    assert status == 200, body
    assert body["translations"] == expected  # one per text, blank texts empty
    assert expected[0] == f"{alone[0]}  {alone[1]}" and expected[3] == ""
    status, body = post(f"{server}/translate", {"text": texts[0], "model": name})
    assert status == 200 and body["translations"] == expected[0]
    status, body = post(f"{server}/translate", {"text": ["  ", ""], "model": name})
    assert status == 200 and body["translations"] == ["", ""]
    assert translate(model, tokenizer, texts, progress=False) == expected  # the library's, as ever


def test_split_sentences_false_translates_each_text_whole(server, checkpoint):
    model, tokenizer = load_translator(str(checkpoint))
    texts = [paragraph_texts(SENTENCES)[0], SENTENCES[2]]
    whole = translate(model, tokenizer, texts, split_sentences=False, max_new_tokens=12, progress=False)
    status, body = post(f"{server}/translate", {"text": texts, "split_sentences": False, "max_new_tokens": 12})
    assert status == 200 and body["translations"] == whole
    assert whole[0] != paragraph_texts(REFERENCES)[0], "a paragraph read as one sentence: not what splitting gives"


def test_a_sentence_over_the_limit_is_named_by_its_text_and_first_words(server, max_input_tokens):
    long = " ".join(["a dog runs"] * 40) + "."
    status, answer = post(f"{server}/translate", {"text": [SENTENCES[0], f"{SENTENCES[1]} {long}"]})
    assert (status, answer["error"]["field"]) == (422, "text"), answer
    message = answer["error"]["message"]
    assert message.startswith("text 2, sentence 2 ('a dog runs a ...') is "), message
    assert f"more than the limit of {max_input_tokens}" in message and "in texts [2]" in message
    status, answer = post(f"{server}/translate", {"text": "A dog runs. A cat sits.", "nbest": 2, "num_beams": 2})
    assert status == 422 and "text 1 holds 2 sentences" in answer["error"]["message"]
    assert "split_sentences" in answer["error"]["message"]


def test_a_prefix_starts_a_texts_first_sentence(server, checkpoint):
    model, tokenizer = load_translator(str(checkpoint))
    body = {
        "text": [paragraph_texts(SENTENCES)[0], SENTENCES[2]],
        "target_prefix": ["Ein Mann", ""],
        "max_new_tokens": 8,
    }
    status, answer = post(f"{server}/translate", body)
    assert status == 200, answer
    first = translate(
        model, tokenizer, [SENTENCES[0], SENTENCES[1], SENTENCES[2]], target_prefixes=["Ein Mann", "", ""],
        split_sentences=False, max_new_tokens=8, progress=False,
    )  # fmt: skip
    assert answer["translations"] == [f"{first[0]}  {first[1]}", first[2]]


# ---------------------------------------------------------------------------------------------------------------------
# Word alignments: "alignments": true answers each text's pairs, in the text's and its translation's word positions
# ---------------------------------------------------------------------------------------------------------------------


def test_alignments_are_the_librarys_in_each_texts_words(server, checkpoint):
    """The library's (translate_aligned: tests/toolkit/translation/test_translate_aligned.py checks it against each
    sentence aligned alone), for paragraphs, blank texts and one text; none without the field."""
    model, tokenizer = load_translator(str(checkpoint))
    texts = paragraph_texts(SENTENCES)
    expected = translate_aligned(model, tokenizer, texts, progress=False)
    status, body = post(f"{server}/translate", {"text": texts, "alignments": True})
    assert status == 200, body
    assert (
        body["translations"]
        == [line.text for line in expected]
        == [text if text.strip() else "" for text in paragraph_texts(REFERENCES)]
    )
    assert body["alignments"] == [[list(pair) for pair in line.alignment] for line in expected]
    assert body["alignments"][1] == body["alignments"][3] == []  # blank texts
    for text, translation, pairs in zip(texts, body["translations"], body["alignments"], strict=True):
        assert [t for _, t in pairs] == list(range(len(translation.split())))  # every target word once, in order
        assert all(s < len(text.split()) for s, _ in pairs)
    status, body = post(f"{server}/translate", {"text": texts[0], "alignments": True})
    assert status == 200 and body["alignments"] == [list(pair) for pair in expected[0].alignment]
    whole = translate_aligned(model, tokenizer, texts[:1], split_sentences=False, progress=False)
    status, body = post(f"{server}/translate", {"text": texts[:1], "alignments": True, "split_sentences": False})
    assert status == 200 and body["alignments"] == [[list(pair) for pair in whole[0].alignment]]
    status, body = post(f"{server}/translate", {"text": texts})
    assert status == 200 and "alignments" not in body


def test_alignments_are_refused_where_they_cannot_be_made(server, exported):
    status, answer = post(f"{server}/translate", {"text": "A dog.", "alignments": "yes"})
    assert (status, answer["error"]["field"]) == (422, "alignments"), answer
    status, answer = post(f"{server}/translate", {"text": "A dog.", "alignments": True, "nbest": 2, "num_beams": 2})
    assert (status, answer["error"]["field"]) == (422, "alignments"), answer
    assert "alignments are of each input's one translation" in answer["error"]["message"]
    _, health = get_json(f"{server}/health")
    if exported is None:
        pytest.skip("CTranslate2 is not installed (pip install modeling_vaswani[ctranslate2])")
    assert health["aligning"] == [health["models"][0]]  # the checkpoint, not its export
    status, answer = post(f"{server}/translate", {"text": "A dog.", "alignments": True, "model": str(exported)})
    assert (status, answer["error"]["field"]) == (422, "alignments"), answer
    assert f"{exported} runs on CTranslate2, which does not give them" in answer["error"]["message"]
