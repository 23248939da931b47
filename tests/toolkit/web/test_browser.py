"""The browser page of `vaswani-export-onnx --web`, in a real headless Chromium (Selenium with Debian's chromium and
chromium-driver) and transformers.js in Node (onnxruntime-node): both translate 20 test2016 sentences as a plain
greedy onnxruntime loop in Python does (greedy_reference.py); the page fetches nothing from outside its folder, says
what it loads, and names a missing or a truncated model file. One export, served once, for every test here."""

import functools
import http.server
import json
import shutil
import subprocess
import threading
from pathlib import Path

import pytest
from greedy_reference import GreedyOnnx
from helpers.onnx_export import tiny_onnx_export

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


def test_the_page_translates_as_onnxruntime_in_python_and_fetches_only_its_folder(site, browser, sentences, reference):
    url, _ = site
    page = opened(browser, f"{url}/model/index.html")
    assert page["ready"], page["status"]
    loading = [text for text in browser.execute_script("return window.statuses") if text.startswith("Loading")]
    assert loading and all(" MB" in text for text in loading)  # the size, while it loads
    shown = browser.execute_async_script(
        "const done = arguments[1]; window.vaswaniPage.translate(arguments[0]).then(done, e => done(String(e)));",
        sentences,
    )
    assert shown == reference
    fetched = browser.execute_script("return performance.getEntriesByType('resource').map(e => e.name)")
    assert any(name.endswith(".wasm") for name in fetched)
    assert all(name.startswith(url + "/") for name in fetched)


def test_transformers_js_in_node_translates_as_onnxruntime_in_python(site, sentences, reference):
    done = subprocess.run(
        ["node", str(HERE / "translate.mjs"), str(site[1] / "model")],
        input=json.dumps(sentences),
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    assert json.loads(done.stdout) == reference


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
