"""Outgoing notifications: a JSON POST to a webhook, retried by Temporal on failure."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

from temporalio import activity

from phasegate.domain.errors import NotifyFailed, NotifyInvalid
from phasegate.domain.session.plan import NotifyRequest
from phasegate.temporal import application_error

__all__ = ["notify_webhook"]


@activity.defn(name="notify_webhook")
def notify_webhook(req: NotifyRequest) -> int:
    """POST ``req.payload`` as JSON to ``req.url``; returns the HTTP status.

    A non-2xx answer or a network error raises, so the activity's retry policy
    tries again; a malformed URL fails at once (non-retryable).
    """
    if not req.url.startswith(("http://", "https://")):
        raise application_error(
            NotifyInvalid(
                f"not an http(s) URL: {req.url}",
                where="notify_url",
                hint="set notify_url to an http:// or https:// address",
            )
        )
    body = json.dumps(req.payload, default=str).encode()
    request = urllib.request.Request(
        req.url,
        data=body,
        method="POST",
        headers={"Content-Type": "application/json", "User-Agent": "phasegate"},
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        raise application_error(
            NotifyFailed(f"{req.url} answered HTTP {exc.code}"), non_retryable=False
        ) from None
    except (urllib.error.URLError, OSError) as exc:
        raise application_error(
            NotifyFailed(f"{req.url} unreachable: {exc}"), non_retryable=False
        ) from None
