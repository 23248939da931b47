"""The page vaswani-serve serves, driven in a real headless Chromium (Selenium with Debian's chromium and
chromium-driver): type sentences, read the translations, open one's attention and check a layer's heads are drawn."""

import shutil

import pytest
from conftest import running_server
from test_server import REFERENCES, SENTENCES, get_json, post

webdriver = pytest.importorskip(
    "selenium.webdriver", reason="no Selenium: pip install -e '.[dev]' for the page's tests"
)
if not (shutil.which("chromium") and shutil.which("chromedriver")):
    pytest.skip(
        "no Chromium: apt-get update && apt-get install chromium chromium-driver (and pip install selenium) to run "
        "the page's tests",
        allow_module_level=True,
    )
from selenium.webdriver.common.actions.action_builder import ActionBuilder  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import Select, WebDriverWait  # noqa: E402


@pytest.fixture(scope="module")
def browser():
    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium")
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1400,1000"):
        options.add_argument(argument)
    service = webdriver.ChromeService(executable_path=shutil.which("chromedriver"))
    driver = webdriver.Chrome(options=options, service=service)
    yield driver
    driver.quit()


def test_the_page_translates_and_draws_every_head_of_a_layer(server, browser, tmp_path):
    browser.get(server + "/")
    source = browser.find_element(By.ID, "source")
    source.clear()
    source.send_keys("\n".join(SENTENCES[:2]))
    browser.find_element(By.ID, "translate").click()
    WebDriverWait(browser, 120).until(lambda b: len(b.find_elements(By.CSS_SELECTOR, "#translations li")) == 2)
    shown = [item.text for item in browser.find_elements(By.CSS_SELECTOR, "#translations li")]
    _, answer = post(f"{server}/translate", {"text": SENTENCES[:2]})
    assert shown == [text.strip() for text in answer["translations"]] == REFERENCES[:2]

    browser.find_elements(By.CSS_SELECTOR, "#translations li")[0].click()
    WebDriverWait(browser, 120).until(lambda b: b.find_elements(By.CSS_SELECTOR, "canvas.map"))
    _, maps = post(f"{server}/attention", {"text": SENTENCES[0]})
    heads = len(maps["encoder"][-1])
    canvases = browser.find_elements(By.CSS_SELECTOR, "canvas.map")
    assert len(canvases) == heads  # every head of the layer, side by side
    # Drawn: the map's cells hold colour (a blank canvas reads all zeros).
    painted = browser.execute_script(
        "const c = arguments[0]; const d = c.getContext('2d').getImageData(90, 90, 10, 10).data;"
        "return Array.from(d).some(v => v > 0);",
        canvases[0],
    )
    assert painted
    for number in range(3):  # encoder, decoder, encoder-decoder attention; draw() rebuilds the buttons
        browser.find_elements(By.CSS_SELECTOR, "#kinds button")[number].click()
        assert len(browser.find_elements(By.CSS_SELECTOR, "canvas.map")) == heads
    # The pointer over a cell names its tokens and weight: the last layer's encoder-decoder attention, head 1.
    canvas = browser.find_elements(By.CSS_SELECTOR, "canvas.map")[0]
    browser.execute_script("arguments[0].scrollIntoView()", canvas)
    query, key, cell, margin = 1, 2, 22, 90  # page.html's heatmap(): 22-pixel cells after 90 pixels of labels
    left, top = browser.execute_script(
        "const r = arguments[0].getBoundingClientRect(); return [r.left + arguments[0].clientLeft, "
        "r.top + arguments[0].clientTop]",
        canvas,
    )
    pointer = ActionBuilder(browser)
    pointer.pointer_action.move_to_location(
        int(left + margin + key * cell + cell // 2), int(top + margin + query * cell + cell // 2)
    )
    pointer.perform()
    weight = maps["cross"][-1][0][query][key]
    expected = f"{maps['target_tokens'][query]} \u2192 {maps['source_tokens'][key]}: {weight:.3f}"
    assert canvas.get_attribute("title") == expected
    browser.save_screenshot(str(tmp_path / "page.png"))


def test_the_api_docs_render_offline(server, browser):
    """Swagger UI at /docs draws every endpoint with this server's own copy of its scripts (the browser reaches nothing
    else: the machine is offline, and a CDN's script would leave the page blank)."""
    browser.get(server + "/docs")
    WebDriverWait(browser, 60).until(lambda b: b.find_elements(By.CSS_SELECTOR, ".opblock-summary-path"))
    paths = {element.text.strip() for element in browser.find_elements(By.CSS_SELECTOR, ".opblock-summary-path")}
    assert {"/translate", "/score", "/attention", "/health"} <= paths, paths


def test_the_page_loads_nothing_from_elsewhere(server, browser):
    browser.get(server + "/")
    loaded = browser.execute_script("return performance.getEntriesByType('resource').map(e => e.name)")
    assert all(url.startswith(server) for url in loaded), loaded
    html = browser.page_source
    assert "<script src" not in html and "<link" not in html


def test_the_page_translates_with_the_chosen_model_and_options(server, browser, exported):
    """The form's model, beams and decoding are what the page sends: each served model is offered, the page shows the
    API's translations under those options, and asking an export for attention shows the server's error."""
    browser.get(server + "/")
    WebDriverWait(browser, 60).until(lambda b: b.find_elements(By.CSS_SELECTOR, "#model option"))
    _, health = get_json(f"{server}/health")
    offered = [option.get_attribute("value") for option in browser.find_elements(By.CSS_SELECTOR, "#model option")]
    assert offered == health["models"]
    browser.execute_script(  # what the page sends, kept as it leaves
        "window.sent = []; const send = window.fetch;"
        "window.fetch = (url, init) => { if (init && init.body) window.sent.push(JSON.parse(init.body));"
        " return send(url, init); };"
    )
    source = browser.find_element(By.ID, "source")
    source.clear()
    source.send_keys("\n".join(SENTENCES))
    browser.find_element(By.ID, "beams").send_keys("2")
    browser.find_element(By.ID, "paper").click()  # transformers' own beam search
    for model in health["models"]:
        Select(browser.find_element(By.ID, "model")).select_by_value(model)
        browser.find_element(By.ID, "translate").click()
        WebDriverWait(browser, 120).until(
            lambda b: len(b.find_elements(By.CSS_SELECTOR, "#translations li")) == len(SENTENCES)
        )
        shown = [item.text for item in browser.find_elements(By.CSS_SELECTOR, "#translations li")]
        request = {"text": SENTENCES, "model": model, "num_beams": 2, "paper_decoding": False}
        if model in health["aligning"]:  # for pointing at a word (a CTranslate2 export gives none)
            request["alignments"] = True
        assert browser.execute_script("return window.sent.at(-1)") == request
        _, answer = post(f"{server}/translate", request)
        assert shown == [text.strip() for text in answer["translations"]], model
    if exported is not None:  # the last one chosen: attention needs a PyTorch model
        browser.find_elements(By.CSS_SELECTOR, "#translations li")[0].click()
        WebDriverWait(browser, 60).until(lambda b: "CTranslate2" in b.find_element(By.ID, "status").text)
        assert browser.find_element(By.ID, "status").get_attribute("class") == "error"


@pytest.mark.slow  # over 5 s on 2 busy cores (2026-11-26)
def test_the_page_sends_the_key_a_server_asks_for(checkpoint, browser, tmp_path):
    """A server that requires a key: without one the page shows the server's 401 message; with the key typed in,
    the page sends it as a bearer header and shows the translations."""
    key = "page-test-key-0123456789"
    with running_server([str(checkpoint), "--api_key", key], tmp_path / "log") as (url, _):
        browser.get(url + "/")
        WebDriverWait(browser, 60).until(lambda b: b.find_elements(By.CSS_SELECTOR, "#model option"))
        source = browser.find_element(By.ID, "source")
        source.clear()
        source.send_keys(SENTENCES[0])
        browser.find_element(By.ID, "translate").click()
        WebDriverWait(browser, 60).until(lambda b: "no API key" in b.find_element(By.ID, "status").text)
        assert browser.find_element(By.ID, "status").get_attribute("class") == "error"
        browser.find_element(By.ID, "key").send_keys(key)
        browser.find_element(By.ID, "translate").click()
        WebDriverWait(browser, 120).until(lambda b: b.find_elements(By.CSS_SELECTOR, "#translations li"))
        assert browser.find_element(By.CSS_SELECTOR, "#translations li").text == REFERENCES[0]


def test_a_pasted_paragraph_comes_back_with_all_its_sentences(server, browser):
    """A paragraph a line: the page sends each line as a text, the server splits it into sentences, and every
    sentence's translation (what the model learned, known in advance) is shown, joined as the paragraph was."""
    browser.get(server + "/")
    assert "one sentence a line" not in browser.find_element(By.TAG_NAME, "body").text.lower()
    source = browser.find_element(By.ID, "source")
    source.clear()
    source.send_keys(f"{SENTENCES[0]} {SENTENCES[1]} {SENTENCES[2]}\n\n{SENTENCES[2]}  {SENTENCES[0]}")
    browser.find_element(By.ID, "translate").click()
    WebDriverWait(browser, 120).until(lambda b: len(b.find_elements(By.CSS_SELECTOR, "#translations li")) == 2)
    shown = [item.text for item in browser.find_elements(By.CSS_SELECTOR, "#translations li")]
    # The browser shows runs of spaces as one.
    assert shown == [" ".join(REFERENCES), f"{REFERENCES[2]} {REFERENCES[0]}"]


def test_pointing_at_a_translated_word_lights_up_its_aligned_source_words(server, browser):
    """A paragraph of two sentences pasted and translated: pointing at each word of the translation lights up exactly
    the source words the server's alignment pairs name for it (read here from the server's own JSON answer), the
    second sentence's words counted after the first's."""
    paragraph = f"{SENTENCES[0]} {SENTENCES[1]}"
    browser.get(server + "/")
    WebDriverWait(browser, 60).until(lambda b: b.find_elements(By.CSS_SELECTOR, "#model option"))
    source = browser.find_element(By.ID, "source")
    source.clear()
    source.send_keys(paragraph)
    browser.find_element(By.ID, "translate").click()
    WebDriverWait(browser, 120).until(lambda b: b.find_elements(By.CSS_SELECTOR, "#translations li .word"))
    _, answer = post(f"{server}/translate", {"text": [paragraph], "alignments": True})
    (translation,), (pairs,) = answer["translations"], answer["alignments"]
    assert translation == f"{REFERENCES[0]} {REFERENCES[1]}"
    targets = browser.find_elements(By.CSS_SELECTOR, "#translations li .word")
    assert [span.text for span in targets] == translation.split()
    second = len(SENTENCES[0].split())
    assert any(s >= second for s, _ in pairs), "the second sentence's words are aligned too"
    for target, span in enumerate(targets):
        webdriver.ActionChains(browser).move_to_element(span).perform()
        lit = browser.find_elements(By.CSS_SELECTOR, "#aligned-source .word.lit")
        expected = sorted({s for s, t in pairs if t == target})
        assert [int(word.get_attribute("data-word")) for word in lit] == expected, target
        assert [word.text for word in lit] == [paragraph.split()[s] for s in expected]
        assert "pointed" in span.get_attribute("class")
    shown = browser.find_elements(By.CSS_SELECTOR, "#aligned-source .word")
    assert [word.text for word in shown] == paragraph.split()


def test_the_glossary_box_sends_its_terms_and_a_bad_line_is_named(server, browser):
    """Terms typed as "source = target" lines reach the server as its glossary: the page shows what the API answers
    with that glossary; a line without one "=" is named in the status, and nothing is sent."""
    browser.get(server + "/")
    WebDriverWait(browser, 60).until(lambda b: b.find_elements(By.CSS_SELECTOR, "#model option"))
    source = browser.find_element(By.ID, "source")
    source.clear()
    source.send_keys("\n".join(SENTENCES[:2]))
    glossary = browser.find_element(By.ID, "glossary")
    glossary.send_keys("Snow = Wiese\n\nbike = Rad")
    browser.find_element(By.ID, "translate").click()
    WebDriverWait(browser, 120).until(lambda b: len(b.find_elements(By.CSS_SELECTOR, "#translations li")) == 2)
    shown = [item.text for item in browser.find_elements(By.CSS_SELECTOR, "#translations li")]
    _, answer = post(f"{server}/translate", {"text": SENTENCES[:2], "glossary": {"Snow": "Wiese", "bike": "Rad"}})
    _, free = post(f"{server}/translate", {"text": SENTENCES[:2]})
    assert shown == [text.strip() for text in answer["translations"]]
    assert answer["translations"] != free["translations"]  # the terms changed something
    glossary.clear()
    glossary.send_keys("snow Wiese")
    browser.find_element(By.ID, "translate").click()
    WebDriverWait(browser, 30).until(lambda b: b.find_element(By.ID, "status").get_attribute("class") == "error")
    assert (
        'glossary line 1: "snow Wiese"; expected "source term = target term"'
        in browser.find_element(By.ID, "status").text
    )
