"""The browser page of `vaswani-export-onnx --web`, in a real headless Chromium (Selenium with Debian's chromium and
chromium-driver) and transformers.js in Node (onnxruntime-node), on 20 test2016 sentences: by default both decode
with Section 6.1's beam search of the page's beam.js, and give the token ids of the Python onnxruntime engine's
(`OnnxRuntimeModel`, the payload's search) and of the PyTorch checkpoint's paper decoding; greedily, those of a plain
greedy onnxruntime loop in Python (greedy_reference.py). The page fetches nothing from outside its folder, says what
it loads and which decoding runs, and names a missing or a truncated model file. One export, served once, for every
test here."""

import functools
import http.server
import json
import shutil
import subprocess
import threading
import time
from pathlib import Path

import pytest
from greedy_reference import GreedyOnnx
from helpers.onnx_export import built_onnx_export, tiny_onnx_export
from transformers import AutoTokenizer

from modeling_vaswani.toolkit.data.corpora import multi30k_files, read_sentences

webdriver = pytest.importorskip("selenium.webdriver", reason="no Selenium: pip install -e '.[dev]'")
NODE_MODULES = Path(__file__).parents[3] / "modeling_vaswani/toolkit/web/node_modules"
if not (shutil.which("chromium") and shutil.which("chromedriver") and shutil.which("node")):
    pytest.skip("no Chromium or Node: apt-get install chromium chromium-driver nodejs", allow_module_level=True)
if not NODE_MODULES.is_dir():
    pytest.skip(f"no transformers.js: npm ci --prefix {NODE_MODULES.parent}", allow_module_level=True)

