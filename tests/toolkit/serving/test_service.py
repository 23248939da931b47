"""The translation service built without the web app, on the tiny trained model of the folder's conftest: its answers
are the library's, requests that arrive together share one batch by their typed key, its refusals name the field,
and a client gone drops its work."""

import asyncio
import json

import pytest
from helpers.training_setup import TINY_PAIRS

pytest.importorskip("pydantic")

from modeling_vaswani.toolkit.serving.bodies import (  # noqa: E402
    AttentionRequest,
    ScoreRequest,
    TranslateRequest,
)
from modeling_vaswani.toolkit.serving.bounds import Limits  # noqa: E402
from modeling_vaswani.toolkit.serving.gate import Refused  # noqa: E402
from modeling_vaswani.toolkit.serving.service import Sentence, TranslateOptions, TranslationService  # noqa: E402
from modeling_vaswani.toolkit.serving.worker import BatchKey  # noqa: E402
from modeling_vaswani.toolkit.translation.engines import load_translator  # noqa: E402
from modeling_vaswani.toolkit.translation.request import TranslationRequest  # noqa: E402
from modeling_vaswani.toolkit.translation.scoring import score  # noqa: E402
from modeling_vaswani.toolkit.translation.translate import translate  # noqa: E402

SENTENCES = [source for source, _ in TINY_PAIRS]
REFERENCES = [target for _, target in TINY_PAIRS]  # what the model learned


@pytest.fixture(scope="module")
def loaded(checkpoint):
    return load_translator(str(checkpoint))


@pytest.fixture(scope="module")
def service(loaded):
    """The service over the tiny model, its batches waiting 300 ms for company: requests sent together meet."""
    service = TranslationService({"tiny": loaded}, Limits(window=0.3, max_texts=4), languages={"tiny": "en"})
    yield service
    assert service.close(timeout=30)


def refusal(coroutine) -> Refused:
    with pytest.raises(Refused) as refused:
        asyncio.run(coroutine)
    return refused.value


def test_translations_are_the_librarys(service, loaded):
    expected = translate(*loaded, SENTENCES, progress=False)
    assert expected == REFERENCES  # an expectation known in advance: the model learned them
    answer = asyncio.run(service.translate(TranslateRequest(text=SENTENCES)))
    assert answer == {"model": "tiny", "translations": REFERENCES}
    answer = asyncio.run(service.translate(TranslateRequest(text=SENTENCES[0], alignments=True)))
    assert answer["translations"] == REFERENCES[0] and all(len(pair) == 2 for pair in answer["alignments"])


def test_requests_of_equal_options_share_a_batch_and_others_do_not(service):
    async def together(*requests):
        return await asyncio.gather(*(service.translate(request) for request in requests))

    before = service.worker.batches
    answers = asyncio.run(together(*(TranslateRequest(text=text) for text in SENTENCES)))
    assert [answer["translations"] for answer in answers] == REFERENCES
    assert service.worker.batches == before + 1
    greedy = TranslateRequest(text=SENTENCES[0], num_beams=1)
    asyncio.run(together(TranslateRequest(text=SENTENCES[1]), greedy))
    assert service.worker.batches == before + 3


def test_a_batch_key_is_hashable_and_equal_for_equal_options():
    options = TranslateOptions.of(TranslateRequest(text="a", num_beams=2, nbest=2))
    expected = TranslateOptions(num_beams=2, paper_decoding=True, nbest=2, max_new_tokens=None, alignments=False)
    assert options == expected
    keys = {BatchKey("translate", "tiny", options), BatchKey("translate", "tiny", options), BatchKey("score", "tiny")}
    assert len(keys) == 2
    assert BatchKey("translate", "tiny", options).shares_batches and not BatchKey("score", "tiny").shares_batches
    assert Sentence("a").prefix is None and Sentence("a", "Ein").prefix == "Ein"


def test_scores_are_the_librarys(service, loaded):
    targets = ["Ein Mann singt.", *REFERENCES[1:]]
    answer = asyncio.run(service.score(ScoreRequest(source=SENTENCES, target=targets)))
    expected = score(*loaded, SENTENCES, targets, progress=False)
    assert [scored["total"] for scored in answer["scores"]] == [pytest.approx(s.total, abs=1e-4) for s in expected]
    assert [scored["tokens"] for scored in answer["scores"]] == [s.tokens for s in expected]


