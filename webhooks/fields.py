"""Webhooks at the front door (issue 25, item 3): the ``x_webhook`` field of a job or batch and
an endpoint's URL checked (SSRF: the address, and where a name resolves to), and the key's
signing secret made, and shown once, when its first ``x_webhook`` URL arrives."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from decide.api.context import ApiContext
from decide.api.errors import invalid
from decide.core.questions import json_kind
from decide.transport.name_lookup import lookup_slots, resolve_host, resolve_within
from decide.webhooks import endpoints
from decide.webhooks.urls import RefusedUrl, WebhookPolicy, check_url

T = TypeVar("T")


LOOKUP_SECONDS = 2.0
"""How long a request waits for its webhook URL's name to resolve: a name that has not in
time passes here (it is looked up and checked again whenever a webhook is sent), so a slow
DNS server a caller controls cannot hold the front door's threads."""
_LOOKUPS = lookup_slots()


def resolve_briefly(host: str, port: int) -> list[str]:
    return resolve_within(resolve_host, host, port, LOOKUP_SECONDS, _LOOKUPS)


def policy(ctx: ApiContext) -> WebhookPolicy:
    settings = ctx.settings
    return WebhookPolicy.of(settings.webhook_allow_private, settings.webhook_cidr_list)


def checked_url(ctx: ApiContext, url: Any, loc: list[Any]) -> str:
    """The URL when a webhook may go there; else a 422 at ``loc`` saying why. A name is
    resolved and each of its addresses judged (and judged again when a webhook is sent)."""
    try:
        return check_url(url, policy(ctx), resolve_briefly).url
    except RefusedUrl as refused:
        raise invalid("body", loc, str(refused), "url_refused") from refused


def webhook_url(ctx: ApiContext, value: Any) -> str | None:
    """The URL of a body's ``x_webhook`` (``{"url": ...}``), None when absent."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise invalid("body", ["x_webhook"], f"x_webhook must be an object {{\"url\": ...}}, "
                      f"not {json_kind(value)}", "dict_type")
    unknown = sorted(set(value) - {"url"})
    if unknown:
        raise invalid("body", ["x_webhook", unknown[0]], "x_webhook takes only url",
                      "extra_forbidden")
    return checked_url(ctx, value.get("url"), ["x_webhook", "url"])


def with_signing_secret(ctx: ApiContext, owner: str, url: str | None,
                        submit: Callable[[], T],
                        stored_url: Callable[[T], str | None] | None = None
                        ) -> tuple[T, str | None]:
    """``submit()``'s result, and the key's signing secret when this call shows it: a key's
    first ``x_webhook`` URL makes the secret (before the submission, so its event is signed),
    and the first submission that stores a URL (``stored_url`` of its result is ``url``; an
    idempotent replay answers an older job) shows it, once. A refused one shows nothing and
    leaves the secret for the next (issue 35, item 8: a secret taken back by a refused
    submission left racing ones with a URL and no secret)."""
    if url is not None:
        endpoints.ensure_signing_secret(ctx.db, owner)
    result = submit()
    if url is None or (stored_url is not None and stored_url(result) != url):
        return result, None
    return result, endpoints.show_signing_secret(ctx.db, owner)


def job_url(accepted: Any) -> str | None:
    """The URL a submission stored: a new job's own, none for a replay (an older job)."""
    return accepted.job.webhook_url if accepted.created else None


def shown(url: str | None, secret: str | None) -> dict[str, Any]:
    """The ``x_webhook`` a 202 answers with: the URL, and the secret the once it is made."""
    if url is None:
        return {}
    return {"x_webhook": {"url": url, **({"secret": secret} if secret else {})}}




def async_webhook(ctx: ApiContext, body: Any, waits: bool) -> str | None:
    """A System One body's ``x_webhook`` URL: only a call answered at once
    (``Prefer: respond-async``) may name one; a sync call has its answer in hand."""
    value = body.get("x_webhook") if isinstance(body, dict) else None
    if value is not None and waits:
        raise invalid("body", ["x_webhook"], "x_webhook needs the header Prefer: "
                      "respond-async (a sync call is answered with its decision)",
                      "value_error")
    return webhook_url(ctx, value)
