"""Webhooks, pure (issue 25, item 3): where a webhook may go (SSRF), the Standard Webhooks
signature verified by the library, the retry schedule."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from decide.webhooks.delivery import Backoff
from decide.webhooks.endpoints import new_secret
from decide.webhooks.send import signed_headers
from decide.webhooks.urls import RefusedUrl, WebhookPolicy, check_url

CLOSED = WebhookPolicy()


@pytest.mark.parametrize("url, kind", [
    ("http://127.0.0.1:8080/hook", "loopback"), ("http://[::1]/hook", "loopback"),
    ("http://localhost/hook", "loopback"), ("http://api.localhost/hook", "loopback"),
    ("http://10.1.2.3/hook", "private"), ("http://192.168.0.10/", "private"),
    ("http://172.16.5.4/", "private"), ("http://169.254.169.254/latest/meta-data", "link-local"),
    ("http://[fe80::1]/", "link-local"), ("http://0.0.0.0/", "unspecified"),
    ("http://224.0.0.1/", "multicast"), ("http://240.0.0.1/", "reserved"),
    ("http://[::ffff:127.0.0.1]/", "loopback"), ("http://[fc00::1]/", "private"),
])
def test_non_public_addresses_are_refused_by_default(url, kind):
    with pytest.raises(RefusedUrl, match=f"an? {kind} address"):
        check_url(url, CLOSED)


@pytest.mark.parametrize("url, kind", [
    ("http://[2002:7f00:1::]/", "127.0.0.1, a loopback"),  # 6to4 of 127.0.0.1
    ("http://[2002:a9fe:a9fe::]/", "169.254.169.254, a link-local"),  # 6to4 metadata
    ("http://[2002:0a00:0001::1]/", "10.0.0.1, a private"),
    ("http://[fec0::1]/", "fec0::1, a site-local"),
])
def test_ipv6_forms_that_lead_to_non_public_places_are_refused(url, kind):
    with pytest.raises(RefusedUrl, match=kind):
        check_url(url, CLOSED)


def test_a_teredo_address_is_judged_by_its_client_address_too():
    teredo_loopback = "2001:0:4136:e378:8000:63bf:80fe:fffe"  # client 127.1.0.1
    allowing_teredo = WebhookPolicy.of(False, ["2001::/32"])
    with pytest.raises(RefusedUrl, match=r"127\.1\.0\.1, a loopback"):
        check_url(f"http://[{teredo_loopback}]/", allowing_teredo)
    check_url("http://[2002:5db8:d822::1]/", CLOSED)  # 6to4 of a public address passes


@pytest.mark.parametrize("url, problem", [
    ("ftp://example.com/x", "http or https"), ("example.com/hook", "http or https"),
    ("http:///nohost", "must name a host"), ("https://user:pw@example.com/", "credentials"),
    ("", "non-empty string"), (42, "non-empty string"), ("http://example.com:99999/", "valid"),
    ("https://example.com/" + "a" * 3000, "at most 2048"),
])
def test_malformed_urls_are_refused_saying_why(url, problem):
    with pytest.raises(RefusedUrl, match=problem):
        check_url(url, CLOSED)


@pytest.mark.parametrize("url", [
    "http://192.0.0.192/", "http://[3fff::1]/", "http://100.64.0.1/", "http://198.18.0.1/",
    "http://192.0.2.1/", "http://203.0.113.9/", "http://[2001:db8::1]/",
    "http://[64:ff9b::a00:1]/", "http://[100::1]/", "http://255.255.255.255/",
])
def test_every_special_purpose_block_is_refused(url):
    """IANA's special-purpose blocks (192.0.0.192 answered 404 from a cloud's metadata
    service; 3fff::/20 is documentation): the running Python called some of them public."""
    with pytest.raises(RefusedUrl, match="webhooks reach public addresses only"):
        check_url(url, CLOSED)


def test_the_rule_does_not_follow_the_running_pythons_address_tables(monkeypatch):
    import ipaddress

    for kind in (ipaddress.IPv4Address, ipaddress.IPv6Address):
        for name in ("is_private", "is_global", "is_reserved", "is_loopback", "is_link_local"):
            said = name == "is_global"  # Python's tables call every address public
            monkeypatch.setattr(kind, name, property(lambda self, said=said: said))
    for url in ("http://10.1.2.3/", "http://127.0.0.1/", "http://[fe80::1]/",
                "http://169.254.169.254/"):
        with pytest.raises(RefusedUrl):
            check_url(url, CLOSED)
    assert check_url("http://1.1.1.1/", CLOSED).port == 80
    assert check_url("http://[2606:4700:4700::1111]/", CLOSED).port == 80


def test_public_addresses_and_names_pass():
    assert check_url("https://hooks.example.com/x?y=1", CLOSED).port == 443
    assert check_url("http://8.8.8.8:8080/", CLOSED).port == 8080


def test_a_name_is_judged_by_every_address_it_resolves_to():
    resolving = {"good.test": ["93.184.216.34"], "evil.test": ["93.184.216.34", "10.0.0.5"]}

    def resolve(host: str, port: int) -> list[str]:
        if host not in resolving:
            raise OSError("no such name")
        return resolving[host]

    check_url("https://good.test/", CLOSED, resolve)
    with pytest.raises(RefusedUrl, match=r"evil\.test resolves to a private address") as refused:
        check_url("https://evil.test/", CLOSED, resolve)
    assert "10.0.0.5" not in str(refused.value)  # a caller is not told the network's names
    check_url("https://unknown.test/", CLOSED, resolve)  # checked again when it is sent


def test_an_operator_may_allow_private_addresses_or_chosen_networks():
    check_url("http://127.0.0.1:9/", WebhookPolicy.of(True, []))
    networks = WebhookPolicy.of(False, ["127.0.0.0/8", "10.1.0.0/16"])
    check_url("http://127.0.0.1:9/", networks)
    check_url("http://localhost:9/x", WebhookPolicy.of(False, ["127.0.0.1/32", "::1/128"]))
    check_url("http://10.1.200.3/", networks)
    with pytest.raises(RefusedUrl, match="private"):
        check_url("http://10.2.0.1/", networks)
    with pytest.raises(ValueError):
        WebhookPolicy.of(False, ["not a network"])


def test_a_signature_verifies_with_the_library_and_fails_when_tampered():
    secret = new_secret()
    assert secret.startswith("whsec_")
    body = json.dumps({"type": "job.finished", "data": {"id": "job_1"}})
    headers = signed_headers(secret, "msg_1", body)
    assert headers["webhook-signature"].startswith("v1,")
    assert Webhook(secret).verify(body, headers) == json.loads(body)
    with pytest.raises(WebhookVerificationError):
        Webhook(secret).verify(body.replace("job_1", "job_2"), headers)
    with pytest.raises(WebhookVerificationError):
        Webhook(new_secret()).verify(body, headers)
    stale = signed_headers(secret, "msg_1", body, at=datetime.now(tz=UTC) - timedelta(hours=1))
    with pytest.raises(WebhookVerificationError):  # a replay outside the library's tolerance
        Webhook(secret).verify(body, stale)


def test_the_retry_waits_double_up_to_the_longest_and_stop_at_the_deadline():
    backoff = Backoff(first=5.0, longest=60.0, give_up=3600.0)
    assert [backoff.retry_in(attempts, 0.0) for attempts in (1, 2, 3, 4, 5, 6)] == [
        5.0, 10.0, 20.0, 40.0, 60.0, 60.0]
    assert backoff.retry_in(9, 3590.0) == 10.0  # the last try lands on the deadline
    assert backoff.retry_in(10, 3600.0) is None


def test_a_finished_jobs_event_says_its_usage_as_its_view_does():
    """The ``job.finished`` payload's usage is the job's own (``JobRecord.usage``), the build
    that decoded it included; a job no runner answered has none."""
    from decide.store.jobs import JobRecord
    from decide.webhooks.payloads import job_data

    def record(result):
        return JobRecord(id="job_1", owner="o", model="m", priority="background",
                         status="succeeded" if result else "cancelled", request=None,
                         metadata=None, result=result, error=None, rows=4, input_tokens=30,
                         idempotency_key=None, request_hash=None, cancel_requested=False,
                         decode_runs=1, created_at=1.0, started_at=2.0, finished_at=3.0,
                         decode_ms=5.0)

    answered = job_data(record({"model": "m", "answers": {}, "x_build": "x86-64-v3"}))
    assert answered["usage"] == {"input_tokens": 30, "output_tokens": 0, "rows": 4,
                                 "x_build": "x86-64-v3"}
    assert job_data(record(None))["usage"]["x_build"] is None


def test_a_bad_allowed_network_stops_the_settings_naming_the_setting(monkeypatch):
    from pydantic import ValidationError

    from decide.config.settings import Settings

    monkeypatch.setenv("DECIDE_WEBHOOK_ALLOWED_CIDRS", "127.0.0.0/8, 10.0.0.0/33")
    with pytest.raises(ValidationError, match=r"DECIDE_WEBHOOK_ALLOWED_CIDRS: '10\.0\.0\.0/33'"):
        Settings()
    monkeypatch.setenv("DECIDE_WEBHOOK_ALLOWED_CIDRS", "127.0.0.0/8, ::1/128")
    assert Settings().webhook_cidr_list == ["127.0.0.0/8", "::1/128"]


def test_a_log_names_a_webhook_urls_origin_only():
    from decide.webhooks.delivery import origin

    assert origin("https://hooks.example.com/t/abc?token=x") == "https://hooks.example.com"
    assert origin("http://[2001:db8::1]:8080/x?k=v") == "http://[2001:db8::1]:8080"


@pytest.mark.parametrize("url", [
    "https://example.com/a\u0001b", "https://example.com/\u0000", "https://example.com/\u007f",
    "https://example.com/a b", "https://example.com/\u0085", "https://exa\tmple.com/",
])
def test_control_characters_and_white_space_are_refused(url):
    with pytest.raises(RefusedUrl, match="white space or control characters"):
        check_url(url, CLOSED)


@pytest.mark.parametrize("url", ["http://a..b/", "https://" + "a" * 64 + ".example.com/"])
def test_a_host_that_is_no_valid_name_is_refused_naming_it(url):
    with pytest.raises(RefusedUrl, match="is not a valid host name"):
        check_url(url, CLOSED, lambda host, port: ["93.184.216.34"])


def test_an_international_host_name_is_kept_in_its_ascii_form():
    """The form it is resolved and sent in (IDNA): a request's Host header is ASCII."""
    target = check_url("https://münchen.example/hook?x=1", CLOSED,
                       lambda host, port: ["93.184.216.34"])
    assert target.url == "https://xn--mnchen-3ya.example/hook?x=1"
    assert target.host == "xn--mnchen-3ya.example"
    assert check_url("https://BÜCHER.example:8443/", CLOSED).url == (
        "https://xn--bcher-kva.example:8443/")
    ascii_url = "https://Hooks.Example.com/x"
    assert check_url(ascii_url, CLOSED).url == ascii_url  # an ASCII URL as it was given


def test_the_service_log_leaves_out_httpx_request_lines_that_carry_whole_urls(monkeypatch):
    """httpx logs each request's whole URL at INFO (a webhook's ?token=... with it); the
    service's log is INFO for its own lines only."""
    import logging

    from decide.cli.service import configure_logging

    root = logging.getLogger()
    monkeypatch.setattr(root, "handlers", [])  # basicConfig acts on a root without handlers
    monkeypatch.setattr(root, "level", root.level)
    for name in ("httpx", "httpcore"):
        monkeypatch.setattr(logging.getLogger(name), "level", logging.NOTSET)
    configure_logging()
    assert logging.getLogger("decide.worker").isEnabledFor(logging.INFO)
    assert not logging.getLogger("httpx").isEnabledFor(logging.INFO)
    assert not logging.getLogger("httpcore").isEnabledFor(logging.INFO)
    assert logging.getLogger("httpx").isEnabledFor(logging.WARNING)