def test_attention_is_json_of_the_layers_and_heads_asked(service, loaded):
    model, _ = loaded
    content = asyncio.run(service.attention(AttentionRequest(text=SENTENCES[0], layers=[1], heads=[0, 2])))
    answer = json.loads(content)
    source, target = len(answer["source_tokens"]), len(answer["target_tokens"])
    assert len(answer["encoder"]) == len(answer["decoder"]) == len(answer["cross"]) == 1  # one layer
    assert [len(answer[kind][0]) for kind in ("encoder", "decoder", "cross")] == [2, 2, 2]  # two heads
    assert len(answer["encoder"][0][0]) == len(answer["encoder"][0][0][0]) == source
    assert len(answer["cross"][0][0]) == target and len(answer["cross"][0][0][0]) == source
    whole = json.loads(asyncio.run(service.attention(AttentionRequest(text=SENTENCES[0]))))
    assert len(whole["encoder"]) == model.config.encoder_layers
    assert whole["encoder"][1][2] == answer["encoder"][0][1]  # layer 1, head 2: the same weights


@pytest.mark.parametrize(
    "request_, status, field_name, words",
    [
        (TranslateRequest(text="A man.", model="other"), 404, "model", "no model named 'other'"),
        (TranslateRequest(text=["a"] * 5), 422, "text", "5 texts; expected at most 4"),
        (TranslateRequest(text="A man.", nbest=2, alignments=True), 422, "alignments", "or alignments=False"),
        (TranslateRequest(text="A man.", constraints=[["Mann"]], paper_decoding=False), 422, "constraints", "paper"),
        (TranslateRequest(text="A man.", max_new_tokens=10_000), 422, "max_new_tokens", "Section 6.1"),
        (TranslateRequest(text="A.", format="html", nbest=2), 422, "format", "expected nbest=None, or format='text'"),
        (ScoreRequest(source=["a", "b"], target=["c"]), 422, "target", "1 targets for 2 sources"),
        (AttentionRequest(text="A man.", layers=[0, 0]), 422, "layers.1", "given already as layers.0"),
        (AttentionRequest(text="A man.", heads=[9]), 422, "heads", "the model has 4"),
    ],
)
def test_refusals_name_the_field(service, request_, status, field_name, words):
    answer = {TranslateRequest: service.translate, ScoreRequest: service.score, AttentionRequest: service.attention}
    refused = refusal(answer[type(request_)](request_))
    assert (refused.status, refused.field_name) == (status, field_name)
    assert words in refused.message


def test_the_work_of_a_client_gone_is_dropped(service):
    async def gone():
        return None

    def dropped() -> float:
        return service.metrics.registry.get_sample_value("vaswani_dropped_requests_total", {"reason": "client gone"})

    refused = refusal(service.translate(TranslateRequest(text=SENTENCES), gone=gone))
    assert (refused.status, refused.field_name) == (499, "client")
    assert dropped() == 1


def test_each_request_is_checked_once_however_its_batch_is_merged(service, monkeypatch):
    """The service checks a request once, on the event loop (`check_request`); the worker runs the merged batch as a
    checked request. On 2c3ba1d each request was checked again, in the library, on its batch."""
    calls, check = [], TranslationRequest.check

    def counted(self, *args, **kwargs):
        calls.append(type(self).__name__)
        return check(self, *args, **kwargs)

    monkeypatch.setattr(TranslationRequest, "check", counted)

    async def together(*requests):
        return await asyncio.gather(*(service.translate(request) for request in requests))

    requests = [TranslateRequest(text=text, alignments=True) for text in SENTENCES[:2]]
    requests += [TranslateRequest(text=SENTENCES[2], nbest=2, num_beams=2)]
    before = service.worker.batches
    answers = asyncio.run(together(*requests))
    assert [answer["translations"] for answer in answers[:2]] == REFERENCES[:2]
    assert service.worker.batches == before + 2  # the two aligned requests shared one
    assert calls == ["TranslationRequest"] * 3
