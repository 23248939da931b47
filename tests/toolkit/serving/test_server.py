"""vaswani-serve for real: the server started on 127.0.0.1 (a free port) in its own process with a tiny model;
translations equal vaswani-translate's library, concurrent clients all answered and batched, bad requests 4xx."""

import json
import threading
import urllib.error
import urllib.request

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

from modeling_vaswani.toolkit.evaluation.translate import translate  # noqa: E402
from modeling_vaswani.toolkit.serving.engines import load_translator  # noqa: E402

SENTENCES = ["A man rides a bike.", "Two dogs play in the snow.", "A girl sings."]


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
    expected = translate(model, tokenizer, SENTENCES, max_new_tokens=8, progress=False)
    status, body = post(f"{server}/translate", {"text": SENTENCES, "max_new_tokens": 8})
    assert status == 200 and body["translations"] == expected
    status, body = post(f"{server}/translate", {"text": SENTENCES[0], "max_new_tokens": 8})
    assert status == 200 and body["translations"] == expected[0]


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
        ({"text": ""}, 422, "text"),
        ({"text": ["A dog."], "num_beams": "four"}, 422, "num_beams"),
        ({"text": ["A dog."], "nbest": 0}, 422, "nbest"),
        ({"text": ["A dog."], "unknown": 1}, 422, "unknown"),
        ({"text": "A dog.", "model": "nowhere"}, 404, "model"),
        ({"text": "dog " * 5000}, 422, "text"),
        ({"text": ["A dog.", "A cat."], "target_prefix": ["Ein"]}, 422, "target_prefix"),
    ],
)
def test_bad_requests_get_a_4xx_naming_the_field(server, body, status, field_name):
    got, answer = post(f"{server}/translate", body)
    assert (got, answer["error"]["field"]) == (status, field_name), answer