pytestmark = pytest.mark.slow  # the session's one ONNX export of a tiny model, if no test made it before
HERE = Path(__file__).parent


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """(the served root's URL, its folder): model/, the export with its page; missing/ and truncated/, copies
    without onnx/decoder_model_merged.onnx and with onnx/encoder_model.onnx cut to half its bytes."""
    root = tmp_path_factory.mktemp("site")
    tiny_onnx_export(root / "model")
    shutil.copytree(root / "model", root / "missing")
    (root / "missing/onnx/decoder_model_merged.onnx").unlink()
    shutil.copytree(root / "model", root / "truncated")
    encoder = root / "truncated/onnx/encoder_model.onnx"
    encoder.write_bytes(encoder.read_bytes()[: encoder.stat().st_size // 2])
    for name in ("model", "missing", "truncated"):
        (root / name / "node_modules").symlink_to(NODE_MODULES)  # what `npm ci` in the folder installs
    handler = functools.partial(Quiet, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}", root
    server.shutdown()


class Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *arguments):
        pass


@pytest.fixture(scope="module")
def sentences():
    return read_sentences(multi30k_files("test")["en"])[:20]


@pytest.fixture(scope="module")
def reference(site, sentences):
    greedy = GreedyOnnx(site[1] / "model")
    return [greedy.translate(line) for line in sentences]


# Hostile lines for the beam search: an empty line (the tokenizer's </s> alone) and a run of one word.
HOSTILE = ["", " ".join(["the"] * 30)]


def end_token(folder: Path) -> int:
    return json.loads((folder / "generation_config.json").read_text())["eos_token_id"]


def engine_beam(folder: Path, lines: list[str], max_new_tokens: int | None = None) -> list[dict]:
    """The Python onnxruntime engine's best hypothesis of Section 6.1's search (the export's beam 4 and alpha 0.6),
    one sentence at a time as beam.js runs them: {'ids': the start token first, 'score'}."""
    from modeling_vaswani.toolkit.translation.onnxruntime import OnnxRuntimeModel

    engine = OnnxRuntimeModel(folder)
    assert (engine.num_beams, engine.length_penalty) == (4, 0.6)  # the paper's, which the page reads from the folder
    tokenizer = AutoTokenizer.from_pretrained(folder)
    start = engine.generation_config.decoder_start_token_id
    found = []
    for line in lines:
        batch = tokenizer([line], return_tensors="pt")
        [[(ids, score)]] = engine.generate_nbest(batch.input_ids, batch.attention_mask, max_new_tokens=max_new_tokens)
        found.append({"ids": [start, *ids], "score": score})
    return found


@pytest.fixture(scope="module")
def beam_reference(site, sentences):
    return engine_beam(site[1] / "model", sentences + HOSTILE)


def node(folder: Path, lines: list[str], *mode: str) -> tuple[list[dict], float]:
    """translate.mjs's results and its seconds translating (loading not counted)."""
    done = subprocess.run(
        ["node", str(HERE / "translate.mjs"), str(folder), *mode],
        input=json.dumps(lines),
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    return json.loads(done.stdout), json.loads(done.stderr.strip().splitlines()[-1])["seconds"]


def same_search(found: list[dict], expected: list[dict]) -> None:
    """Token ids equal sentence by sentence; scores (log P / lp) within float32 arithmetic's reach of each other."""
    assert [row["ids"] for row in found] == [row["ids"] for row in expected]
    assert [row["score"] for row in found] == pytest.approx([row["score"] for row in expected], abs=1e-4)


@pytest.fixture(scope="module")
def browser():
    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium")
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1000,800"):
        options.add_argument(argument)
    driver = webdriver.Chrome(options=options, service=webdriver.ChromeService(shutil.which("chromedriver")))
    driver.set_script_timeout(180)
    # Every text the status line shows, recorded from before the page's own script runs.
    driver.execute_cdp_cmd(
        "Page.addScriptToEvaluateOnNewDocument",
        {
            "source": "window.statuses = []; new MutationObserver(() => { const s = document.getElementById('status');"
            " if (s && window.statuses.at(-1) !== s.textContent) window.statuses.push(s.textContent); })"
            ".observe(document, {subtree: true, childList: true, characterData: true});"
        },
    )
    yield driver
    driver.quit()


def opened(browser, url: str) -> dict:
    """The page at `url` once it is ready or has failed: {'ready': bool, 'status': the status line's text}."""
    browser.get(url)
    return browser.execute_async_script(
        "const done = arguments[0]; const wait = () => window.vaswaniPage ? done({ready: !window.vaswaniPage.error,"
        " status: document.getElementById('status').textContent, error: document.getElementById('status')"
        ".classList.contains('error')}) : setTimeout(wait, 100); wait();"
    )


def page_translations(browser, lines: list[str], options: dict | None = None) -> tuple[list[dict], float]:
    """The open page's translations of `lines` (window.vaswaniPage.translate) and the seconds they took."""
    done = browser.execute_async_script(
        "const done = arguments[2]; const began = performance.now(); window.vaswaniPage.translate(arguments[0],"
        " arguments[1] ?? undefined).then(results => done({results, seconds: (performance.now() - began) / 1000}),"
        " e => done({error: String(e)}));",
        lines,
        options,
    )
    assert "error" not in done, done.get("error")
    return done["results"], done["seconds"]


def test_the_page_translates_as_onnxruntime_in_python_and_fetches_only_its_folder(
    site, browser, sentences, reference, beam_reference
):
    url, _ = site
    page = opened(browser, f"{url}/model/index.html")
    assert page["ready"], page["status"]
    assert page["status"] == (
        "Ready: the model runs in this browser, with Section 6.1's beam search (beam 4, length penalty 0.6)."
    )
    loading = [text for text in browser.execute_script("return window.statuses") if text.startswith("Loading")]
    assert loading and all(" MB" in text for text in loading)  # the size, while it loads
    shown, _ = page_translations(browser, sentences, {"numBeams": 1})
    assert shown == reference
    shown, seconds = page_translations(browser, sentences)  # the folder's decoding: beam 4, alpha 0.6
    same_search(shown, beam_reference[: len(sentences)])
    print(f"page, beam 4: {seconds / len(sentences):.3f} s a sentence")
    # An empty line stays empty on the page (nothing to translate); the run of one word is translated.
    shown, _ = page_translations(browser, HOSTILE)
    assert shown[0] == {"text": "", "ids": []}
    same_search(shown[1:], beam_reference[len(sentences) + 1 :])
    fetched = browser.execute_script("return performance.getEntriesByType('resource').map(e => e.name)")
    assert any(name.endswith(".wasm") for name in fetched)
    assert f"{url}/model/beam.js" in fetched
    assert all(name.startswith(url + "/") for name in fetched)


def test_the_page_says_which_decoding_runs(site, browser):
    opened(browser, f"{site[0]}/model/index.html")
    choice = browser.find_element("id", "decoding")
    assert choice.get_attribute("value") == "paper"
    browser.execute_script("arguments[0].value = 'greedy'; arguments[0].dispatchEvent(new Event('change'))", choice)
    assert browser.find_element("id", "status").text == "Ready: the model runs in this browser, with greedy decoding."
    browser.find_element("id", "translate").click()
    waited, status = time.monotonic(), lambda: browser.find_element("id", "status").text
    while not status().startswith("Ready: the model runs in this browser; translated"):
        assert time.monotonic() - waited < 60, status()
        time.sleep(0.1)
    assert "Translating with greedy decoding…" in browser.execute_script("return window.statuses")
    assert status().startswith("Ready: the model runs in this browser; translated with greedy decoding in ")
    assert browser.find_element("id", "output").text  # the example sentence, translated


def test_transformers_js_in_node_translates_as_onnxruntime_in_python(site, sentences, reference):
    assert node(site[1] / "model", sentences)[0] == reference


def test_the_beam_search_in_node_is_the_python_engine_s_and_pytorch_s(site, sentences, beam_reference):
    """beam.js under onnxruntime-node against the Python engine (both on the export), and against the PyTorch
    checkpoint the export was made from (the payload's search on the model itself, a second reference)."""
    from modeling_vaswani.toolkit.translation.engines import load_translator

    found, seconds = node(site[1] / "model", sentences + HOSTILE, "paper")
    print(f"Node, beam 4: {seconds / len(found):.3f} s a sentence")
    same_search(found, beam_reference)
    # The empty line (</s> alone) runs to its limit, 1 + 50 tokens after the start, without </s>: the limit's path.
    empty = found[len(sentences)]["ids"]
    assert len(empty) == 1 + 1 + 50 and end_token(site[1] / "model") not in empty
    model, tokenizer = load_translator(str(built_onnx_export()[0]))
    # One padded batch: the search is per sentence (a finished sentence leaves the batch), and one call is ~20 times
    # fewer steps than one a sentence.
    batch = tokenizer(sentences + HOSTILE, return_tensors="pt", padding=True)
    generated = model.generate(**batch, num_beams=4, paper_decoding=True)
    end, pad, pytorch = model.generation_config.eos_token_id, model.generation_config.pad_token_id, []
    for ids in generated.tolist():
        while ids[-1] == pad:  # the batch's padding after a shorter translation
            ids.pop()
        pytorch.append(ids[: ids.index(end) + 1] if end in ids else ids)
    assert [row["ids"] for row in found] == pytorch


def test_the_beam_search_stops_at_the_length_limit_as_the_python_engine_s(site, sentences):
    """A cap of 3 new tokens (the limit, lowered as max_new_tokens lowers Section 6.1's source + 50): every
    continuation ends there, so the search ends with the best of the first k candidates ranked with those finished
    before."""
    lines = sentences[:5]
    found, _ = node(site[1] / "model", lines, "paper", "3")
    expected = engine_beam(site[1] / "model", lines, max_new_tokens=3)
    same_search(found, expected)
    end = end_token(site[1] / "model")
    assert any(len(row["ids"]) == 4 and row["ids"][-1] != end for row in found)  # one stopped by the limit, no </s>
    assert all(row["steps"] <= 3 for row in found)


@pytest.mark.parametrize(
    "folder, message",
    [
        ("missing", "the model file onnx/decoder_model_merged.onnx is missing (HTTP 404)"),
        ("truncated", "the model file onnx/encoder_model.onnx is damaged"),
    ],
)
def test_a_missing_or_damaged_model_file_is_named(site, browser, folder, message):
    page = opened(browser, f"{site[0]}/{folder}/index.html")
    assert not page["ready"] and page["error"]
    assert page["status"].startswith("The model cannot be used: " + message)
