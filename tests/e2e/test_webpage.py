"""The web chat page (GET /), driven in headless Chromium by Playwright: the key asked once, a model
picked, an answer streamed and rendered, a long answer stopped (the server cancels the
generation), the conversation kept across a reload, Markdown rendered without letting HTML
through, thinking folded. A screenshot is kept under build/test-artifacts/ (not committed)."""
import json
import os
import time

import httpx
import pytest

from server_util import KEY, ROOT, Server, free_port, make_test_model

CHROMIUM = "/usr/bin/chromium"
pytestmark = pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="Chromium is not installed (/usr/bin/chromium): "
                                "the web page is tested in a real browser only")
ARTIFACTS = ROOT / "build" / "test-artifacts"
NO_END = json.dumps({"logit_bias": {"3": -100, "1": -100}})  # the fixture model's end tokens never come


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    d = tmp_path_factory.mktemp("models")
    model = make_test_model("llama", d / "llama", 320)
    sock = str(tmp_path_factory.mktemp("sock") / "s.sock")
    s = Server("--model", f"llama={model}", socket_path=sock, port=free_port(), key=KEY, env={"SARAGOSSA_LOG": "info"})
    yield s
    s.stop()


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield b
        b.close()


def url(srv):
    return f"http://127.0.0.1:{srv.port}/"


def open_page(browser, srv):
    page = browser.new_page()
    page.goto(url(srv))
    page.wait_for_selector("#key-dialog:not([hidden])")
    page.fill("#key-input", KEY)
    page.click("#key-save")
    page.wait_for_function("document.querySelectorAll('#model option').length > 0")
    return page


def settings(page, max_tokens, temperature, extra=""):
    page.click("#settings summary")
    page.fill("#max-tokens", str(max_tokens))
    page.fill("#temperature", str(temperature))
    page.fill("#extra", extra)
    page.click("#settings summary")


def generated_tokens(srv):
    with srv.client() as c:
        for line in c.get("/metrics").text.splitlines():
            if line.startswith('saragossa_generated_tokens_total{model="llama"}'):
                return float(line.split()[-1])
    return 0.0


def test_the_page_is_served_without_the_key_on_both_listeners(srv):
    r = httpx.get(url(srv))
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
    assert "<script>" in r.text and "src=" not in r.text.split("<script>")[1]  # nothing loaded from elsewhere
    with srv.client(auth=False) as c:  # the Unix socket
        assert c.get("/").text == r.text
    assert httpx.get(url(srv) + "v1/models").status_code == 401


def test_chat_stream_stop_and_reload_in_chromium(srv, browser):
    page = open_page(browser, srv)
    page.select_option("#model", "llama")
    settings(page, 12, 0)
    page.fill("#prompt", "Hello, what is the capital of France?")
    page.click("#send")
    # while it streams the line counts pieces; the answer's end gives its tokens and speed
    page.wait_for_function("(e => e !== null && e.innerText.includes('tok/s'))(document.querySelector('.msg.assistant .stats'))",
                           timeout=60000)
    s = page.inner_text(".msg.assistant .stats")
    assert "12 tokens" in s and "tok/s" in s and "prompt tokens reused" in s, s
    first = page.inner_text(".msg.assistant .content")

    # a long answer: it streams in (the text grows while Stop shows), then Stop ends it
    before = generated_tokens(srv)
    settings(page, 3000, 1, NO_END)
    page.fill("#prompt", "Tell me a long story.")
    page.press("#prompt", "Enter")
    page.wait_for_selector("#stop:not([hidden])")
    page.wait_for_function("(document.querySelectorAll('.msg.assistant')[1].innerText || '').length > 20")
    n1 = len(page.inner_text(".msg.assistant >> nth=1"))
    page.wait_for_function(f"document.querySelectorAll('.msg.assistant')[1].innerText.length > {n1}")
    page.click("#stop")
    page.wait_for_selector("#send:not([hidden])")
    assert "stopped" in page.inner_text(".msg.assistant >> nth=1 >> .stats")
    t0 = time.time()
    while "cancelled after" not in srv.stderr() and time.time() - t0 < 10:
        time.sleep(0.05)
    log = [ln for ln in srv.stderr().splitlines() if "cancelled after" in ln]
    assert log, "the server did not cancel the generation"
    n = int(log[-1].split("cancelled after ")[1].split()[0])
    assert 0 < n < 3000
    with srv.client() as c:
        assert c.get("/health").json()["busy"] is False
    assert 0 < generated_tokens(srv) - before < 3000

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "webpage.png"), full_page=True)

    # the conversation is kept in the browser; the key too, for this tab
    page.reload()
    page.wait_for_selector(".msg.assistant .stats")
    assert page.locator(".msg.user").count() == 2 and page.locator(".msg.assistant").count() == 2
    assert page.inner_text(".msg.assistant .content") == first
    assert page.locator("#key-dialog").is_hidden()
    page.wait_for_function("document.querySelectorAll('#model option').length > 0")
    assert page.input_value("#model") == "llama"

    # New chat forgets it
    page.click("#new-chat")
    assert page.locator(".msg").count() == 0
    page.close()


def test_markdown_is_rendered_and_html_is_not_let_through(srv, browser):
    page = open_page(browser, srv)
    conv = [{"role": "user", "content": "<b>hi</b>"},
            {"role": "assistant", "done": True, "reasoning": "first I <i>think</i>",
             "content": "# Title\n\nSome **bold**, *em* and `x < y`.\n\n```python\nprint('<script>alert(1)</script>')\n```\n\n"
                        "- one\n- two\n\n<img src=x onerror=\"window.pwned=1\"> [ok](https://example.org) "
                        "[bad](javascript:alert(1))"},
            {"role": "assistant", "done": True, "content": "<think>inline thoughts</think>The answer."}]
    page.evaluate(f"localStorage.setItem('saragossa.conversation', {json.dumps(json.dumps(conv))})")
    page.reload()
    page.wait_for_selector(".msg.assistant h1")
    a = page.locator(".msg.assistant").first
    assert a.locator("h1").inner_text() == "Title"
    assert a.locator("strong").inner_text() == "bold" and a.locator("em").inner_text() == "em"
    assert a.locator("pre code.language-python").inner_text() == "print('<script>alert(1)</script>')"
    assert a.locator("li").count() == 2
    assert a.locator("img").count() == 0 and a.locator("script").count() == 0
    assert page.evaluate("window.pwned") is None
    links = a.locator("a")
    assert links.count() == 1 and links.get_attribute("href") == "https://example.org"
    assert page.locator(".msg.user").inner_text() == "<b>hi</b>"
    think = a.locator("details.think")
    assert think.count() == 1 and think.get_attribute("open") is None  # folded
    assert "first I <i>think</i>" in think.inner_text() or think.locator("i").count() == 0
    second = page.locator(".msg.assistant").nth(1)
    assert second.locator("details.think").count() == 1
    assert second.locator(".content").inner_text() == "The answer."
    page.close()
