"""GET /metrics: Prometheus' text format, read back with prometheus_client's own parser after real
requests to a served fixture model; the counts move by what the requests did."""
import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from server_util import KEY, Server, free_port, make_test_model

HELLO = [{"role": "user", "content": "Hello, what is the capital of France? Answer in one word please."}]


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    d = tmp_path_factory.mktemp("models")
    model = make_test_model("llama", d / "llama", 320)
    s = Server("--model", f"llama={model}", port=free_port(), key=KEY)
    yield s
    s.stop()


def scrape(srv):
    with srv.client() as c:
        r = c.get("/metrics")
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/plain; version=0.0.4")
    out = {}
    for fam in text_string_to_metric_families(r.text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
        out[("__type__", fam.name)] = fam.type
    return out


def val(m, name, **labels):
    return m.get((name, tuple(sorted(labels.items()))), 0.0)


def test_metrics_need_the_key_and_declare_their_types(srv):
    with srv.client(auth=False) as c:
        r = c.get("/metrics")
    assert r.status_code == 401
    m = scrape(srv)
    assert m[("__type__", "saragossa_http_requests")] == "counter"
    assert m[("__type__", "saragossa_time_to_first_token_seconds")] == "histogram"
    assert m[("__type__", "saragossa_decode_tokens_per_second")] == "histogram"
    assert m[("__type__", "saragossa_queue_depth")] == "gauge"
    assert val(m, "saragossa_model_resident", model="llama") == 1
    assert val(m, "saragossa_models_resident") == 1 and val(m, "saragossa_queue_depth") == 0


def test_counts_move_with_real_requests(srv):
    before = scrape(srv)
    usage = []
    with srv.client() as c:
        for _ in range(2):
            r = c.post("/v1/chat/completions", json={"model": "llama", "messages": HELLO, "max_tokens": 6,
                                                     "temperature": 0})
            assert r.status_code == 200, r.text
            usage.append(r.json()["usage"])
            t = r.json()["timings"]
            assert t["predicted_n"] == 6 and t["predicted_per_second"] > 0 and t["cache_n"] == usage[-1][
                "prompt_tokens_details"]["cached_tokens"]
        assert c.post("/v1/chat/completions", json={"model": "nope", "messages": HELLO}).status_code == 404
        assert c.post("/v1/chat/completions", content=b"{not json").status_code == 400
    after = scrape(srv)

    def delta(name, **labels):
        return val(after, name, **labels) - val(before, name, **labels)

    route = "/v1/chat/completions"
    assert delta("saragossa_http_requests_total", route=route, status="200") == 2
    assert delta("saragossa_http_requests_total", route=route, status="404") == 1
    assert delta("saragossa_http_requests_total", route=route, status="400") == 1
    assert delta("saragossa_generations_total", model="llama") == 2
    assert delta("saragossa_prompt_tokens_total", model="llama") == sum(u["prompt_tokens"] for u in usage)
    assert delta("saragossa_generated_tokens_total", model="llama") == 12
    cached = sum(u["prompt_tokens_details"]["cached_tokens"] for u in usage)
    assert delta("saragossa_prefix_cache_reused_tokens_total", model="llama") == cached
    hits = sum(1 for u in usage if u["prompt_tokens_details"]["cached_tokens"])
    assert delta("saragossa_prefix_cache_hits_total", model="llama") == hits
    assert delta("saragossa_prefix_cache_misses_total", model="llama") == 2 - hits
    assert cached > 0, "the second identical prompt reuses the first one's tokens"
    for h in ("saragossa_decode_tokens_per_second", "saragossa_time_to_first_token_seconds"):
        assert delta(h + "_count", model="llama") == 2
        assert delta(h + "_bucket", model="llama", le="+Inf") == 2
        assert delta(h + "_sum", model="llama") > 0
    # buckets are cumulative
    b = [v for (n, lab), v in after.items() if n == "saragossa_time_to_first_token_seconds_bucket"]
    assert b == sorted(b)


def test_a_scrape_counts_itself_after_it_and_the_page_needs_no_key(srv):
    with httpx.Client(base_url=f"http://127.0.0.1:{srv.port}") as c:
        r = c.get("/")
        assert c.get("/metrics").status_code == 401
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
    m1 = scrape(srv)
    m2 = scrape(srv)
    assert val(m2, "saragossa_http_requests_total", route="/metrics", status="200") == \
        val(m1, "saragossa_http_requests_total", route="/metrics", status="200") + 1
    assert val(m2, "saragossa_http_requests_total", route="/", status="200") >= 1
    assert val(m2, "saragossa_http_requests_total", route="/metrics", status="401") >= 1


def test_label_values_are_escaped_and_read_back_whole(srv):
    weird = 'we"ird\\name\nwith a newline'
    with srv.client() as c:
        r = c.post("/api/copy", json={"source": "llama", "destination": weird})
        assert r.status_code == 200, r.text
        r = c.post("/v1/chat/completions", json={"model": weird, "messages": HELLO, "max_tokens": 3})
        assert r.status_code == 200, r.text
        # sampled: the answer may end before 3 tokens; the counter holds what it says it generated
        n = r.json()["usage"]["completion_tokens"]
        assert 1 <= n <= 3
        assert c.post("/metrics").status_code == 405
    m = scrape(srv)
    assert val(m, "saragossa_generated_tokens_total", model=weird) == n
    assert val(m, "saragossa_model_resident", model=weird) == 1
    assert val(m, "saragossa_http_requests_total", route="/metrics", status="405") == 1
    with srv.client() as c:
        assert c.request("DELETE", "/api/delete", json={"model": weird}).status_code == 200
    assert val(scrape(srv), "saragossa_model_resident", model=weird) == 0
