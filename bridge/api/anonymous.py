"""What a request without a key must show to be let in by `api.allow_anonymous_loopback`.

Coming from loopback is not enough: a web page open in a browser on the same machine sends its
requests from loopback too. Such a page can send a "simple" cross-origin request (GET, or a POST of
`text/plain` or a form) without the browser asking first, and a DNS-rebinding page can send them
under its own host name. So an anonymous request is served only when:

- its `Host` is a loopback name (`localhost`, 127.0.0.0/8, `::1`) or the listener's configured host
  (a rebinding page's requests carry the page's own name);
- it is not cross-origin: an `Origin` header names this listener, and `Sec-Fetch-Site`, when sent,
  says `same-origin` or `none` (the API never answers with CORS headers, so a browser lets no other
  origin read an answer or send a preflighted request);
- a change (any method but GET) carries the `X-Hookbridge` header or a JSON content type: either one
  makes a browser ask the server first (a preflight), which this API never allows.

`hookbridge ctl` and the dashboard send `X-Hookbridge` on every request. Requests with a key are not
concerned: a browser cannot add an `Authorization` header to another origin's request unasked.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from aiohttp import web

from bridge.conf.hosts import is_loopback

MARK_HEADER = "X-Hookbridge"  # any value: a header no browser adds to a cross-origin request by itself
_READS = frozenset({"GET", "HEAD"})


def refusal(request: web.Request, listener_host: str) -> str | None:
    """Why an anonymous loopback request is refused, or None when it may be served."""
    host = _hostname(request.headers.get("Host", ""))
    if host is None or not (is_loopback(host) or host == listener_host.lower().strip("[]")):
        return "Host must be a loopback name or the listener's address without an API key"
    origin = request.headers.get("Origin")
    if origin is not None and origin != "null" and urlsplit(origin).netloc.lower() != request.headers["Host"].lower():
        return "cross-origin requests are refused"
    if origin == "null" or request.headers.get("Sec-Fetch-Site", "same-origin") not in ("same-origin", "none"):
        return "cross-origin requests are refused"
    marked = MARK_HEADER in request.headers or request.content_type == "application/json"
    if request.method not in _READS and not marked:
        return f"a change without an API key needs the {MARK_HEADER} header or a JSON body"
    return None


def _hostname(header: str) -> str | None:
    """The host of a `Host` header, lower case, without its port and brackets; None if malformed."""
    header = header.strip().lower()
    if not header:
        return None
    if header.startswith("["):  # [::1]:9100
        end = header.find("]")
        rest = header[end + 1 :]
        if end < 0 or (rest and not (rest.startswith(":") and rest[1:].isdigit())):
            return None
        return header[1:end]
    name, _, port = header.partition(":")
    if port and not port.isdigit():
        return None
    return name
